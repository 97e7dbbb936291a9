"""One RLVE environment (the `rlve-gym` package's `Gym`) as a single-turn game of our contract.

The sandbox loads this file with constants prepended by `spade_sandbox::rlve::source`:
`RLVE_IDENTIFIER` (a key of `Gym.environments.identifier2environment`), `RLVE_DIFFICULTY`
(how many times the environment's parameter controller has been `update()`d, 0 = its initial
parameter) and `RLVE_MARKERS`. `reset(seed)` draws a problem with the environment's generator at
that difficulty, `step(reply)` scores the agent's whole reply with the environment's scorer (its
last `<answer>...</answer>`), and `solution()` is the reference answer in those markers.

`RLVE_MARKERS = "boxed"` is RLVE's other marker mode, for our training loop, whose agents answer
in `\\boxed{}` and whose worker steps a game with the reply's last `\\boxed{...}`: the prompt asks
for a boxed answer, `step` scores the content of the last balanced `\\boxed{...}` (nested braces
kept, which RLVE's own `\\boxed{` ... `}` regex would cut), and `solution()` is the bare
reference, which the game contract boxes.

Why a game and not tool use: the game contract is reset/step/solution on one reply, which is
what an RLVE problem is; tool use would need the `ToolUseEnv` base class, tool schemas and
`criteria()`, and its `<answer>` carries only `done`. The one difference from a seed game is the
answer markers: RLVE's scorers read `<answer>...</answer>` from the whole reply, so a caller
passes the reply itself, not a `\\boxed{}` extracted from it. (The runner's `play_solution`
wraps `solution()` in `\\boxed{}`; the scorer still finds the `<answer>` element inside it.)

Two things in `Gym.environment` do not work in the sandbox and are replaced before it is
imported:
- it imports torch only to seed it in `manual_seed`; torch costs seconds and hundreds of MB to
  import, so a stand-in module with no-op seeding takes its place (no environment uses torch
  otherwise: `random` and numpy are what they draw from, and `manual_seed` seeds both);
- its `timeout` decorator runs the function in a thread, and the sandbox refuses threads, so
  generation and scoring call the function directly under a SIGALRM timer instead (the same
  `TimeoutException` on expiry; the sandbox's wall-clock limit per call is the outer bound).
"""

import ast as _ast
import copy as _copy
import importlib as _importlib
import importlib.util as _importlib_util
import os as _os
import random as _random
import signal as _signal
import sys as _sys
import types as _types

# TinyZero's instruction, which RLVE puts before a problem when answers go in <answer> markers
# (RLVE's tinker-cookbook recipe, rlve/procgen_env.py, `TinyZero_TEMPLATE`).
RLVE_INSTRUCTION = (
    "A conversation between User and Assistant. The user asks a question, and the assistant "
    "solves it. The assistant first thinks about the reasoning process in the mind and then "
    "provides the user with the answer. Show your work in <think> </think> tags, and return "
    "the final answer in <answer> </answer> tags."
)
RLVE_BOXED_INSTRUCTION = "Solve the problem below, and give the final answer in \\boxed{}."
# Gym.environment.VerifiableEnvironment.generator's own default limit, in seconds.
RLVE_GENERATE_SECONDS = 10
# VerifiableEnvironment.verifier's tolerance when it compares a score with the threshold.
RLVE_EPS = 1e-6


def _install_torch_stand_in():
    if "torch" in _sys.modules:
        return
    torch = _types.ModuleType("torch")
    torch.__doc__ = "SPADE's stand-in: RLVE only seeds torch, and nothing here draws from it."
    torch.manual_seed = lambda seed: None
    cuda = _types.ModuleType("torch.cuda")
    cuda.manual_seed_all = lambda seed: None
    cudnn = _types.SimpleNamespace(deterministic=False, benchmark=True)
    torch.cuda = cuda
    torch.backends = _types.SimpleNamespace(cudnn=cudnn)
    _sys.modules["torch"] = torch
    _sys.modules["torch.cuda"] = cuda


def _alarm_timeout(seconds):
    """`Gym.environment.timeout` without a thread: SIGALRM interrupts the call instead."""

    def decorator(func):
        def wrapper(*args, **kwargs):
            from Gym.environment import TimeoutException

            def expire(signum, frame):
                raise TimeoutException("Function timed out after {} seconds".format(seconds))

            previous = _signal.signal(_signal.SIGALRM, expire)
            _signal.setitimer(_signal.ITIMER_REAL, seconds)
            try:
                return func(*args, **kwargs)
            finally:
                _signal.setitimer(_signal.ITIMER_REAL, 0)
                _signal.signal(_signal.SIGALRM, previous)

        wrapper.__name__ = getattr(func, "__name__", "wrapper")
        return wrapper

    return decorator


