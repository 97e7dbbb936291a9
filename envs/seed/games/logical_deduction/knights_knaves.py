"""Skill: Logical Deduction. Mechanic: single-answer (one attempt; a wrong answer ends the game). Knights always tell the truth, knaves always lie."""
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


def holds(stmt, knights):
    """Truth of a statement given knights[i] (True = person i is a knight)."""
    kind, x, y = stmt
    if kind == "is_knight":
        return knights[x]
    if kind == "is_knave":
        return not knights[x]
    if kind == "same":
        return knights[x] == knights[y]
    if kind == "both_knights":
        return knights[x] and knights[y]
    if kind == "some_knave":
        return not (knights[x] and knights[y])
    return sum(knights) == x  # "count": exactly x knights


class KnightsKnavesEnv:
    NAMES = ["Ada", "Boris", "Cleo", "Dmitri", "Elsa", "Farid", "Greta", "Hugo"]

    def __init__(self, max_turns=3, **kwargs):
        self.max_turns = max_turns

    def random_statement(self, rng, speaker, n):
        others = [i for i in range(n) if i != speaker]
        kind = rng.choice(["is_knight", "is_knave", "same", "both_knights", "some_knave", "count"])
        if kind == "count":
            return ("count", rng.randint(0, n), None)
        x, y = rng.sample(others, 2)
        return (kind, x, y)

    def say(self, stmt):
        kind, x, y = stmt
        a, b = (self.names[x], self.names[y]) if kind != "count" else (None, None)
        return {"is_knight": f"{a} is a knight.", "is_knave": f"{a} is a knave.",
                "same": f"{a} and {b} are the same kind.", "both_knights": f"{a} and {b} are both knights.",
                "some_knave": f"At least one of {a} and {b} is a knave.",
                "count": f"Exactly {x} of us {'is a knight' if x == 1 else 'are knights'}."}[kind]

    def reset(self, seed=None):
        rng = random.Random(seed)
        n = rng.choice([3, 4])
        self.names = rng.sample(self.NAMES, n)
        while True:
            truth = [rng.random() < 0.5 for _ in range(n)]
            stmts = []
            for i in range(n):  # each person makes one statement consistent with their nature
                s = self.random_statement(rng, i, n)
                while holds(s, truth) != truth[i]:
                    s = self.random_statement(rng, i, n)
                stmts.append(s)
            worlds = [w for w in itertools.product([True, False], repeat=n)
                      if all(holds(s, w) == w[i] for i, s in enumerate(stmts))]
            if len(worlds) == 1:
                break
        self.answer = "".join("K" if k else "N" for k in truth)
        self.turn, self.over = 0, False
        lines = [f'{self.names[i]} says: "{self.say(s)}"' for i, s in enumerate(stmts)]
        obs = ("On this island every person is a knight (always tells the truth) or a knave (always lies).\n"
               + "\n".join(lines) + "\n\nWho is what? Answer inside \\boxed{} with one letter per person, K for knight "
               "or N for knave, in the order " + ", ".join(self.names) + ".\nYou get one answer.")
        return obs, {"turn": 0}

    def parse(self, text):
        text = text.lower()
        for name in self.names:
            text = text.replace(name.lower(), " ")
        tokens = re.findall(r"knight|knave|[kn]", text)
        return "".join("K" if t.startswith("knight") or t == "k" else "N" for t in tokens)

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        guess = self.parse(last_boxed(action) or "")
        if len(guess) == len(self.names):
            self.over = True
            if guess == self.answer:
                return "Correct! That is the only consistent assignment.", 1.0, True, False, {"turn": self.turn}
            return f"Wrong. The answer was {self.answer}.", 0.0, True, False, {"turn": self.turn}
        obs = f"Format error: give exactly {len(self.names)} letters K or N, e.g. \\boxed{{KNK}}."
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f" Out of turns. The answer was {self.answer}.", 0.0, False, True, {"turn": self.turn}
        return obs, -0.1, False, False, {"turn": self.turn}

    def solution(self):
        return self.answer

    def close(self):
        pass
