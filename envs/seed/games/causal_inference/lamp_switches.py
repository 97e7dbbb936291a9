"""Skill: Causal Inference. Mechanic: multi-turn probing (intervene on switches, observe the lamp, then name the causes). Find which switches are wired to a lamp."""
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


class LampSwitchesEnv:
    N = 5

    def __init__(self, max_turns=10, **kwargs):
        self.max_turns = max_turns
        # every non-empty set of switches that could be the wired ones
        self.all_sets = [set(c) for k in range(1, self.N + 1) for c in itertools.combinations(range(1, self.N + 1), k)]

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.wired = set(rng.sample(range(1, self.N + 1), rng.randint(1, 3)))
        setting = "".join(rng.choice("01") for _ in range(self.N))
        self.seen = [(setting, self.lamp(setting))]  # (switch setting, lamp on?) observations
        self.turn, self.over = 0, False
        obs = (f"A lamp is wired in series to some of {self.N} switches (at least one): it shines exactly when every "
               "wired switch is on. The other switches do nothing.\n"
               f"Right now the switches read {setting} (switch 1 first, 1 = on) and the lamp is "
               f"{'ON' if self.seen[0][1] else 'OFF'}.\n"
               "Set all switches at once with \\boxed{set 10110} and watch the lamp. When you know the answer, "
               f"name the wired switches with \\boxed{{2, 5}}. You have {self.max_turns} turns and one answer.")
        return obs, {"turn": 0}

    def lamp(self, setting):
        return all(setting[i - 1] == "1" for i in self.wired)

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {"turn": self.turn}
        self.turn += 1
        text = (last_boxed(action) or "").lower().strip()
        exp = re.fullmatch(r"set\s*([01]{%d})" % self.N, text)
        named = re.findall(r"\d+", text)
        reward = 0.0
        if exp:
            on = self.lamp(exp.group(1))
            self.seen.append((exp.group(1), on))
            obs = f"Switches {exp.group(1)}: the lamp is {'ON' if on else 'OFF'}."
        elif named and not text.startswith("set") and all(1 <= int(s) <= self.N for s in named):
            self.over = True
            if set(map(int, named)) == self.wired:
                return "Correct! Those are exactly the wired switches.", 1.0, True, False, {"turn": self.turn}
            return f"Wrong. The wired switches were {self.solution_set()}.", 0.0, True, False, {"turn": self.turn}
        else:
            obs, reward = f"Format error: use \\boxed{{set {'1' * self.N}}} or name switches like \\boxed{{2, 5}}.", -0.1
        if self.turn >= self.max_turns:
            self.over = True
            return obs + f" Out of turns. The wired switches were {self.solution_set()}.", 0.0, False, True, {"turn": self.turn}
        return obs, reward, False, False, {"turn": self.turn}

    def solution_set(self):
        return ", ".join(map(str, sorted(self.wired)))

    def solution(self):
        alive = [s for s in self.all_sets if all(all(st[i - 1] == "1" for i in s) == on for st, on in self.seen)]
        if len(alive) == 1:
            return ", ".join(map(str, sorted(alive[0])))

        def worst_case(setting):  # candidates left after the less informative lamp outcome
            on = sum(all(setting[i - 1] == "1" for i in s) for s in alive)
            return max(on, len(alive) - on)

        settings = ["".join(bits) for bits in itertools.product("01", repeat=self.N)]
        return "set " + min(settings, key=worst_case)

    def close(self):
        pass
