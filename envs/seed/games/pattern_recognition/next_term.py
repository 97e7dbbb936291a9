"""Skill: Pattern Recognition. Mechanic: single-answer (2 tries). Continue an integer sequence drawn from one of several hidden rule families."""
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


def make_sequence(rng, n):
    """n + 1 terms of a sequence from a random rule family (the last term is the one to find)."""
    family = rng.choice(["quadratic", "geometric", "fibonacci", "interleaved", "double_minus", "cumulative"])
    if family == "quadratic":
        a, b, c = rng.randint(1, 3), rng.randint(-4, 6), rng.randint(-5, 10)
        return [a * i * i + b * i + c for i in range(n + 1)]
    if family == "geometric":
        start, ratio, shift = rng.randint(1, 4), rng.choice([2, 3, -2]), rng.randint(-3, 3)
        return [start * ratio ** i + shift for i in range(n + 1)]
    if family == "fibonacci":
        seq = [rng.randint(1, 5), rng.randint(2, 9)]
    elif family == "interleaved":  # two arithmetic progressions taking turns
        a, b, da, db = rng.randint(1, 20), rng.randint(30, 60), rng.randint(2, 7), rng.randint(-6, -1)
        return [a + da * (i // 2) if i % 2 == 0 else b + db * (i // 2) for i in range(n + 1)]
    elif family == "double_minus":
        seq, k = [rng.randint(3, 9)], rng.randint(1, 4)
        while len(seq) < n + 1:
            seq.append(2 * seq[-1] - k)
        return seq
    else:  # cumulative: the gaps grow by a fixed step
        seq, gap, step = [rng.randint(0, 10)], rng.randint(1, 4), rng.randint(2, 4)
        while len(seq) < n + 1:
            seq.append(seq[-1] + gap)
            gap += step
        return seq
    while len(seq) < n + 1:
        seq.append(seq[-1] + seq[-2])
    return seq


class NextTermEnv:
    SHOWN = 6

    def __init__(self, max_turns=2, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        seq = make_sequence(rng, self.SHOWN)
        while seq[-1] in (1, 42) or len(set(seq)) < self.SHOWN:
            seq = make_sequence(rng, self.SHOWN)
        self.shown, self.answer = seq[:-1], seq[-1]
        self.turn, self.over = 0, False
        obs = ("Find the rule behind this sequence and give the next term:\n"
               + ", ".join(map(str, self.shown)) + ", ?\n"
               f"Answer like \\boxed{{17}}. You have {self.max_turns} tries.")
        return obs, {"turn": 0}

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        text = (last_boxed(action) or "").replace(" ", "")
        reward = 0.0
        if not text.lstrip("-").isdigit():
            obs, reward = "Format error: give one integer, e.g. \\boxed{17}.", -0.1
        elif int(text) == self.answer:
            self.over = True
            return "Correct!", 1.0, True, False, {"turn": self.turn}
        else:
            obs = f"{text} does not continue the pattern."
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f" Out of tries. The next term was {self.answer}.", 0.0, False, True, {"turn": self.turn}
        return obs, reward, False, False, {"turn": self.turn}

    def solution(self):
        return str(self.answer)

    def close(self):
        pass
