"""Skill: Mathematical Reasoning. Mechanic: partial rewards, state-gated (three questions in order, each unlocked by the previous). Shop receipt arithmetic."""
import random
from decimal import Decimal, InvalidOperation


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


def to_cents(text):
    """'$12.40', '12.4' or '12' -> 1240; None if it is not an amount of money."""
    try:
        value = Decimal(text.replace("$", "").replace(",", "").strip())
        return int(value * 100) if value == value.quantize(Decimal("0.01")) else None
    except (InvalidOperation, ValueError, OverflowError):
        return None


def money(cents):
    return f"${cents // 100}.{cents % 100:02d}"


class ShoppingLedgerEnv:
    ITEMS = ["notebook", "pen set", "stapler", "desk lamp", "mug", "calendar", "backpack", "scissors"]
    STAGE_REWARDS = [0.2, 0.4, 1.0]

    def __init__(self, max_turns=8, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.lines = [(name, rng.randint(1, 4), 20 * rng.randint(10, 120)) for name in rng.sample(self.ITEMS, 4)]
        subtotal = sum(qty * cents for _, qty, cents in self.lines)
        self.percent = rng.choice([5, 10, 15, 20, 25])
        total = subtotal - subtotal * self.percent // 100  # exact: prices are multiples of 20 cents
        bills = -(-total // 2000)                            # fewest $20 bills covering the total
        self.answers = [subtotal, total, bills * 2000 - total]
        self.questions = [
            "Question 1: what is the subtotal of the receipt?",
            f"Question 2: a coupon takes {self.percent}% off the subtotal. What do you pay after the coupon?",
            "Question 3: you pay that amount with the fewest $20 bills that cover it. How much change do you get?",
        ]
        self.stage, self.turn, self.over = 0, 0, False
        receipt = "\n".join(f"- {qty} x {name} at {money(cents)} each" for name, qty, cents in self.lines)
        obs = ("Receipt:\n" + receipt + "\n\nAnswer three questions in order; each correct answer unlocks the next.\n"
               "Give amounts like \\boxed{12.40}.\n" + self.questions[0])
        return obs, {"turn": 0, "stage": 0}

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn, "stage": self.stage}
        self.turn += 1
        text = last_boxed(action)
        cents = to_cents(text) if text is not None else None
        reward = 0.0
        if cents is None:
            obs, reward = "Format error: give an amount of money, e.g. \\boxed{12.40}.", -0.1
        elif cents != self.answers[self.stage]:
            obs = f"{money(cents)} is not right. " + self.questions[self.stage]
        else:
            reward = self.STAGE_REWARDS[self.stage]
            if self.stage == len(self.questions) - 1:
                self.over = True
                return "Correct! All three answers are right.", reward, True, False, {"turn": self.turn, "stage": 3}
            self.stage += 1
            obs = "Correct. " + self.questions[self.stage]
        if self.turn >= self.max_turns:
            self.over = True
            return (obs + f" Out of turns. The answer was {money(self.answers[self.stage])}.",
                    0.0, False, True, {"turn": self.turn, "stage": self.stage})
        return obs, reward, False, False, {"turn": self.turn, "stage": self.stage}

    def solution(self):
        cents = self.answers[self.stage]
        return f"{cents // 100}.{cents % 100:02d}"

    def close(self):
        pass
