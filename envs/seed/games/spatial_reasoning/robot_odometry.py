"""Skill: Spatial Reasoning. Mechanic: single-answer (2 tries). Dead reckoning: follow relative movement commands and report the final position."""
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


HEADINGS = [(0, 1), (1, 0), (0, -1), (-1, 0)]  # north, east, south, west as (dx, dy)


class RobotOdometryEnv:
    def __init__(self, max_turns=2, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        x = y = heading = 0
        self.commands = []
        while len(self.commands) < 8 or (x, y) == (0, 0):
            kind = rng.choice(["forward", "forward", "back", "left", "right", "around", "sidestep"])
            if kind in ("left", "right", "around") and self.commands and self.commands[-1].startswith("turn"):
                kind = "forward"  # no two turns in a row
            n = rng.randint(1, 5)
            dx, dy = HEADINGS[heading]
            if kind == "forward":
                x, y = x + n * dx, y + n * dy
                self.commands.append(f"drive forward {n}")
            elif kind == "back":
                x, y = x - n * dx, y - n * dy
                self.commands.append(f"reverse {n} (without turning)")
            elif kind == "sidestep":  # move to the robot's right without turning
                x, y = x + n * dy, y - n * dx
                self.commands.append(f"slide {n} to its right (without turning)")
            else:
                heading = (heading + {"left": 3, "right": 1, "around": 2}[kind]) % 4
                self.commands.append({"left": "turn left", "right": "turn right", "around": "turn around"}[kind])
        self.answer = (x, y)
        self.turn, self.over = 0, False
        steps = "\n".join(f"{i + 1}. {c}" for i, c in enumerate(self.commands))
        obs = ("A robot starts at (0, 0) facing north. x grows to the east, y grows to the north; "
               "each unit moves one grid square.\nIt runs these commands:\n" + steps
               + f"\n\nWhere does it end up? Answer like \\boxed{{3, -2}}. You have {self.max_turns} tries.")
        return obs, {"turn": 0}

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        numbers = re.findall(r"-?\d+", last_boxed(action) or "")
        reward = 0.0
        if len(numbers) != 2:
            obs, reward = "Format error: give two integers x, y, e.g. \\boxed{3, -2}.", -0.1
        elif (int(numbers[0]), int(numbers[1])) == self.answer:
            self.over = True
            return "Correct! That is where the robot stopped.", 1.0, True, False, {"turn": self.turn}
        else:
            obs = f"The robot is not at ({numbers[0]}, {numbers[1]})."
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f" Out of tries. It stopped at {self.answer}.", 0.0, False, True, {"turn": self.turn}
        return obs, reward, False, False, {"turn": self.turn}

    def solution(self):
        return f"{self.answer[0]}, {self.answer[1]}"

    def close(self):
        pass
