"""In-process baseline for crates/sandbox-runner/benches/sandbox_throughput.rs.

Usage: python3 envs/bench_inprocess.py EPISODES FILE.py...
Execs each environment source in one interpreter with the same prelude namespace the sandbox
gives (stdlib modules, numpy, ToolUseEnv), plays EPISODES episodes of its own solution(), and
prints {"steps": N, "seconds": S} for the playing alone.
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def namespace():
    g = {"__name__": "__spade_env__"}
    for path in (os.path.join(ROOT, "crates/sandbox-runner/src/prelude.py"),
                 os.path.join(HERE, "python/spade_tooluse.py")):
        with open(path) as f:
            exec(compile(f.read(), path, "exec"), g)
    return g


def main():
    episodes = int(sys.argv[1])
    envs = []
    for path in sys.argv[2:]:
        g = namespace()
        with open(path) as f:
            exec(compile(f.read(), path, "exec"), g)
        cls = [v for k, v in g.items() if k.endswith("Env") and isinstance(v, type)
               and v.__module__ == "__spade_env__"][0]
        tool_use = issubclass(cls, g["ToolUseEnv"])
        envs.append((cls(), tool_use))
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
