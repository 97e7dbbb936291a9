"""Skill: Mathematical Reasoning. Mechanic: single-answer (2 tries, feedback on which condition fails). Find the smallest marble count that leaves given remainders."""
import itertools
import math
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


class MarbleRemaindersEnv:
    def __init__(self, max_turns=2, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        sizes = [c for c in itertools.combinations([3, 4, 5, 7, 8, 9, 11], 3)
                 if all(math.gcd(a, b) == 1 for a, b in itertools.combinations(c, 2))]
        while True:
            self.bags = list(rng.choice(sizes))
            rng.shuffle(self.bags)
            self.rests = [rng.randrange(1, b) for b in self.bags]
            self.answer = next(n for n in itertools.count(1)
                               if all(n % b == r for b, r in zip(self.bags, self.rests)))
            if self.answer >= 50 and self.answer != 42:
                break
        self.turn, self.over = 0, False
        lines = [f"- packed in bags of {b}, exactly {r} marble{'s' if r > 1 else ''} are left over"
                 for b, r in zip(self.bags, self.rests)]
        obs = ("A child counts a jar of marbles three ways:\n" + "\n".join(lines) +
               "\nWhat is the smallest number of marbles the jar can hold?\n"
               f"Answer with \\boxed{{number}}. You have {self.max_turns} tries.")
        return obs, {"turn": 0}

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        text = last_boxed(action)
        reward = 0.0
        if text is None or not text.strip().lstrip("-").isdigit():
            obs, reward = "Format error: answer with a whole number, e.g. \\boxed{123}.", -0.1
        else:
            n = int(text)
            if n == self.answer:
                self.over = True
                return f"Correct! {n} marbles fit every count.", 1.0, True, False, {"turn": self.turn}
            broken = [(b, r) for b, r in zip(self.bags, self.rests) if n % b != r]
            if broken:
                b, r = broken[0]
                obs = f"{n} does not work: in bags of {b} it leaves {n % b}, not {r}."
            else:
                obs = f"{n} fits every count, but it is not the smallest."
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f" Out of tries. The smallest count was {self.answer}.", 0.0, False, True, {"turn": self.turn}
        return obs, reward, False, False, {"turn": self.turn}

    def solution(self):
        return str(self.answer)

    def close(self):
        pass
