"""Skill: Optimization. Mechanic: single-answer with feedback (3 tries). Pay an exact amount with the fewest coins of an odd currency where the greedy choice fails."""
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


def parse_coins(text):
    """'12+12+5' or '2x12+5' -> [12, 12, 5]; None if malformed."""
    coins = []
    for term in text.replace(" ", "").split("+"):
        m = re.fullmatch(r"(?:(\d{1,3})[x*])?(\d+)", term)
        if not m:
            return None
        coins += [int(m.group(2))] * int(m.group(1) or 1)
    return coins


def fewest_coins(coins, amount):
    """Dynamic programming: best[a] = a shortest list of coins summing to a (None if impossible)."""
    best = [[]] + [None] * amount
    for a in range(1, amount + 1):
        options = [best[a - c] + [c] for c in coins if c <= a and best[a - c] is not None]
        best[a] = min(options, key=len) if options else None
    return best[amount]


def greedy_count(coins, amount):
    count = 0
    for c in sorted(coins, reverse=True):
        count, amount = count + amount // c, amount % c
    return count if amount == 0 else None


class CoinChangeEnv:
    def __init__(self, max_turns=3, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        while True:
            self.coins = sorted([1] + rng.sample(range(3, 31), 3))
            self.amount = rng.randint(40, 99)
            self.best = sorted(fewest_coins(self.coins, self.amount), reverse=True)
            if greedy_count(self.coins, self.amount) > len(self.best):
                break
        self.turn, self.over = 0, False
        obs = (f"The kingdom of Oddland mints coins worth {', '.join(map(str, self.coins))} crowns.\n"
               f"Pay exactly {self.amount} crowns using as few coins as possible.\n"
               f"Answer with the coins as a sum, e.g. \\boxed{{{self.coins[-1]}+{self.coins[-1]}+{self.coins[0]}}} "
               f"(2x{self.coins[-1]} also works). You have {self.max_turns} tries.")
        return obs, {"turn": 0}

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        coins = parse_coins(last_boxed(action) or "")
        reward = 0.0
        if not coins or any(c not in self.coins for c in coins):
            obs, reward = f"Format error: write a sum of coins from {self.coins}, e.g. \\boxed{{10+3}}.", -0.1
        elif sum(coins) != self.amount:
            obs = f"Those coins add up to {sum(coins)}, not {self.amount}."
        elif len(coins) == len(self.best):
            self.over = True
            return f"Optimal! {len(coins)} coins.", 1.0, True, False, {"turn": self.turn}
        else:
            obs = f"That pays {self.amount} with {len(coins)} coins, but fewer coins are enough."
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f" Out of tries. Best: {self.solution()}.", 0.0, False, True, {"turn": self.turn}
        return obs, reward, False, False, {"turn": self.turn}

    def solution(self):
        return "+".join(map(str, self.best))

    def close(self):
        pass
