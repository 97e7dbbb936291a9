"""Check SPADE environment files the way the validator does (plus a few seed-library style rules).

Usage (from the repository root):
    /root/.cache/spade-studio/venv/bin/python3 envs/check_seeds.py             # every seed env
    /root/.cache/spade-studio/venv/bin/python3 envs/check_seeds.py FILE...     # chosen files
    ... --no-style   skip the seed-library style rules (docstring, <=150 lines, observations
                     <=2,000 characters for games and <=3,000 for tool use instead of the
                     validator's 20,000, max_turns <= 25), e.g. for generated environments

Each file is exec'd in a fresh namespace holding the common stdlib modules (and ToolUseEnv for
tool-use files, i.e. files with a class deriving from ToolUseEnv). Checks, in order: exactly one
class whose name ends in Env; constructor shape; structural probe; not pre-satisfied; determinism
(in this process and across two processes with different PYTHONHASHSEED); solvable for seeds
0..4 by stepping solution(); the seed matters (the observation sequences of those five
winning plays are not all identical).
Prints one line per file and a summary; exits 1 if any file fails.
"""

import ast
import builtins
import collections
import functools
import hashlib
import heapq
import inspect
import itertools
import json
import math
import os
import random
import re
import signal
import string
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, "python"))
from spade_tooluse import ToolUseEnv  # noqa: E402

GAME_PROBES = ["\\boxed{1}", "\\boxed{test}", "\\boxed{42}", "no box at all"]
TOOL_PROBES = ["\\boxed{1}", "\\boxed{test}", "\\boxed{42}", '<tool_call>{"name": "x", bad json</tool_call>',
               '<tool_call>{"name":"nope","arguments":{}}</tool_call>']
MAX_OBS, STYLE_MAX_LINES, AGENT_MAX_TURNS, FILE_TIMEOUT_S = 20000, 150, 25, 120
STYLE_MAX_OBS = {False: 2000, True: 3000}  # games / tool use (its first observation lists the tool schemas)


class CheckFailed(Exception):
    pass


def fail_unless(cond, check, why):
    if not cond:
        raise CheckFailed(f"{check}: {why}")


def is_tooluse_source(tree):
    return any(isinstance(n, ast.ClassDef) and any(isinstance(b, ast.Name) and b.id == "ToolUseEnv" for b in n.bases)
               for n in tree.body)


def load_env_class(path, style):
    src = open(path, encoding="utf-8").read()
    tree = ast.parse(src, path)
    if style:
        doc = ast.get_docstring(tree) or ""
        fail_unless(doc.startswith("Skill:") and "Mechanic:" in doc, "style", "module docstring must read 'Skill: ... Mechanic: ...'")
        fail_unless(len(src.splitlines()) <= STYLE_MAX_LINES, "style", f"{len(src.splitlines())} lines > {STYLE_MAX_LINES}")
    tooluse = is_tooluse_source(tree)
    ns = {"__name__": "spade_env", "__builtins__": builtins, "math": math, "random": random, "re": re,
          "itertools": itertools, "collections": collections, "json": json, "string": string,
          "functools": functools, "heapq": heapq}
    if tooluse:
        ns["ToolUseEnv"] = ToolUseEnv
    exec(compile(src, path, "exec"), ns)
    classes = [v for k, v in ns.items() if isinstance(v, type) and k.endswith("Env") and v is not ToolUseEnv]
    fail_unless(len(classes) == 1, "one Env class", f"found {[c.__name__ for c in classes]}")
    cls = classes[0]
    fail_unless(not tooluse or issubclass(cls, ToolUseEnv), "one Env class", "tool-use class must derive from ToolUseEnv")
    params = inspect.signature(cls.__init__).parameters
    fail_unless("max_turns" in params and params["max_turns"].default is not inspect.Parameter.empty
                and any(p.kind == p.VAR_KEYWORD for p in params.values()),
                "constructor", "__init__ must be (self, max_turns=..., **kwargs)")
    return cls, tooluse


def is_number(x):
    """int or float (not bool), or a numpy number; the runner reads it as f64."""
    if type(x) is bool or is_flag(x):
        return False
    return isinstance(x, (int, float)) or type(x).__module__ == "numpy" and hasattr(x, "__float__")


def is_flag(x):
    """bool, or numpy's bool_ (which comparisons of numpy values produce); the runner accepts both."""
    return type(x) is bool or f"{type(x).__module__}.{type(x).__name__}" in ("numpy.bool", "numpy.bool_")


def check_reset(ret, check, limit):
    fail_unless(type(ret) is tuple and len(ret) == 2, check, f"reset must return a 2-tuple, got {type(ret).__name__}")
    obs, info = ret
    check_obs(obs, check, limit)
    check_info(info, check)
    return ret


