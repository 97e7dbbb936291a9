"""Skill: Spatial Reasoning. Mechanic: state-gated (fetch the key before the locked door opens), multi-turn moves with a partial reward for the key. Grid maze."""
import collections
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


MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}


class KeyDoorMazeEnv:
    ROWS, COLS, WALL_COL, MAX_MOVES = 7, 10, 6, 6

    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        while True:
            g = [["#"] * self.COLS for _ in range(self.ROWS)]
            for r in range(1, self.ROWS - 1):
                for c in range(1, self.COLS - 1):
                    if c != self.WALL_COL and rng.random() > 0.3:
                        g[r][c] = "."
            left = [(r, c) for r in range(1, self.ROWS - 1) for c in range(1, self.WALL_COL) if g[r][c] == "."]
            right = [(r, c) for r in range(1, self.ROWS - 1) for c in range(self.WALL_COL + 1, self.COLS - 1) if g[r][c] == "."]
            if len(left) < 2 or not right:
                continue
            self.pos, key = rng.sample(left, 2)
            gr, gc = rng.choice(right)
            g[key[0]][key[1]], g[gr][gc] = "k", "G"
            g[rng.randrange(1, self.ROWS - 1)][self.WALL_COL] = "="
            self.grid, self.has_key = g, False
            if self.path() is not None and len(self.path()) >= 10:
                break
        self.turn, self.over = 0, False
        return ("Find your way to G. Walls are #. The door = is locked; walking onto the key k picks it up, "
                "and with the key you can walk through the door.\nMove with U, D, L, R; send up to "
                f"{self.MAX_MOVES} moves per turn, e.g. \\boxed{{RRD}}. A move into a wall stops that turn's moves.\n\n"
                + self.render()), {"turn": 0, "has_key": False}

    def render(self):
        rows = ["".join("@" if (r, c) == self.pos else ch for c, ch in enumerate(row)) for r, row in enumerate(self.grid)]
        return "\n".join(rows) + f"\nYou are @. Key carried: {'yes' if self.has_key else 'no'}."

    def path(self):
        """Shortest move string from the current state (position, key) to the goal, or None."""
        start = (self.pos, self.has_key)
        prev, queue = {start: None}, collections.deque([start])
        while queue:
            (r, c), key = state = queue.popleft()
            if self.grid[r][c] == "G":
                moves = []
                while prev[state] is not None:
                    state, m = prev[state]
                    moves.append(m)
                return "".join(reversed(moves))
            for m, (dr, dc) in MOVES.items():
                ch = self.grid[r + dr][c + dc]
                nxt = ((r + dr, c + dc), key or ch == "k")
                if ch != "#" and (ch != "=" or key) and nxt not in prev:
                    prev[nxt] = (state, m)
                    queue.append(nxt)
        return None

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        moves = (last_boxed(action) or "").upper().replace(" ", "").replace(",", "")
        reward, notes = 0.0, []
        if not moves or len(moves) > self.MAX_MOVES or any(m not in MOVES for m in moves):
            reward, notes = -0.1, [f"Format error: send 1 to {self.MAX_MOVES} moves from U, D, L, R, e.g. \\boxed{{RRD}}."]
        for m in moves if reward == 0.0 else "":
            r, c = self.pos[0] + MOVES[m][0], self.pos[1] + MOVES[m][1]
            ch = self.grid[r][c]
            if ch == "#" or (ch == "=" and not self.has_key):
                notes.append("You bumped into a wall." if ch == "#" else "The door is locked.")
                break
            self.pos = (r, c)
            if ch == "k":
                self.has_key, reward = True, 0.2
                self.grid[r][c] = "."
                notes.append("You picked up the key!")
            elif ch == "=":
                self.grid[r][c] = "."
                notes.append("You unlocked the door.")
            elif ch == "G":
                self.over = True
                return "You reached the goal!", 1.0, True, False, {"turn": self.turn, "has_key": True}
        obs = "\n".join([" ".join(notes)] * bool(notes) + [self.render()])
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f"\nOut of turns. A shortest way from here was {self.path()}.", 0.0, False, True, {"turn": self.turn}
        return obs, reward, False, False, {"turn": self.turn, "has_key": self.has_key}

    def solution(self):
        return self.path()[:self.MAX_MOVES]

    def close(self):
        pass
