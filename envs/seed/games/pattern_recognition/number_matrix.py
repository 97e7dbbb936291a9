"""Skill: Pattern Recognition. Mechanic: partial rewards (each correctly filled cell pays; the last one wins). Fill the gaps of a number grid built by a hidden rule."""
import random
import re


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


def make_rule(rng):
    """A random rule value(row, col) with rows and columns numbered from 1."""
    kind = rng.choice(["linear", "product", "table", "square"])
    a, b, k = rng.randint(2, 7), rng.randint(1, 5), rng.randint(-5, 12)
    if kind == "linear":
        return lambda r, c: a * r + b * c + k
    if kind == "product":
        return lambda r, c: (r + b) * (c + a)
    if kind == "table":
        return lambda r, c: k + r * c * b
    return lambda r, c: r * r + a * c + k


class NumberMatrixEnv:
    SIZE, HIDDEN, COLS = 4, 3, "ABCD"

    def __init__(self, max_turns=8, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        rule = make_rule(rng)
        self.values = {(r, c): rule(r + 1, c + 1) for r in range(self.SIZE) for c in range(self.SIZE)}
        cells = sorted(self.values)
        self.hidden = sorted(rng.sample(cells, self.HIDDEN))
        self.turn, self.over = 0, False
        obs = ("Every number in this grid follows one hidden rule based on its row and column:\n" + self.render()
               + "\n\nFill one missing cell per turn, like \\boxed{B3=17} (column letter, row number). "
               "Each correct cell earns a little; filling the last one wins.")
        return obs, {"turn": 0, "missing": len(self.hidden)}

    def render(self):
        lines = ["     " + "".join(f"{col:>5}" for col in self.COLS)]
        for r in range(self.SIZE):
            cells = ["?" if (r, c) in self.hidden else str(self.values[(r, c)]) for c in range(self.SIZE)]
            lines.append(f"{r + 1:>5}" + "".join(f"{v:>5}" for v in cells))
        return "\n".join(lines)

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        m = re.fullmatch(r"([A-D])\s*([1-4])\s*=\s*(-?\d+)", (last_boxed(action) or "").upper())
        reward = 0.0
        if not m:
            obs, reward = "Format error: fill one cell like \\boxed{B3=17}.", -0.1
        else:
            cell, value = (int(m.group(2)) - 1, self.COLS.index(m.group(1))), int(m.group(3))
            if cell not in self.hidden:
                obs = f"{m.group(1)}{m.group(2)} is not a missing cell."
            elif value != self.values[cell]:
                obs = f"{value} does not belong in {m.group(1)}{m.group(2)}."
            elif len(self.hidden) == 1:
                self.over = True
                return "Correct! The grid is complete.", 1.0, True, False, {"turn": self.turn, "missing": 0}
            else:
                self.hidden.remove(cell)
                obs, reward = f"Correct!\n{self.render()}", 0.25
        if self.turn >= self.max_turns:
            self.over = True
            rest = ", ".join(f"{self.COLS[c]}{r + 1}={self.values[(r, c)]}" for r, c in self.hidden)
            return obs + f" Out of turns. Missing: {rest}.", 0.0, False, True, {"turn": self.turn}
        return obs, reward, False, False, {"turn": self.turn, "missing": len(self.hidden)}

    def solution(self):
        r, c = self.hidden[0]
        return f"{self.COLS[c]}{r + 1}={self.values[(r, c)]}"

    def close(self):
        pass
