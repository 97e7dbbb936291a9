"""Skill: Logical Deduction. Mechanic: partial rewards (a wrong seating earns credit for the clues it satisfies). Seat five friends in a row from clues."""
import itertools
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


def holds(clue, order):
    kind, a, b = clue
    pa = order.index(a)
    if kind == "end":
        return pa in (0, len(order) - 1)
    if kind == "not_end":
        return pa not in (0, len(order) - 1)
    if kind == "seat":
        return pa == b
    pb = order.index(b)
    return {"left": pa < pb, "just_left": pa + 1 == pb, "apart": abs(pa - pb) > 1}[kind]


class SeatingOrderEnv:
    NAMES = ["Amir", "Bea", "Carlos", "Dana", "Eli", "Fay", "Gus", "Hana"]

    def __init__(self, max_turns=4, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.names = sorted(rng.sample(self.NAMES, 5))
        orders = list(itertools.permutations(self.names))
        truth = rng.choice(orders)
        self.clues = []
        while len(orders) > 1:
            a, b = rng.sample(self.names, 2)
            kind = rng.choice(["left", "left", "just_left", "apart", "end", "not_end", "seat"])
            clue = (kind, a, rng.randrange(5) if kind == "seat" else b)
            if holds(clue, truth) and any(not holds(clue, o) for o in orders):
                self.clues.append(clue)
                orders = [o for o in orders if holds(clue, o)]
        for clue in list(self.clues):  # drop clues the others already imply
            rest = [c for c in self.clues if c is not clue]
            if sum(all(holds(c, o) for c in rest) for o in itertools.permutations(self.names)) == 1:
                self.clues = rest
        self.answer = list(truth)
        self.turn, self.over = 0, False
        lines = [f"{i + 1}. {self.say(c)}" for i, c in enumerate(self.clues)]
        obs = (f"{', '.join(self.names)} sit in a row of five seats, numbered 1 to 5 from left to right.\n"
               + "\n".join(lines) + "\n\nGive the seating from seat 1 to seat 5, e.g. \\boxed{"
               + ", ".join(self.names) + f"}}. You have {self.max_turns} tries; a wrong seating earns partial "
               "credit for the clues it satisfies.")
        return obs, {"turn": 0}

    def say(self, clue):
        kind, a, b = clue
        if kind == "seat":
            return f"{a} sits in seat {b + 1}."
        return {"left": f"{a} sits somewhere left of {b}.", "just_left": f"{a} sits immediately left of {b}.",
                "apart": f"{a} and {b} do not sit next to each other.", "end": f"{a} sits at one end of the row.",
                "not_end": f"{a} does not sit at either end."}[kind]

    def parse(self, text):
        lookup = {n.lower(): n for n in self.names} | {n[0].lower(): n for n in self.names}
        order = [lookup[w] for w in re.findall(r"[a-z]+", text.lower()) if w in lookup]
        return order if sorted(order) == self.names else None

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        order = self.parse(last_boxed(action) or "")
        reward = 0.0
        if order is None:
            obs, reward = "Format error: list all five names once, from seat 1 to seat 5.", -0.1
        elif order == self.answer:
            self.over = True
            return "Correct! Everyone is happy with their seat.", 1.0, True, False, {"turn": self.turn}
        else:
            ok = sum(holds(c, order) for c in self.clues)
            reward = round(0.5 * ok / len(self.clues), 3)
            obs = f"Not quite: your seating satisfies {ok} of the {len(self.clues)} clues."
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f" Out of tries. The seating was {self.solution()}.", 0.0, False, True, {"turn": self.turn}
        return obs, reward, False, False, {"turn": self.turn}

    def solution(self):
        return ", ".join(self.answer)

    def close(self):
        pass
