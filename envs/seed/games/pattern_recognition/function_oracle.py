"""Skill: Pattern Recognition. Mechanic: multi-turn probing (query a hidden function at up to 3 points, then predict it). Infer a quadratic rule from samples."""
import random
import re
from fractions import Fraction


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


class FunctionOracleEnv:
    QUERIES = 3

    def __init__(self, max_turns=6, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.coef = (rng.choice([-3, -2, -1, 1, 2, 3]), rng.randint(-9, 9), rng.randint(-20, 20))
        self.target = rng.randint(8, 15)
        self.known = {}  # x -> f(x) revealed so far
        self.turn, self.over = 0, False
        obs = ("A machine computes a secret whole-number function f(x) of a secret fixed kind: "
               "f(x) = a*x^2 + b*x + c for unknown integers a, b, c.\n"
               f"Ask for a value with \\boxed{{f(3)}} (any integer x from -20 to 20 except {self.target}); "
               f"you may ask {self.QUERIES} times.\nThen predict f({self.target}) with \\boxed{{number}}. "
               "You get one prediction.")
        return obs, {"turn": 0}

    def f(self, x):
        a, b, c = self.coef
        return a * x * x + b * x + c

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        text = (last_boxed(action) or "").replace(" ", "")
        query = re.fullmatch(r"f\((-?\d+)\)", text)
        reward = 0.0
        if query:
            x = int(query.group(1))
            if len(self.known) >= self.QUERIES and x not in self.known:
                obs = f"No questions left. Predict f({self.target})."
            elif x == self.target or abs(x) > 20:
                obs = f"You may not ask for f({x}); use -20 <= x <= 20 and x != {self.target}."
            else:
                self.known[x] = self.f(x)
                obs = f"f({x}) = {self.known[x]}. Questions left: {self.QUERIES - len(self.known)}."
        elif text.lstrip("-").isdigit():
            self.over = True
            if int(text) == self.f(self.target):
                return "Correct prediction!", 1.0, True, False, {"turn": self.turn}
            return f"Wrong: f({self.target}) = {self.f(self.target)}.", 0.0, True, False, {"turn": self.turn}
        else:
            obs, reward = "Format error: ask with \\boxed{f(3)} or predict with \\boxed{number}.", -0.1
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f" Out of turns. f({self.target}) = {self.f(self.target)}.", 0.0, False, True, {"turn": self.turn}
        return obs, reward, False, False, {"turn": self.turn, "asked": len(self.known)}

    def solution(self):
        if len(self.known) < self.QUERIES:
            x = next(x for x in range(21) if x not in self.known and x != self.target)
            return f"f({x})"
        # Lagrange interpolation through the three known points.
        points = sorted(self.known.items())[:3]
        total = Fraction(0)
        for i, (xi, yi) in enumerate(points):
            term = Fraction(yi)
            for j, (xj, _) in enumerate(points):
                if j != i:
                    term *= Fraction(self.target - xj, xi - xj)
            total += term
        return str(int(total))

    def close(self):
        pass
