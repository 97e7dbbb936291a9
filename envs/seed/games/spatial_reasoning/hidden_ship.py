"""Skill: Spatial Reasoning. Mechanic: multi-turn probing with partial rewards (each new hit pays a little). Battleship: sink two hidden ships."""
import random


def last_boxed(text):
    """Return the content of the last complete \\boxed{...} in text (nested braces allowed), or None."""
    end = len(text)
    while (start := text.rfind("\\boxed{", 0, end)) >= 0:
        depth = 0
        for j in range(start + 6, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                return text[start + 7:j].strip()
        end = start
    return None


def placements(size, length):
    """Every straight (horizontal or vertical) ship of this length, as a frozenset of (row, col)."""
    out = []
    for r in range(size):
        for c in range(size - length + 1):
            out.append(frozenset((r, c + i) for i in range(length)))
            out.append(frozenset((c + i, r) for i in range(length)))
    return out


class HiddenShipEnv:
    SIZE, SHIPS = 5, (3, 2)
    COLS = "ABCDE"

    def __init__(self, max_turns=20, **kwargs):
        self.max_turns = max_turns
        big, small = (placements(self.SIZE, n) for n in self.SHIPS)
        self.layouts = [a | b for a in big for b in small if not a & b]  # every legal fleet

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.ships = rng.choice(self.layouts)
        self.hits, self.misses = set(), set()
        self.turn, self.over = 0, False
        obs = (f"Two ships (lengths {self.SHIPS[0]} and {self.SHIPS[1]}) hide on a {self.SIZE}x{self.SIZE} board, each "
               "lying straight across or down; they do not overlap.\nFire at a square like \\boxed{C4} (column A-E, "
               f"row 1-5). Sink both ships within {self.max_turns} shots.\n\n" + self.render())
        return obs, {"turn": 0, "hits": 0}

    def render(self):
        lines = ["  " + " ".join(self.COLS)]
        for r in range(self.SIZE):
            marks = ["X" if (r, c) in self.hits else "o" if (r, c) in self.misses else "." for c in range(self.SIZE)]
            lines.append(f"{r + 1} " + " ".join(marks))
        return "\n".join(lines) + "\n(X = hit, o = miss)"

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        text = (last_boxed(action) or "").upper().replace(" ", "")
        reward = 0.0
        if len(text) != 2 or text[0] not in self.COLS or text[1] not in "123456"[:self.SIZE]:
            obs, reward = "Format error: fire at one square like \\boxed{C4}.", -0.1
        else:
            cell = (int(text[1]) - 1, self.COLS.index(text[0]))
            if cell in self.hits or cell in self.misses:
                obs = f"You already fired at {text}."
            elif self.hits | {cell} == self.ships:
                self.over = True
                return f"{text}: hit! Both ships are sunk. You win!", 1.0, True, False, {"turn": self.turn, "hits": len(self.ships)}
            elif cell in self.ships:
                self.hits.add(cell)
                obs, reward = f"{text}: hit!", 0.1
            else:
                self.misses.add(cell)
                obs = f"{text}: miss."
            obs += "\n" + self.render()
        if self.turn >= self.max_turns:
            self.over = True
            where = " ".join(f"{self.COLS[c]}{r + 1}" for r, c in sorted(self.ships))
            return obs + f"\nOut of shots. The ships were at {where}.", 0.0, False, True, {"turn": self.turn}
        return obs, reward, False, False, {"turn": self.turn, "hits": len(self.hits)}

    def solution(self):
        # Fire where the most fleets that agree with every shot so far have a ship.
        alive = [f for f in self.layouts if self.hits <= f and not f & self.misses]
        counts = {}
        for fleet in alive:
            for cell in fleet - self.hits:
                counts[cell] = counts.get(cell, 0) + 1
        r, c = max(sorted(counts), key=lambda cell: counts[cell])
        return f"{self.COLS[c]}{r + 1}"

    def close(self):
        pass
