"""Skill: Optimization. Mechanic: single-answer with feedback (3 tries; a feasible but worse pick is told its value). 0/1 knapsack for a hiking trip."""
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


GEAR = ["tent", "stove", "camera", "book", "rope", "hammock", "water filter", "telescope", "guitar", "first-aid kit"]


class KnapsackPickEnv:
    def __init__(self, max_turns=3, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        n = rng.randint(6, 7)
        self.labels = "ABCDEFG"[:n]
        self.names = rng.sample(GEAR, n)
        self.weight = [rng.randint(2, 9) for _ in range(n)]
        self.value = [rng.randint(3, 20) for _ in range(n)]
        self.capacity = sum(self.weight) * rng.randint(35, 55) // 100
        fits = [s for k in range(n + 1) for s in itertools.combinations(range(n), k)
                if sum(self.weight[i] for i in s) <= self.capacity]
        self.best_set = max(fits, key=lambda s: sum(self.value[i] for i in s))
        self.best_value = sum(self.value[i] for i in self.best_set)
        self.turn, self.over = 0, False
        rows = "\n".join(f"{self.labels[i]}. {self.names[i]}: weight {self.weight[i]} kg, joy {self.value[i]}"
                         for i in range(n))
        obs = (f"Your backpack holds at most {self.capacity} kg. Pack the items that give the most total joy:\n"
               + rows + "\n\nAnswer with the letters of the items to pack, e.g. \\boxed{A, C, D}. "
               f"You have {self.max_turns} tries.")
        return obs, {"turn": 0}

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        text = last_boxed(action)
        picks = sorted(set(re.findall(r"\b[A-Z]\b", text.upper()))) if text is not None else []
        reward = 0.0
        if not picks or any(p not in self.labels for p in picks):
            obs, reward = f"Format error: list item letters from {self.labels[0]} to {self.labels[-1]}, e.g. \\boxed{{A, C}}.", -0.1
        else:
            idx = [self.labels.index(p) for p in picks]
            weight, value = sum(self.weight[i] for i in idx), sum(self.value[i] for i in idx)
            if weight > self.capacity:
                obs = f"Too heavy: {weight} kg is over the {self.capacity} kg limit."
            elif value == self.best_value:
                self.over = True
                return f"Optimal! Total joy {value}.", 1.0, True, False, {"turn": self.turn}
            else:
                obs = f"That fits ({weight} kg) with total joy {value}, but a better packing exists."
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f" Out of tries. Best: {self.solution()} (joy {self.best_value}).", 0.0, False, True, {"turn": self.turn}
        return obs, reward, False, False, {"turn": self.turn}

    def solution(self):
        return ", ".join(self.labels[i] for i in self.best_set)

    def close(self):
        pass
