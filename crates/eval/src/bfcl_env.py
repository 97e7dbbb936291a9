# One BFCL v4 multi-turn entry as a tool-use environment (crates/eval/src/bfcl.rs puts
# `ENTRY = {...}` above this code). The backends are BFCL's own classes from the installed
# `bfcl-eval` package; the conversation and the verdict follow BFCL's multi-turn rules,
# written here from their specification (bfcl_eval's base_handler and multi_turn_checker):
#
# * a turn is one user message; within it the model takes steps. A step is one reply; its
#   `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` elements are decoded the way the
#   tool-use environments decode one (`arguments` may be omitted, null or a JSON string that
#   encodes an object) and executed in order against the live backend instances. A reply with
#   no tool call, or with one that does not decode, ends the turn (BFCL gives no feedback).
# * more than STEP_LIMIT steps in one turn force-quit the entry: it fails.
# * a miss_func turn has no user message: the held-out functions' documents are shown with
#   BFCL's "I have updated some more functions..." message instead.
# * after the last turn the entry is scored: the model's decoded calls are executed again on
#   fresh instances, and the ground truth's on others, turn by turn. For every turn whose ground
#   truth is not empty, the model must have made a call in that turn, every public attribute of
#   every instance must equal the ground truth's, and the ground truth's execution results of
#   that turn must all occur (as a multiset) among the model's results of all turns so far.
#   Turns with an empty ground truth are not checked (their calls still change the state).

import ast
import copy
import importlib
import inspect
import json
import re

STEP_LIMIT = 20
_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code."
_MODULES = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TwitterAPI": "posting_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}
_STATELESS = {"MathAPI"}
# BFCL refuses calls of these names (they would reach the host in its harness).
_REFUSED = {"kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run"}
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_ADDED_FUNCTIONS = "I have updated some more functions you can choose from. What about now?"


def _instances():
    long_context = "long_context" in ENTRY["id"]
    out = {}
    for name in ENTRY["involved_classes"]:
        cls = getattr(importlib.import_module(_PACKAGE + _MODULES[name]), name)
        inst = cls()
        if name not in _STATELESS:
            config = copy.deepcopy(ENTRY["initial_config"].get(name, {}))
            inst._load_scenario(config, long_context=long_context)
        out[name] = inst
    return out


def _methods(instances):
    # A name two classes share goes to the later class, as BFCL's name mapping does.
    table = {}
    for inst in instances.values():
        for name, method in inspect.getmembers(inst, predicate=inspect.ismethod):
            if not name.startswith("_"):
                table[name] = method
    return table


def _text(result):
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except Exception:
            return str(result)
    return str(result)


def _execute(table, call):
    name, args, kwargs = call
    try:
        if name in _REFUSED:
            raise Exception(f"Function call {name} is not allowed.")
        if name not in table:
            raise NameError(f"name '{name}' is not defined")
        return _text(table[name](*args, **kwargs))
    except Exception as e:
        return f"Error during execution: {e}"


def _execute_string(table, s):
    try:
        call = _parse_string(s)
    except Exception as e:
        return f"Error during execution: {e}"
    return _execute(table, call)


def _show(call):
    name, args, kwargs = call
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def _parse_string(s):
    # Ground-truth calls: `name(literal, key=literal, ...)` (the loader checked every one).
    node = ast.parse(s, mode="eval").body
    return (node.func.id, [ast.literal_eval(a) for a in node.args],
            {k.arg: ast.literal_eval(k.value) for k in node.keywords})


def _decode(reply):
    """The reply's calls in order, or None when it has none or one does not decode."""
    calls = []
    for body in _TOOL_CALL.findall(reply if isinstance(reply, str) else ""):
        try:
            obj = json.loads(body.strip())
        except ValueError:
            return None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
            return None
        args = obj.get("arguments")
        if args is None:
            args = {}
        elif isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return None
        if not isinstance(args, dict):
            return None
        calls.append((obj["name"], [], args))
    return calls or None


def _failure(kind, message):
    return {"valid": False, "error_type": "multi_turn:" + kind, "error_message": message}