def check_step(ret, check, limit):
    fail_unless(type(ret) is tuple and len(ret) == 5, check, f"step must return a 5-tuple, got {type(ret).__name__}")
    obs, reward, terminated, truncated, info = ret
    check_obs(obs, check, limit)
    fail_unless(is_number(reward), check, f"reward must be a float, got {type(reward).__name__}")
    fail_unless(math.isfinite(float(reward)) and -10 <= float(reward) <= 10, check, f"reward {reward} not finite in [-10, 10]")
    fail_unless(is_flag(terminated) and is_flag(truncated), check, "terminated and truncated must be bool")
    terminated, truncated = bool(terminated), bool(truncated)
    fail_unless(not (terminated and truncated), check, "terminated and truncated both True")
    check_info(info, check)
    return obs, float(reward), terminated, truncated, info


def check_obs(obs, check, limit):
    fail_unless(isinstance(obs, str), check, f"observation must be str, got {type(obs).__name__}")
    fail_unless(len(obs) <= limit, check, f"observation of {len(obs)} characters > {limit}")


def check_info(info, check):
    fail_unless(isinstance(info, dict), check, f"info must be a dict, got {type(info).__name__}")
    try:
        json.dumps(info, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise CheckFailed(f"{check}: info is not JSON-serialisable ({exc})")


def is_win(reward, terminated):
    return terminated and reward >= 1.0 - 1e-9


def action_of(env, tooluse):
    sol = env.solution()
    fail_unless(isinstance(sol, str) or is_number(sol), "solvable", f"solution() must return str, got {type(sol).__name__}")
    return str(sol) if tooluse else "\\boxed{" + str(sol) + "}"


def play_solution(env, seed, tooluse, limit, trace):
    """Step solution() from reset(seed); return (won, turns, why)."""
    trace.append(check_reset(env.reset(seed=seed), "solvable", limit))
    turns = min(int(env.max_turns), AGENT_MAX_TURNS)
    for turn in range(1, turns + 1):
        obs, reward, terminated, truncated, info = check_step(env.step(action_of(env, tooluse)), "solvable", limit)
        trace.append((obs, reward, terminated, truncated, info))
        if terminated or truncated:
            if is_win(reward, terminated):
                fail_unless(abs(reward - 1.0) < 1e-9, "solvable", f"win reward is {reward}, not 1.0")
                try:
                    env.solution()
                except Exception as exc:
                    raise CheckFailed(f"solvable: solution() raises after the episode ended ({type(exc).__name__}: {exc})")
                return turn
            raise CheckFailed(f"solvable: seed {seed} ended at turn {turn} without a win "
                              f"(reward {reward}, truncated={truncated}): {obs[:160]!r}")
        fail_unless(reward < 1.0, "solvable", f"non-terminal reward {reward} >= 1.0 (partial rewards must stay below a win)")
    raise CheckFailed(f"solvable: seed {seed} not won within {turns} turns")


def probe(env, tooluse, limit):
    """Structural probe; returns the trace. Also checks that nothing wins."""
    trace = [check_reset(env.reset(seed=42), "structural probe", limit)]
    for action in (TOOL_PROBES if tooluse else GAME_PROBES):
        step = check_step(env.step(action), "structural probe", limit)
        fail_unless(not is_win(step[1], step[2]), "not pre-satisfied", f"probe {action!r} won")
        if tooluse:  # every tool-use probe is a format error
            fail_unless(step[1] == -0.1 and not step[2], "structural probe", f"format error {action!r} must give -0.1, not terminated")
        trace.append(step)
    trace.append(check_reset(env.reset(seed=123), "structural probe", limit))
    return trace


def full_trace(cls, seed, tooluse, limit):
    env = cls()
    trace = [check_reset(env.reset(seed=seed), "determinism", limit)]
    for action in (TOOL_PROBES if tooluse else GAME_PROBES):
        trace.append(check_step(env.step(action), "determinism", limit))
    play_solution(env, seed, tooluse, limit, trace)
    env.close()
    return json.dumps(trace, sort_keys=True, default=repr)


def fingerprint(cls, tooluse, limit):
    return hashlib.sha256("".join(full_trace(cls, s, tooluse, limit) for s in (0, 1, 2)).encode()).hexdigest()


def check_file(path, style):
    cls, tooluse = load_env_class(path, style)
    limit = STYLE_MAX_OBS[tooluse] if style else MAX_OBS
    env = cls()
    fail_unless(isinstance(getattr(env, "max_turns", None), int) and env.max_turns >= 1, "constructor", "self.max_turns must be a positive int")
    if style:
        fail_unless(env.max_turns <= AGENT_MAX_TURNS, "style", f"max_turns {env.max_turns} > {AGENT_MAX_TURNS} (the agent's turn cap)")
    probe(env, tooluse, limit)
    if tooluse:
        for seed in (0, 1, 2):
            env.reset(seed=seed)
            crit = env.criteria()
            fail_unless(isinstance(crit, list) and all(type(c) is bool for c in crit), "not pre-satisfied", "criteria() must return list[bool]")
            fail_unless(not any(crit), "not pre-satisfied", f"seed {seed}: criteria at reset {crit}")
            step = check_step(env.step("<answer>done</answer>"), "not pre-satisfied", limit)
            fail_unless(step[2] and step[1] == 0.0, "not pre-satisfied", "<answer>done</answer> at reset must end with reward 0.0")
    else:
        for seed in (0, 1, 2):
            obs, _ = env.reset(seed=seed)
            fail_unless(not re.search(r"the answer is", obs, re.I), "not pre-satisfied", "first observation states the answer")
            fail_unless("\\boxed{" + str(env.solution()) + "}" not in obs, "not pre-satisfied",
                        f"seed {seed}: the first observation shows the winning action as an example")
    for seed in (0, 1, 2):
        fail_unless(full_trace(cls, seed, tooluse, limit) == full_trace(cls, seed, tooluse, limit),
                    "determinism", f"seed {seed}: two runs with the same actions differ")
    turns, plays = [], set()
    for seed in range(5):
        trace = []
        turns.append(play_solution(env, seed, tooluse, limit, trace))
        plays.add(tuple(step[0] for step in trace))
    fail_unless(len(plays) >= 2, "seed matters", "seeds 0..4 give identical observation sequences")
    env.close()
    return tooluse, turns, fingerprint(cls, tooluse, limit)


def seed_files():
    root = os.path.join(HERE, "seed")
    out = []
    for dirpath, _, names in os.walk(root):
        out += [os.path.join(dirpath, n) for n in names if n.endswith(".py")]
    return sorted(out)


def _timeout(signum, frame):
    raise CheckFailed(f"timeout: more than {FILE_TIMEOUT_S} s")


def main(argv):
    style = "--no-style" not in argv
    if "--fingerprint" in argv:  # child mode for the cross-process determinism check
        paths = [a for a in argv if not a.startswith("--")]
        out = {}
        for p in paths:
            try:
                cls, tooluse = load_env_class(p, style)
                out[p] = fingerprint(cls, tooluse, STYLE_MAX_OBS[tooluse] if style else MAX_OBS)
            except Exception as exc:
                out[p] = f"error: {exc}"
        print(json.dumps(out))
        return 0
    paths = [os.path.abspath(a) for a in argv if not a.startswith("--")] or seed_files()
    signal.signal(signal.SIGALRM, _timeout)
    results, prints = {}, {}
    for path in paths:
        signal.alarm(FILE_TIMEOUT_S)
        try:
            tooluse, turns, prints[path] = check_file(path, style)
            results[path] = (True, f"{'tool-use' if tooluse else 'game'}; solution wins in {turns} turns (seeds 0-4)")
        except CheckFailed as exc:
            results[path] = (False, str(exc))
        except Exception as exc:
            results[path] = (False, f"crash: {type(exc).__name__}: {exc}")
        finally:
            signal.alarm(0)
    ok_paths = [p for p in paths if results[p][0]]
    if ok_paths:
        child_prints = []
        for hash_seed in ("1", "2"):
            env = dict(os.environ, PYTHONHASHSEED=hash_seed)
            cmd = [sys.executable, os.path.abspath(__file__), "--fingerprint"] + ([] if style else ["--no-style"]) + ok_paths
            child_prints.append(json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout))
        for p in ok_paths:
            if not (prints[p] == child_prints[0].get(p) == child_prints[1].get(p)):
                results[p] = (False, "determinism: traces differ across processes (PYTHONHASHSEED); avoid iterating over sets of str")
    groups = collections.Counter()
    for path in paths:
        ok, msg = results[path]
        shown = os.path.relpath(path, HERE) if path.startswith(HERE + os.sep) else path
        print(f"{'OK  ' if ok else 'FAIL'} {shown}: {msg}")
        groups[os.path.basename(os.path.dirname(path))] += ok
    n_ok = sum(ok for ok, _ in results.values())
    print(f"\nSummary: {len(paths)} files, {n_ok} OK, {len(paths) - n_ok} failed")
    print("OK per folder: " + ", ".join(f"{g} {n}" for g, n in sorted(groups.items())))
    return 0 if n_ok == len(paths) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
