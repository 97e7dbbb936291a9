"""Skill: Logical Deduction. Mechanic: single-answer (one attempt). A small zebra puzzle: three houses, four attributes, clues that pin down one arrangement."""
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


VALUES = {"name": ["Ana", "Ben", "Chloe", "Dev", "Emil"], "color": ["red", "green", "blue", "white", "yellow"],
          "pet": ["cat", "dog", "fish", "parrot", "rabbit"], "drink": ["tea", "coffee", "milk", "juice", "water"]}
CATS = ["name", "color", "pet", "drink"]


def phrase(cat, value):
    return {"name": value, "color": f"the person in the {value} house",
            "pet": f"the {value} owner", "drink": f"the {value} drinker"}[cat]


def holds(clue, world):
    """world[c] lists the value of category CATS[c] in houses 1..3."""
    kind, (c1, v1), (c2, v2) = clue
    p1 = world[CATS.index(c1)].index(v1)
    if kind == "at":
        return p1 == v2
    p2 = world[CATS.index(c2)].index(v2)
    return {"same": p1 == p2, "differ": p1 != p2, "left": p1 + 1 == p2, "next": abs(p1 - p2) == 1}[kind]


class HousePuzzleEnv:
    def __init__(self, max_turns=3, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.values = {c: rng.sample(VALUES[c], 3) for c in CATS}
        worlds = list(itertools.product(*[list(itertools.permutations(self.values[c])) for c in CATS]))
        truth = rng.choice(worlds)
        clues = []
        while len(worlds) > 1:  # add random true clues until one arrangement is left
            c1, c2 = rng.sample(CATS, 2)
            item1, item2 = (c1, rng.choice(self.values[c1])), (c2, rng.choice(self.values[c2]))
            kind = rng.choice(["same", "same", "differ", "left", "next", "at"])
            clue = (kind, item1, (None, rng.randrange(3)) if kind == "at" else item2)
            if holds(clue, truth) and any(not holds(clue, w) for w in worlds):
                clues.append(clue)
                worlds = [w for w in worlds if holds(clue, w)]
        for clue in list(clues):  # drop clues the others already imply
            rest = [c for c in clues if c is not clue]
            if sum(all(holds(c, w) for c in rest) for w in itertools.product(
                    *[list(itertools.permutations(self.values[c])) for c in CATS])) == 1:
                clues = rest
        stated = {v for kind, a, b in clues if kind == "same" for c, v in (a, b) if c == "pet"}
        self.pet = rng.choice([p for p in self.values["pet"] if p not in stated] or self.values["pet"])
        house = truth[CATS.index("pet")].index(self.pet)
        self.answer = (truth[0][house], truth[1][house])
        self.turn, self.over = 0, False
        lines = [f"{i + 1}. {self.say(c)}" for i, c in enumerate(clues)]
        obs = ("Three houses stand in a row, numbered 1 to 3 from left to right. Each has one resident, "
               "and residents differ in name, house colour, pet and drink.\n"
               + "; ".join(f"{label}: {', '.join(self.values[c])}" for c, label in zip(CATS, ["names", "colours", "pets", "drinks"])) + "\nClues:\n" + "\n".join(lines)
               + f"\n\nWho keeps the {self.pet}, and what colour is their house? "
               "Answer like \\boxed{Name, colour}. You get one answer.")
        return obs, {"turn": 0}

    def say(self, clue):
        kind, (c1, v1), (c2, v2) = clue
        a = phrase(c1, v1)
        if kind == "at":
            text = f"{a} lives in house {v2 + 1}."
        else:
            b = phrase(c2, v2)
            text = {"same": f"{a} is {b}.", "differ": f"{a} is not {b}.",
                    "left": f"{a} lives directly left of {b}.", "next": f"{a} lives next to {b}."}[kind]
        return text[0].upper() + text[1:]

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        words = (last_boxed(action) or "").lower().replace(",", " ").split()
        names = [n for n in self.values["name"] if n.lower() in words]
        colors = [c for c in self.values["color"] if c in words]
        if len(names) == 1 and len(colors) == 1:
            self.over = True
            if (names[0], colors[0]) == self.answer:
                return "Correct!", 1.0, True, False, {"turn": self.turn}
            return f"Wrong. It was {self.solution()}.", 0.0, True, False, {"turn": self.turn}
        obs = "Format error: name one resident and one colour, e.g. \\boxed{Ana, red}."
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f" Out of turns. It was {self.solution()}.", 0.0, False, True, {"turn": self.turn}
        return obs, -0.1, False, False, {"turn": self.turn}

    def solution(self):
        return f"{self.answer[0]}, {self.answer[1]}"

    def close(self):
        pass
