"""Skill: Pattern Recognition. Mechanic: single-answer (3 tries). Infer a letter-shifting cipher from examples and encode a new word."""
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


WORDS = ["RIVER", "STONE", "CLOUD", "PLANT", "BRICK", "LEMON", "TIGER", "MAPLE", "OCEAN", "CANDLE", "GARDEN",
         "PUZZLE", "ROCKET", "SILVER", "WINTER", "FOREST", "BRIDGE", "PEPPER", "CASTLE", "MARKET", "HONEY", "NIGHT"]


def shift(letter, k):
    return string.ascii_uppercase[(string.ascii_uppercase.index(letter) + k) % 26]


def encode(word, rule):
    kind, k, d = rule
    if kind == "reverse":
        word = word[::-1]
    if kind == "ramp":  # the shift grows by d along the word
        return "".join(shift(ch, k + d * i) for i, ch in enumerate(word))
    if kind == "alternate":  # shift k on odd positions, d on even ones
        return "".join(shift(ch, k if i % 2 == 0 else d) for i, ch in enumerate(word))
    return "".join(shift(ch, k) for ch in word)


class ShiftCipherEnv:
    def __init__(self, max_turns=3, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        kind = rng.choice(["constant", "ramp", "reverse", "alternate"])
        k = rng.randint(1, 25)
        d = rng.choice([1, 2, 3, -1]) if kind == "ramp" else rng.randint(1, 25)
        if kind == "alternate" and d == k:
            d = (k + 7) % 26
        self.rule = (kind, k, d)
        words = rng.sample(WORDS, 4)
        self.examples, self.word = words[:3], words[3]
        self.answer = encode(self.word, self.rule)
        self.turn, self.over = 0, False
        pairs = "\n".join(f"{w} -> {encode(w, self.rule)}" for w in self.examples)
        obs = ("A secret cipher turns words into code words. Examples:\n" + pairs
               + f"\n\nHow does it encode {self.word}? Answer like \\boxed{{CODEWORD}}. You have {self.max_turns} tries.")
        return obs, {"turn": 0}

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        guess = "".join(ch for ch in (last_boxed(action) or "").upper() if ch.isalpha())
        reward = 0.0
        if len(guess) != len(self.word):
            obs, reward = f"Format error: give a code word of {len(self.word)} letters, e.g. \\boxed{{{'X' * len(self.word)}}}.", -0.1
        elif guess == self.answer:
            self.over = True
            return "Correct!", 1.0, True, False, {"turn": self.turn}
        else:
            obs = f"{guess} is not how {self.word} is encoded."
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f" Out of tries. {self.word} -> {self.answer}.", 0.0, False, True, {"turn": self.turn}
        return obs, reward, False, False, {"turn": self.turn}

    def solution(self):
        return self.answer

    def close(self):
        pass
