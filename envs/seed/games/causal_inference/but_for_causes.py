"""Skill: Causal Inference. Mechanic: state-gated with a partial reward (first say what happened, then which starting events were but-for causes). Counterfactual reasoning."""
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


STARTS, LATER = "ABCDE", "FGHIZ"


def run(rules, started):
    """Every event that happens when exactly the starting events in `started` occur."""
    happened = set(started)
    for event, (kind, parents) in rules.items():
        hits = [p in happened for p in parents]
        if (kind == "and" and all(hits)) or (kind == "or" and any(hits)):
            happened.add(event)
    return happened


def parse_set(text):
    """'F, H' -> {'F', 'H'}; 'none' -> set(); None if no letters or 'none' found."""
    if text is None:
        return None
    if text.strip().lower() in ("none", "nothing", "{}", "\\emptyset"):
        return set()
    letters = re.findall(r"\b[A-Z]\b", text.upper())
    return set(letters) if letters else None


class ButForCausesEnv:
    def __init__(self, max_turns=6, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        while True:
            self.rules = {}
            for i, event in enumerate(LATER):
                kind = rng.choice(["and", "or"])
                self.rules[event] = (kind, sorted(rng.sample(list(STARTS + LATER[:i]), 2)))
            self.started = set(rng.sample(STARTS, rng.randint(3, 4)))
            happened = run(self.rules, self.started)
            causes = {s for s in self.started if "Z" not in run(self.rules, self.started - {s})}
            if "Z" in happened and causes and causes != self.started and not set(LATER) <= happened:
                break
        self.answers = [happened - set(STARTS), causes]
        self.stage, self.turn, self.over = 0, 0, False
        lines = [f"- {e} happens if {'both ' if k == 'and' else ''}{p[0]} {k} {p[1]} happen{'' if k == 'and' else 's'}."
                 for e, (k, p) in self.rules.items()]
        obs = ("Starting events " + ", ".join(STARTS) + " happen only on their own; later events follow these rules "
               "and nothing else:\n" + "\n".join(lines)
               + f"\n\nToday exactly {', '.join(sorted(self.started))} started.\n" + self.question())
        return obs, {"turn": 0, "stage": 0}

    def question(self):
        if self.stage == 0:
            return ("Step 1: which of F, G, H, I, Z happened? Answer with their letters, e.g. \\boxed{F, I} "
                    "(or \\boxed{none}).")
        return ("Step 2: Z happened. Which starting events were but-for causes of Z, i.e. had that one event not "
                "started (everything else the same), Z would not have happened? Answer with letters or \\boxed{none}.")

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn, "stage": self.stage}
        self.turn += 1
        picks = parse_set(last_boxed(action))
        reward = 0.0
        if picks is None:
            obs, reward = "Format error: answer with letters like \\boxed{F, I} or \\boxed{none}.", -0.1
        elif picks != self.answers[self.stage]:
            obs = "That is not right. " + self.question()
        elif self.stage == 1:
            self.over = True
            return "Correct! You found exactly the but-for causes.", 1.0, True, False, {"turn": self.turn, "stage": 2}
        else:
            self.stage, reward = 1, 0.3
            obs = "Correct. " + self.question()
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f" Out of turns. Answer: {self.solution()}.", 0.0, False, True, {"turn": self.turn, "stage": self.stage}
        return obs, reward, False, False, {"turn": self.turn, "stage": self.stage}

    def solution(self):
        return ", ".join(sorted(self.answers[self.stage])) or "none"

    def close(self):
        pass
