"""Skill: Optimization. Mechanic: multi-turn probing (spend turns on altitude readings, then name the summit). Find the maximum of a hidden single-peaked trail."""
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


class PeakFinderEnv:
    def __init__(self, max_turns=18, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.n = rng.randint(120, 250)
        self.summit = rng.randint(self.n // 5, 4 * self.n // 5)
        self.height = {1: rng.randint(100, 300)}
        for x in range(2, self.n + 1):  # strictly up to the summit, strictly down after it
            step = rng.randint(1, 9)
            self.height[x] = self.height[x - 1] + (step if x <= self.summit else -step)
        self.readings = {}
        self.turn, self.over = 0, False
        obs = (f"A trail has markers 1 to {self.n}. Its altitude rises strictly to a single summit and then "
               "falls strictly.\nRead the altitude at a marker with \\boxed{read 57}; name the summit marker with "
               f"\\boxed{{57}}. You have {self.max_turns} turns in total.")
        return obs, {"turn": 0}

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        text = (last_boxed(action) or "").lower()
        read = re.fullmatch(r"read\s*(\d+)", text)
        reward = 0.0
        if read and 1 <= int(read.group(1)) <= self.n:
            x = int(read.group(1))
            self.readings[x] = self.height[x]
            obs = f"Altitude at marker {x}: {self.height[x]} m."
        elif text.isdigit() and 1 <= int(text) <= self.n:
            if int(text) == self.summit:
                self.over = True
                return f"Yes, marker {self.summit} is the summit!", 1.0, True, False, {"turn": self.turn}
            obs = f"Marker {text} is not the summit."
        else:
            obs, reward = f"Format error: use \\boxed{{read x}} or \\boxed{{x}} with 1 <= x <= {self.n}.", -0.1
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f" Out of turns. The summit was marker {self.summit}.", 0.0, False, True, {"turn": self.turn}
        return obs, reward, False, False, {"turn": self.turn, "readings": len(self.readings)}

    def solution(self):
        if not self.readings:
            return f"read {(1 + self.n) // 2}"
        best = max(self.readings, key=self.readings.get)
        left = max([x for x in self.readings if x < best], default=0)         # summit lies strictly
        right = min([x for x in self.readings if x > best], default=self.n + 1)  # between left and right
        if right - left == 2:
            return str(best)
        if best - left >= right - best:  # probe the wider side of the bracket
            return f"read {(left + best) // 2}"
        return f"read {(best + right) // 2}"

    def close(self):
        pass
