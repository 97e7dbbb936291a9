"""Skill: Causal Inference. Mechanic: single-answer (2 tries, numeric tolerance). Estimate a treatment effect from confounded data where the crude comparison misleads."""
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


class SimpsonsStratifyEnv:
    def __init__(self, max_turns=2, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        while True:
            rows = []  # (severity, drug, patients, recovered)
            for severity, base in (("mild", rng.randint(14, 19)), ("severe", rng.randint(4, 10))):
                lift = rng.randint(-3, 4)  # the drug's true effect in this group, in steps of 5 points
                treated = 20 * (rng.randint(1, 4) if severity == "mild" else rng.randint(6, 12))
                control = 20 * (rng.randint(6, 12) if severity == "mild" else rng.randint(1, 4))
                for drug, n, rate in (("yes", treated, base + lift), ("no", control, base)):
                    rate = 5 * max(1, min(19, rate))
                    rows.append((severity, drug, n, n * rate // 100))
            self.rows = rows
            total = sum(r[2] for r in rows)
            effect = 0.0
            for severity in ("mild", "severe"):
                (_, _, nt, rt), (_, _, nc, rc) = [r for r in rows if r[0] == severity]
                effect += (nt + nc) / total * (100 * rt / nt - 100 * rc / nc)
            crude = (100 * sum(r[3] for r in rows if r[1] == "yes") / sum(r[2] for r in rows if r[1] == "yes")
                     - 100 * sum(r[3] for r in rows if r[1] == "no") / sum(r[2] for r in rows if r[1] == "no"))
            if abs(effect) >= 3 and crude * effect < 0:  # the naive comparison points the wrong way
                break
        self.effect = effect
        self.turn, self.over = 0, False
        table = "\n".join(f"{s:<8} {d:<5} {n:>8} {r:>9}" for s, d, n, r in rows)
        obs = ("A hospital records who got a new drug and who recovered. Doctors gave the drug mostly to severe cases.\n"
               f"{'severity':<8} {'drug':<5} {'patients':>8} {'recovered':>9}\n" + table
               + "\n\nIf everyone in this hospital's population got the drug instead of nobody, by how many percentage "
               "points would the recovery rate change (negative if it would fall)? Round to a whole number, "
               f"e.g. \\boxed{{-7}}. You have {self.max_turns} tries.")
        return obs, {"turn": 0}

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        m = re.search(r"[-+]?\d+(\.\d+)?", (last_boxed(action) or "").replace(" ", ""))
        reward = 0.0
        if not m:
            obs, reward = "Format error: give a number of percentage points, e.g. \\boxed{-7}.", -0.1
        elif abs(float(m.group()) - self.effect) <= 0.5 + 1e-9:
            self.over = True
            return f"Correct: the effect is about {self.effect:.1f} points.", 1.0, True, False, {"turn": self.turn}
        else:
            obs = f"{m.group()} points is not right."
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f" Out of tries. The effect was {self.effect:.1f} points.", 0.0, False, True, {"turn": self.turn}
        return obs, reward, False, False, {"turn": self.turn}

    def solution(self):
        return str(round(self.effect))

    def close(self):
        pass
