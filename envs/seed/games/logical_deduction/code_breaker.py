"""Skill: Logical Deduction. Mechanic: multi-turn probing (Mastermind: guess, read the peg feedback, deduce). Break a 4-digit code."""
import itertools
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


def score(secret, guess):
    """(right digit in the right place, right digit in the wrong place)."""
    exact = sum(s == g for s, g in zip(secret, guess))
    common = sum(min(secret.count(d), guess.count(d)) for d in set(guess))
    return exact, common - exact


class CodeBreakerEnv:
    LENGTH, DIGITS = 4, "123456"

    def __init__(self, max_turns=10, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.secret = "".join(rng.choice(self.DIGITS) for _ in range(self.LENGTH))
        self.history = []  # (guess, exact, misplaced)
        self.turn, self.over = 0, False
        obs = (f"I chose a secret code of {self.LENGTH} digits, each from {self.DIGITS[0]} to {self.DIGITS[-1]} "
               "(digits may repeat).\nGuess a code with \\boxed{1234}. After each guess I tell you how many digits are "
               "right and in the right place, and how many more are right but in the wrong place.\n"
               f"Find the code within {self.max_turns} guesses.")
        return obs, {"turn": 0}

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        guess = (last_boxed(action) or "").replace(" ", "")
        reward = 0.0
        if len(guess) != self.LENGTH or any(c not in self.DIGITS for c in guess):
            obs, reward = f"Format error: guess {self.LENGTH} digits from {self.DIGITS}, e.g. \\boxed{{1123}}.", -0.1
        elif guess == self.secret:
            self.over = True
            return f"{guess} is the code. You win!", 1.0, True, False, {"turn": self.turn}
        else:
            exact, misplaced = score(self.secret, guess)
            self.history.append((guess, exact, misplaced))
            obs = f"{guess}: {exact} in the right place, {misplaced} right but misplaced."
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f" Out of guesses. The code was {self.secret}.", 0.0, False, True, {"turn": self.turn}
        return obs, reward, False, False, {"turn": self.turn}

    def solution(self):
        # Play the first code (in numeric order) that agrees with every answer so far.
        for digits in itertools.product(self.DIGITS, repeat=self.LENGTH):
            code = "".join(digits)
            if all(score(code, g) == (e, m) for g, e, m in self.history):
                return code
        return self.secret

    def close(self):
        pass
