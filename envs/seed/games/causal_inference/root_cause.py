"""Skill: Causal Inference. Mechanic: single-answer (one attempt). Abduction: infer which two starting events caused the observed downstream effects."""
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


ROOTS, DERIVED = "ABCD", "EFGHIJ"


def outcome(rules, started):
    """Set of events that happen when the starting events in `started` occur."""
    happened = set(started)
    for event, (kind, parents) in rules.items():  # rules are in causal order
        hits = [p in happened for p in parents]
        if (kind == "and" and all(hits)) or (kind == "or" and any(hits)):
            happened.add(event)
    return happened


class RootCauseEnv:
    def __init__(self, max_turns=3, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        while True:
            rules = {}
            for i, event in enumerate(DERIVED):
                earlier = list(ROOTS + DERIVED[:i])
                kind = rng.choice(["and", "or", "or"])
                rules[event] = (kind, sorted(rng.sample(earlier, 2)))
            pairs = list(itertools.combinations(ROOTS, 2))
            truth = rng.choice(pairs)
            seen = outcome(rules, truth) - set(ROOTS)
            matches = [p for p in pairs if outcome(rules, p) - set(ROOTS) == seen]
            if len(matches) == 1 and 2 <= len(seen) <= 5:
                break
        self.rules, self.answer = rules, truth
        self.turn, self.over = 0, False
        lines = [f"- {e} happens if {'both ' if k == 'and' else ''}{p[0]} {k} {p[1]} happen{'' if k == 'and' else 's'}."
                 for e, (k, p) in rules.items()]
        missing = sorted(set(DERIVED) - seen)
        obs = (f"Events {', '.join(ROOTS)} can only start on their own. The other events follow these rules "
               "(nothing else causes them):\n" + "\n".join(lines)
               + f"\n\nExactly two of {', '.join(ROOTS)} started. Afterwards {', '.join(sorted(seen))} happened, "
               f"and {', '.join(missing)} did not.\nWhich two events started? Answer with their two letters in "
               "\\boxed{}, separated by a comma. You get one answer.")
        return obs, {"turn": 0}

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        picks = sorted(set(re.findall(r"\b[A-D]\b", (last_boxed(action) or "").upper())))
        if len(picks) == 2:
            self.over = True
            if tuple(picks) == self.answer:
                return "Correct! Only that pair explains what happened.", 1.0, True, False, {"turn": self.turn}
            return f"Wrong. It was {self.solution()}.", 0.0, True, False, {"turn": self.turn}
        obs = f"Format error: name two of {', '.join(ROOTS)}, e.g. \\boxed{{A, C}}."
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f" Out of turns. It was {self.solution()}.", 0.0, False, True, {"turn": self.turn}
        return obs, -0.1, False, False, {"turn": self.turn}

    def solution(self):
        return ", ".join(self.answer)

    def close(self):
        pass
