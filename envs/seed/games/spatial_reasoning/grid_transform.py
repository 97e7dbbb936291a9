"""Skill: Spatial Reasoning. Mechanic: single-answer (2 tries). Track a letter grid through rotations and mirror flips."""
import random
import string


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


OPERATIONS = {
    "rotate it 90 degrees clockwise": lambda g: [list(row) for row in zip(*g[::-1])],
    "rotate it 90 degrees counterclockwise": lambda g: [list(row) for row in zip(*g)][::-1],
    "rotate it 180 degrees": lambda g: [row[::-1] for row in g[::-1]],
    "mirror it left-to-right": lambda g: [row[::-1] for row in g],
    "flip it upside down": lambda g: [row[:] for row in g[::-1]],
}


class GridTransformEnv:
    SIZE = 4

    def __init__(self, max_turns=2, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        letters = rng.sample(string.ascii_uppercase, self.SIZE * self.SIZE)
        start = [letters[r * self.SIZE:(r + 1) * self.SIZE] for r in range(self.SIZE)]
        self.row = rng.randrange(self.SIZE)
        while True:
            self.ops = [rng.choice(sorted(OPERATIONS)) for _ in range(rng.randint(2, 4))]
            grid = start
            for op in self.ops:
                grid = OPERATIONS[op](grid)
            if grid[self.row] != start[self.row]:
                break
        self.answer = "".join(grid[self.row])
        self.turn, self.over = 0, False
        ordinal = ["top", "second", "third", "bottom"][self.row]
        steps = "\n".join(f"{i + 1}. {op}" for i, op in enumerate(self.ops))
        obs = ("Here is a grid of letters:\n" + "\n".join(" ".join(r) for r in start)
               + "\n\nApply these steps in order:\n" + steps
               + f"\n\nWhat does the {ordinal} row read afterwards, left to right? Answer like \\boxed{{ABCD}}. "
               f"You have {self.max_turns} tries.")
        return obs, {"turn": 0}

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        guess = "".join(ch for ch in (last_boxed(action) or "").upper() if ch.isalpha())
        reward = 0.0
        if len(guess) != self.SIZE:
            obs, reward = f"Format error: give the {self.SIZE} letters of the row, e.g. \\boxed{{ABCD}}.", -0.1
        elif guess == self.answer:
            self.over = True
            return "Correct!", 1.0, True, False, {"turn": self.turn}
        else:
            obs = f"{guess} is not what that row reads."
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f" Out of tries. The row read {self.answer}.", 0.0, False, True, {"turn": self.turn}
        return obs, reward, False, False, {"turn": self.turn}

    def solution(self):
        return self.answer

    def close(self):
        pass
