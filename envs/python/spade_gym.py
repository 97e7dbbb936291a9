"""Gymnasium adapter for SPADE environments (text observation and action spaces).

    from spade_gym import make
    env = make(open("envs/seed/games/optimization/coin_change.py").read())
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("\\\\boxed{3}")

A pool (`spade env export`: a directory with pool.jsonl, or the pool.jsonl itself) registers
every environment under its id:

    import gymnasium, spade_gym
    ids, problems = spade_gym.register_pool("pools/run7")
    env = gymnasium.make("spade/" + ids[0])

The adapter runs the environment IN THIS PROCESS, with the same namespace the sandbox gives it
(common stdlib modules, numpy, math_verify's parse/verify, ToolUseEnv, ToolUseBaseEnv). Use it only for
environments the sandbox accepted (`spade env check FILE.py`); untrusted code belongs in the
sandbox. ISOLATION CAVEAT: the adapter has none of the sandbox's layers (namespaces, seccomp,
Landlock, rlimits, one process per environment). A registered pool environment runs with the
rights of the Python process that makes it, and every environment made in one process shares
its interpreter (sys.modules, open files, threads): what one does there reaches the others. A
pool's `accepted` status says the sandbox accepted the code once; it does not make generated
code safe to run here. Observations and actions are `gymnasium.spaces.Text` over every
printable character of the Basic Multilingual Plane plus tab and newline.
"""
import json
import os
import re

import gymnasium as gym
from gymnasium import spaces

_HERE = os.path.dirname(os.path.abspath(__file__))
_PRELUDE = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "crates/sandbox-runner/src/prelude.py")
_TOOLUSE = os.path.join(_HERE, "spade_tooluse.py")
_TOOLUSE_BASE = os.path.join(_HERE, "spade_tooluse_base.py")

# spec "Validation": observations are at most 20,000 characters.
MAX_OBSERVATION = 20_000
MAX_ACTION = 8_192
CHARSET = "\t\n" + "".join(
    chr(c) for c in range(32, 0x10000) if not 0xD800 <= c <= 0xDFFF and chr(c).isprintable()
)


def namespace():
    """A fresh copy of the namespace the sandbox runner gives an environment."""
    g = {"__name__": "__spade_env__"}
    for path in (_PRELUDE, _TOOLUSE, _TOOLUSE_BASE):
        with open(path) as f:
            exec(compile(f.read(), path, "exec"), g)
    return g


def env_class(source):
    """The one class whose name ends in Env that `source` defines."""
    g = namespace()
    provided = {k: v for k, v in g.items()}
    exec(compile(source, "<environment>", "exec"), g)
    found = [v for k, v in g.items()
             if k.endswith("Env") and isinstance(v, type) and provided.get(k) is not v]
    if len(found) != 1:
        raise ValueError(f"expected exactly one class whose name ends in Env, found {len(found)}")
    return found[0]


class SpadeTextEnv(gym.Env):
    """A SPADE environment as a Gymnasium environment with text spaces."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, source, render_mode=None, **env_kwargs):
        self._env = env_class(source)(**env_kwargs)
        self.render_mode = render_mode
        self.observation_space = spaces.Text(max_length=MAX_OBSERVATION, charset=CHARSET)
        self.action_space = spaces.Text(max_length=MAX_ACTION, charset=CHARSET)
        self._last = ""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        # SPADE environments need an int seed; derive one from Gymnasium's generator otherwise.
        env_seed = seed if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
        obs, info = self._env.reset(seed=env_seed)
        self._last = obs
        return obs, dict(info)

    def step(self, action):
        obs, reward, terminated, truncated, info = self._env.step(action)
        self._last = obs
        return obs, float(reward), bool(terminated), bool(truncated), dict(info)

    def render(self):
        return self._last if self.render_mode == "ansi" else None

    def close(self):
        close = getattr(self._env, "close", None)
        if callable(close):
            close()


def make(source, **kwargs):
    return SpadeTextEnv(source, **kwargs)


# Gymnasium's id grammar (namespace/name); an id outside it cannot be registered.
_GYM_NAME = re.compile(r"^[\w:.-]+$")


def read_pool(path):
    """The environments of a pool as [(id, source)] in line order, and one message per problem
    (a line that is not JSON, a missing field, a missing code file, a duplicate id), each naming
    the file and line. `path` is a pool directory (with pool.jsonl) or a pool.jsonl."""
    index = os.path.join(path, "pool.jsonl") if os.path.isdir(path) else path
    base = os.path.dirname(os.path.abspath(index))
    entries, problems, seen = [], [], {}
    with open(index, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{index}:{n}"
            try:
                e = json.loads(line)
                env_id = e["id"]
                if not isinstance(e, dict) or not isinstance(env_id, str):
                    raise ValueError("expected an object with a string `id`")
            except (ValueError, KeyError, TypeError) as err:
                problems.append(f"{where}: expected one JSON object of the pool format: {err}")
                continue
            if env_id in seen:
                problems.append(f"{where}: duplicate id {env_id!r} (first on line {seen[env_id]})")
                continue
            code, code_file = e.get("code"), e.get("code_file")
            if code is None:
                if not isinstance(code_file, str) or code_file.startswith("/") or ".." in code_file.split("/"):
                    problems.append(f"{where}: {env_id}: expected `code` or a relative `code_file`")
                    continue
                try:
                    with open(os.path.join(base, code_file), encoding="utf-8") as c:
                        code = c.read()
                except OSError as err:
                    problems.append(f"{where}: {env_id}: `code_file` {code_file!r}: {err}")
                    continue
            seen[env_id] = n
            entries.append((env_id, code))
    return entries, problems


def register_pool(path, namespace="spade"):
    """Registers every environment of the pool at `path` as `<namespace>/<id>` (see the
    isolation caveat above). Returns (registered ids, problems); an id Gymnasium's grammar does
    not allow is a problem, not an error."""
    entries, problems = read_pool(path)
    ids = []
    for env_id, source in entries:
        if not _GYM_NAME.match(env_id):
            problems.append(f"{env_id!r}: not a Gymnasium id (letters, digits, _ : . - only)")
            continue
        gym.register(id=f"{namespace}/{env_id}", entry_point=SpadeTextEnv, kwargs={"source": source})
        ids.append(env_id)
    return ids, problems