def _lazy_package(name):
    """Registers `Gym.<name>` without running its `__init__`, which imports all 400 modules
    (about a second, with networkx and sympy); returns {identifier: (module, class name)} read
    from that `__init__` with `ast`, so only the module asked for is imported."""
    full = "Gym." + name
    spec = _importlib_util.find_spec("Gym")
    root = _os.path.join(_os.path.dirname(spec.origin), name)
    init = _os.path.join(root, "__init__.py")
    with open(init, encoding="utf-8") as f:
        tree = _ast.parse(f.read())
    class_module = {}
    table = {}
    for node in tree.body:
        if isinstance(node, _ast.ImportFrom) and node.module:
            for alias in node.names:
                class_module[alias.asname or alias.name] = node.module
        elif isinstance(node, _ast.Assign) and isinstance(node.value, _ast.Dict):
            for key, value in zip(node.value.keys, node.value.values):
                if isinstance(key, _ast.Constant) and isinstance(value, _ast.Name):
                    module = class_module.get(value.id)
                    if module is not None:
                        table[key.value] = (module, value.id)
    if full not in _sys.modules:
        package = _types.ModuleType(full)
        package.__path__ = [root]
        package.__package__ = full
        _sys.modules[full] = package
    return table


def _load(table, identifier, what):
    if identifier not in table:
        raise KeyError("RLVE has no {} named {!r}".format(what, identifier))
    module, cls = table[identifier]
    return getattr(_importlib.import_module(module), cls)


_install_torch_stand_in()
import Gym.environment as _gym_environment  # noqa: E402  (after the stand-in, on purpose)

_gym_environment.timeout = _alarm_timeout
_ENVIRONMENTS = _lazy_package("environments")
_CONTROLLERS = _lazy_package("parameter_controllers")


def rlve_identifiers():
    """Every environment identifier the installed package has, sorted."""
    return sorted(_ENVIRONMENTS)


def rlve_parameters(identifier, difficulty):
    """The controller's parameter list after `difficulty` updates (RLVE draws one per problem)."""
    controller = _load(_CONTROLLERS, identifier, "parameter controller")()
    for _ in range(difficulty):
        controller.update()
    return _copy.deepcopy(controller.get_parameter_list())


def _last_boxed(text):
    """The content of the last balanced `\\boxed{...}`, as `spade::parse::last_boxed`."""
    opener = "\\boxed{"
    best = None
    start = text.find(opener)
    while start != -1:
        depth, i = 1, start + len(opener)
        while i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    best = text[start + len(opener) : i]
                    break
            i += 1
        start = text.find(opener, start + len(opener))
    return best


class RlveEnv:
    def __init__(self, max_turns=1, identifier=None, difficulty=None, **kwargs):
        self.max_turns = max_turns
        self.identifier = RLVE_IDENTIFIER if identifier is None else identifier  # noqa: F821
        self.difficulty = RLVE_DIFFICULTY if difficulty is None else difficulty  # noqa: F821
        self.boxed = globals().get("RLVE_MARKERS", "answer") == "boxed"
        self._cls = _load(_ENVIRONMENTS, self.identifier, "environment")
        self._parameters = rlve_parameters(self.identifier, self.difficulty)
        self._problem = None
        self._done = True

    def _info(self, **extra):
        info = {"identifier": self.identifier, "difficulty": self.difficulty}
        info.update(extra)
        return info

    def reset(self, seed=None):
        seed = 0 if seed is None else int(seed)
        # Which of the controller's parameters, from the seed alone, as RLVE's
        # `random.choice(parameter_list)` but positional.
        parameter = _random.Random(seed).choice(self._parameters)
        problem = self._cls()

        # VerifiableEnvironment.generator without its thread (see the module docstring); an
        # exception propagates so the caller sees why, where generator() would return False.
        @_alarm_timeout(RLVE_GENERATE_SECONDS)
        def generate():
            problem.seed = seed
            problem.parameter = _copy.deepcopy(parameter)
            _gym_environment.manual_seed(seed)
            problem._generate()

        generate()
        if problem.parameter is None:
            raise RuntimeError("{} could not generate a problem at seed {}".format(self.identifier, seed))
        self._problem = problem
        self._done = False
        instruction = RLVE_BOXED_INSTRUCTION if self.boxed else RLVE_INSTRUCTION
        prompt = instruction + "\n\n" + problem.prompt_generator()
        # About 65 of the 400 are construction problems with many right answers and keep no
        # `reference_answer` (only, say, the optimum a constructed answer must reach); for them
        # `solution()` has nothing to give.
        return prompt, self._info(seed=seed, has_reference="reference_answer" in problem.parameter)

    def step(self, action):
        if self._done or self._problem is None:
            return "The episode is over.", 0.0, True, False, self._info()
        self._done = True
        problem = self._problem
        if self.boxed:
            boxed = _last_boxed(action)
            start, end = problem.answer_markers
            action = "" if boxed is None else start + boxed + end
        # As VerifiableEnvironment.verifier: a scorer that raises scores -1 (wrong format).
        try:
            score = float(problem.scorer(action))
        except Exception:
            score = -1.0
        threshold = float(problem.passing_reward_threshold)
        win = score >= threshold - RLVE_EPS
        info = self._info(score=score, threshold=threshold, accuracy=int(win))
        if win:
            return "Correct.", 1.0, True, False, info
        # Below the threshold the score is the reward (RLVE's range is [-1, 1)), which keeps
        # RLVE's distinction between a wrong answer and a missing or malformed one.
        reward = min(max(score, -1.0), 0.999)
        return "Incorrect. The answer was: {}".format(self._reference()), reward, True, False, info

    def _reference(self):
        if self._problem is None:
            return ""
        return str(self._problem.parameter.get("reference_answer", ""))

    def solution(self):
        if self.boxed:
            return self._reference()
        start, end = self._problem.answer_markers if self._problem else ("<answer>", "</answer>")
        return "{}{}{}".format(start, self._reference(), end)
