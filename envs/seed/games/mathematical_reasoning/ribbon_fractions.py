"""Skill: Mathematical Reasoning. Mechanic: single-answer (3 tries, any equivalent form accepted via math_verify). Fraction arithmetic on ribbon lengths."""
import random
from fractions import Fraction

try:
    from math_verify import parse, verify
except ImportError:  # fall back to exact fraction parsing
    parse = verify = None


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


def same_value(text, value):
    """True if text denotes the rational number value (3/4, 0.75, \\frac{3}{4}, ...)."""
    if verify is not None:
        gold, guess = parse(f"${value.numerator}/{value.denominator}$"), parse(f"${text}$")
        return bool(guess) and verify(gold, guess)
    try:
        return Fraction(text.replace(" ", "")) == value
    except (ValueError, ZeroDivisionError):
        return False


def show(f):
    """A mixed number such as 2 1/3 for a human-friendly problem statement."""
    whole, rest = divmod(f.numerator, f.denominator)
    if rest == 0:
        return str(whole)
    return f"{whole} {rest}/{f.denominator}" if whole else f"{rest}/{f.denominator}"


class RibbonFractionsEnv:
    def __init__(self, max_turns=3, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        denominators = [2, 3, 4, 5, 6, 8, 12]
        while True:
            roll = Fraction(rng.randint(6, 12))
            pieces = [Fraction(rng.randint(1, 2 * d - 1), d) for d in rng.sample(denominators, 3)]
            gifts = rng.randint(2, 4)
            self.answer = roll - gifts * sum(pieces)
            if self.answer > 0 and self.answer.denominator > 1:
                break
        self.turn, self.over = 0, False
        names = ["a red bow", "a blue bow", "a gold bow"]
        lines = [f"- {name} needs {show(p)} m of ribbon" for name, p in zip(names, pieces)]
        obs = (f"A roll holds {show(roll)} m of ribbon. Every gift box gets one of each bow:\n" + "\n".join(lines) +
               f"\nAfter decorating {gifts} boxes, how many metres of ribbon are left on the roll?\n"
               f"Give an exact value, e.g. \\boxed{{7/12}}. You have {self.max_turns} tries.")
        return obs, {"turn": 0}

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        text = last_boxed(action)
        if text is None:
            obs, reward = "Format error: put your answer in \\boxed{...}.", -0.1
        elif same_value(text, self.answer):
            self.over = True
            return "Correct!", 1.0, True, False, {"turn": self.turn}
        else:
            obs, reward = f"{text} m is not right.", 0.0
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f" Out of tries. The roll keeps {self.solution()} m.", 0.0, False, True, {"turn": self.turn}
        return obs, reward, False, False, {"turn": self.turn}

    def solution(self):
        return f"{self.answer.numerator}/{self.answer.denominator}"

    def close(self):
        pass