def score(decoded):
    """BFCL's multi-turn verdict for the model's decoded calls (turn -> steps -> call strings)."""
    model, truth = _instances(), _instances()
    model_table, truth_table = _methods(model), _methods(truth)
    so_far = []
    for t, truth_calls in enumerate(ENTRY["ground_truth"]):
        steps = decoded[t] if t < len(decoded) else []
        for step in steps:
            so_far.extend(_execute_string(model_table, c) for c in step)
        expected = [_execute_string(truth_table, c) for c in truth_calls]
        if not truth_calls:
            continue
        if not steps:
            return _failure("empty_turn_model_response",
                            f"Model response list is empty for turn {t}")
        for name, want in truth.items():
            got = model[name]
            differ = [a for a in vars(want)
                      if not a.startswith("_") and getattr(got, a) != getattr(want, a)]
            if differ:
                return _failure("instance_state_mismatch",
                                f"turn {t}: {name} differs in {', '.join(differ)}")
        pool = list(so_far)
        missing = []
        for item in expected:
            if item in pool:
                pool.remove(item)
            else:
                missing.append(item)
        if missing:
            return _failure("execution_response_mismatch",
                            f"turn {t}: results missing: {json.dumps(missing)[:500]}")
    return {"valid": True}


class BfclMultiTurnEnv(ToolUseEnv):
    def __init__(self, max_turns=None, **kwargs):
        turns = len(ENTRY["question"])
        # Room for every turn's step limit plus the reply that ends it.
        super().__init__(max_turns=max_turns or min(1000, turns * (STEP_LIMIT + 2)), **kwargs)

    def reset(self, seed=None):
        self.turn, self._ended = 0, False
        self._live = _methods(_instances())
        self._conversation_turn, self._steps = 0, 0
        self._decoded = [[]]
        self._verdict = None
        functions = "\n".join(json.dumps(f) for f in ENTRY["functions"])
        return ("Functions (JSON):\n" + functions + "\n\n" + self._message(0)), self._info()

    def _message(self, t):
        held_out = ENTRY["holdout"].get(str(t))
        if held_out is not None:
            return json.dumps(held_out) + "\n" + _ADDED_FUNCTIONS
        return "\n\n".join(m["content"] for m in ENTRY["question"][t])

    def step(self, action):
        if self._ended:
            return "The episode is over.", 0.0, True, False, self._info()
        self.turn += 1
        calls = _decode(action)
        if calls is None:
            return self._end_turn()
        # Recorded as call strings before they run: a backend may keep (and later change) the
        # argument objects it was given, and the verdict must see the calls as they were made.
        shown = [_show(c) for c in calls]
        self._decoded[self._conversation_turn].append(shown)
        results = [_execute(self._live, c) for c in calls]
        self._steps += 1
        if self._steps > STEP_LIMIT:
            return self._finish(_failure(
                "force_terminated", f"more than {STEP_LIMIT} steps in turn {self._conversation_turn}"))
        obs = "\n".join(f"{c} -> {r}" for c, r in zip(shown, results))
        return self._out("Results:\n" + obs)

    def _end_turn(self):
        self._conversation_turn += 1
        self._steps = 0
        if self._conversation_turn == len(ENTRY["question"]):
            return self._finish(None)
        self._decoded.append([])
        return self._out(self._message(self._conversation_turn))

    def _out(self, obs):
        truncated = self.turn >= self.max_turns
        if truncated:
            self._ended = True
            self._verdict = _failure("force_terminated", "out of steps")
        return obs, 0.0, False, truncated, self._info()

    def _finish(self, failure):
        self._ended = True
        self._verdict = failure or score(self._decoded)
        reward = 1.0 if self._verdict["valid"] else 0.0
        return "The conversation is over.", reward, True, False, self._info()

    def solution(self):
        """The ground truth's calls of this turn in one reply, then the reply that ends it."""
        if self._ended or self._steps > 0:
            return "<answer>done</answer>"
        out = []
        for s in ENTRY["ground_truth"][self._conversation_turn]:
            name, args, kwargs = _parse_string(s)
            method = self._live.get(name)
            if args and method is not None:
                kwargs = dict(inspect.signature(method).bind(*args, **kwargs).arguments)
            out.append("<tool_call>" + json.dumps({"name": name, "arguments": kwargs}) + "</tool_call>")
        return "\n".join(out) or "<answer>done</answer>"

    def criteria(self):
        return [] if self._verdict is None else [self._verdict["valid"]]

    def _info(self):
        info = {"turn": self.turn, "conversation_turn": self._conversation_turn,
                "turns": len(ENTRY["question"])}
        if self._verdict is not None:
            info["verdict"] = self._verdict
            info["decoded"] = self._decoded
        return info
