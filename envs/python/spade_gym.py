"""Gymnasium adapter for SPADE environments (text observation and action spaces).

    from spade_gym import make
    env = make(open("envs/seed/games/optimization/coin_change.py").read())
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("\\\\boxed{3}")

The adapter runs the environment IN THIS PROCESS, with the same namespace the sandbox gives it
(common stdlib modules, numpy, math_verify's parse/verify, ToolUseEnv). Use it only for
environments the sandbox accepted (`spade env check FILE.py`); untrusted code belongs in the
sandbox. Observations and actions are `gymnasium.spaces.Text` over every printable character of
the Basic Multilingual Plane plus tab and newline.
"""
import os

import gymnasium as gym
from gymnasium import spaces

_HERE = os.path.dirname(os.path.abspath(__file__))
_PRELUDE = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "crates/sandbox-runner/src/prelude.py")
_TOOLUSE = os.path.join(_HERE, "spade_tooluse.py")

# spec "Validation": observations are at most 20,000 characters.
MAX_OBSERVATION = 20_000
MAX_ACTION = 8_192
CHARSET = "\t\n" + "".join(
    chr(c) for c in range(32, 0x10000) if not 0xD800 <= c <= 0xDFFF and chr(c).isprintable()
)


def namespace():
    """A fresh copy of the namespace the sandbox runner gives an environment."""
    g = {"__name__": "__spade_env__"}
    for path in (_PRELUDE, _TOOLUSE):
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
