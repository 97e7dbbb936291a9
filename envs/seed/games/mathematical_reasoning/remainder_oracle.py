"""Skill: Mathematical Reasoning. Mechanic: multi-turn probing (ask for remainders, then name the number). Identify a hidden 3-digit number from its remainders."""
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


class RemainderOracleEnv:
    LOW, HIGH, MODULI = 100, 999, range(2, 13)

    def __init__(self, max_turns=6, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.secret = rng.randint(self.LOW, self.HIGH)
        self.known = {}      # modulus -> remainder the oracle reported
        self.wrong = set()   # guesses already rejected
        self.turn, self.over = 0, False
        obs = (f"I am thinking of a whole number from {self.LOW} to {self.HIGH}.\n"
               "Each turn you may either ask for its remainder modulo m (2 <= m <= 12) with \\boxed{mod m},\n"
               "or name the number with \\boxed{n}. A correct name wins; a wrong one just costs the turn.\n"
               f"You have {self.max_turns} turns.")
        return obs, {"turn": 0}

    def candidates(self):
        return [n for n in range(self.LOW, self.HIGH + 1)
                if n not in self.wrong and all(n % m == r for m, r in self.known.items())]

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        text = (last_boxed(action) or "").lower().replace(" ", "")
        reward = 0.0
        if text.startswith("mod") and text[3:].isdigit() and int(text[3:]) in self.MODULI:
            m = int(text[3:])
            self.known[m] = self.secret % m
            obs = f"The number leaves remainder {self.known[m]} when divided by {m}."
        elif text.isdigit():
            if int(text) == self.secret:
                self.over = True
                return f"Yes! The number was {self.secret}.", 1.0, True, False, {"turn": self.turn}
            self.wrong.add(int(text))
            obs = f"No, it is not {text}."
        else:
            obs, reward = "Format error: use \\boxed{mod m} with 2 <= m <= 12, or \\boxed{n}.", -0.1
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f" Out of turns. The number was {self.secret}.", 0.0, False, True, {"turn": self.turn}
        return obs, reward, False, False, {"turn": self.turn, "asked": sorted(self.known)}

    def solution(self):
        cands = self.candidates()
        if len(cands) == 1:
            return str(cands[0])

        def worst_group(m):  # size of the largest group of candidates sharing a remainder mod m
            counts = {}
            for n in cands:
                counts[n % m] = counts.get(n % m, 0) + 1
            return max(counts.values())

        best = min((m for m in self.MODULI if m not in self.known), key=worst_group)
        return f"mod {best}"

    def close(self):
        pass
