"""In-process baseline for crates/sandbox-runner/benches/sandbox_throughput.rs.

Usage: python3 envs/bench_inprocess.py EPISODES FILE.py...
Loads each environment in this interpreter with the namespace the sandbox gives it (through
spade_gym.env_class), plays EPISODES episodes of its own solution(), and prints
{"steps": N, "seconds": S} for the playing alone.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python"))

from spade_gym import env_class, namespace  # noqa: E402


def main():
    episodes = int(sys.argv[1])
    tool_base = namespace()["ToolUseEnv"]
    envs = []
    for path in sys.argv[2:]:
        with open(path) as f:
            cls = env_class(f.read())
        envs.append((cls(), any(b.__name__ == tool_base.__name__ for b in cls.__mro__[1:])))
    steps = 0
    t0 = time.perf_counter()
    for env, tool_use in envs:
        turns = getattr(env, "max_turns", 25)
        for ep in range(episodes):
            env.reset(seed=ep)
            for _ in range(turns):
                s = str(env.solution())
                _, _, term, trunc, _ = env.step(s if tool_use else "\\boxed{%s}" % s)
                steps += 1
                if term or trunc:
                    break
    print(json.dumps({"steps": steps, "seconds": time.perf_counter() - t0}))


if __name__ == "__main__":
    main()
