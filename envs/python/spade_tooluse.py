"""ToolUseEnv: the base class for SPADE tool-use environments.

The sandbox injects ``ToolUseEnv`` into the namespace of every generated tool-use environment, so an
environment file subclasses it WITHOUT importing it::

    class ShopOrdersEnv(ToolUseEnv):
        SCENARIO = "You are the assistant of a small online shop."
        TOOLS = [
            {"type": "function", "function": {
                "name": "find_order", "description": "Look up a customer's open order.",
                "parameters": {"type": "object",
                               "properties": {"customer": {"type": "string"}},
                               "required": ["customer"]}}},
            ...
        ]

        def setup(self, rng):
            self._state = {...}                        # built from rng only
            return [                                   # 3 to 5 instructions, revealed in order
                {"text": "Cancel Ana's open order.",
                 "check": lambda: ...,                 # () -> bool, over self._state
                 "next_call": lambda: ("find_order", {"customer": "Ana"})},  # () -> (name, args)
                ...
            ]

        def tool_find_order(self, customer):           # one tool_<name> method per schema
            ...                                        # read / change self._state
            return {...}                               # JSON-serialisable result

Contract
--------
Subclass responsibilities:

* ``TOOLS`` (class attribute, or override ``get_tools()``): a list of OpenAI function-calling
  schemas ``{"type": "function", "function": {"name", "description", "parameters"}}`` where
  ``parameters`` is a JSON schema of ``"type": "object"`` with ``properties`` and ``required``.
  Every schema name ``N`` needs a method ``tool_N(self, **arguments)`` whose parameter names are
  exactly the schema's property names (optional properties need defaults).
* ``SCENARIO`` (optional class attribute): one or two sentences shown at the top of the first
  observation.
* ``setup(self, rng)``: ``rng`` is ``random.Random(seed)``. Build ``self._state`` (a dict) from
  ``rng`` only and return 3 to 5 instructions, each a dict with
  ``"text"`` (what the user asks), ``"check"`` (a no-argument callable returning True when the
  instruction is complete in the current state) and ``"next_call"`` (a no-argument callable
  returning ``(tool_name, arguments_dict)``, the next correct tool call for the current state while
  the instruction is incomplete). Every check must be False right after ``setup``. Checks run after
  every step, in any state (also for instructions not yet revealed), so they must never raise.
* Tool methods read and change ``self._state`` and return a JSON-serialisable value (a string is
  shown as is). A tool signals a failure by raising an exception (``ValueError("...")``); its
  message is returned to the agent as the tool result, at no penalty beyond the turn. Tools must be
  deterministic; if one needs randomness it must use ``self.rng`` (the seeded ``random.Random``).

What the base class does:

* ``reset(seed=None) -> (obs, info)``: calls ``setup(random.Random(seed))``; the observation shows
  the scenario, the tool schemas (JSON, one per line), the action format and instruction 1.
  ``info["tools"]`` holds the schemas as JSON texts and ``info["task"]`` the observation without
  the schemas and the call format: what an agent on a native tool template reads (the template
  states the tools and the call format).
* ``step(action) -> (obs, reward, terminated, truncated, info)``. The action is the agent's whole
  reply. Its ``<tool_call>...</tool_call>`` elements run in order (several calls a turn, as a
  native tool template allows), up to an ``<answer>...</answer>``, which ends the turn; the
  observation is their results, line by line, and ``info["tool_results"]`` holds each call's. A tool call's body is a JSON object ``{"name": str, "arguments": object}``
  (``arguments`` may be omitted or null for no arguments, or be a JSON string encoding an object).
  - no element, unparseable JSON, an unknown tool, missing/unknown arguments, an argument of the
    wrong JSON type or outside its ``enum``, or an answer other than ``done``: format error,
    reward -0.1, not terminated; the observation says what was wrong.
  - a valid tool call: the tool runs, reward 0.0; the observation is ``Tool result (name): ...``.
    After it, while the newest revealed instruction's check is True the next one is revealed
    ("Instruction k of n: ..."); when every check is True the observation says so.
  - ``<answer>done</answer>`` (case and surrounding spaces ignored): terminated; reward 1.0 if
    every check is True now, else 0.0.
  - when the turn count reaches ``max_turns`` (default 25) without termination: truncated=True,
    reward 0.0, and the observation names the next correct action.
  - a call that is malformed gets its format error as its result; the turn's reward is -0.1.
  - stepping after the episode ended changes nothing and returns
    ("The episode is over.", 0.0, True, False, info), as games do.
* ``solution() -> str``: the next correct action for the current state: the ``next_call`` of the
  first instruction whose check is False, as ``<tool_call>{json}</tool_call>``, or
  ``<answer>done</answer>`` when all are complete. Stepping ``solution()`` every turn wins.
* ``criteria() -> list[bool]``: every instruction's check now, in order.
* ``called(tool, **arguments) -> bool``: whether a call of that tool (with those argument
  values, if given) was already executed this episode, successful or not. ``next_call`` functions
  use it to look things up before acting, the way a careful agent would.
* info dicts are JSON-serialisable: ``turn``, ``revealed`` (instructions shown so far),
  ``num_instructions``, ``criteria``, and ``error`` after a format error.

Notes for authors: subclasses normally do not override ``__init__(self, max_turns=25, **kwargs)``
(if one does, it must call ``super().__init__(max_turns=max_turns, **kwargs)``); ``reset`` is
always called before ``step``, ``solution`` or ``criteria``. A lambda made in a loop sees the
loop variable's last value, so build per-instruction closures in a helper function. Keep the
tool list short (the first observation should stay under about 3,000 characters).
"""

import inspect
import json
import random
import re

FORMAT_ERROR_REWARD = -0.1
_ACTION_TAG = re.compile(r"<(tool_call|answer)>(.*?)</\1>", re.DOTALL)
_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
               "array": list, "object": dict, "null": type(None)}


def _format_error(error):
    return "Format error: " + error + ". Use <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>."


def _type_error(spec, value, where):
    """Describe why value does not fit the JSON-schema fragment spec, or return None."""
    types = spec.get("type")
    if types is not None:
        types = types if isinstance(types, list) else [types]
        ok = False
        for t in types:
            py = _JSON_TYPES.get(t)
            if py is None or (isinstance(value, py) and not (isinstance(value, bool) and t in ("integer", "number"))):
                ok = True
        if not ok:
            return f"argument '{where}' must be of type {' or '.join(types)}, got {json.dumps(value)}"
    if "enum" in spec and value not in spec["enum"]:
        return f"argument '{where}' must be one of {json.dumps(spec['enum'])}, got {json.dumps(value)}"
    if isinstance(value, list) and isinstance(spec.get("items"), dict):
        for i, item in enumerate(value):
            err = _type_error(spec["items"], item, f"{where}[{i}]")
            if err:
                return err
    return None


class ToolUseEnv:
    SCENARIO = ""
    TOOLS = []

    def __init__(self, max_turns=25, **kwargs):
        self.max_turns = max_turns
        self.rng = random.Random(0)
        self._state = {}
        self._instructions = []
        self._revealed = 0
        self._calls = []
        self.turn = 0
        self._ended = False

    # ----- to implement in subclasses -------------------------------------------------------
    def setup(self, rng):
        raise NotImplementedError("subclasses build self._state and return 3 to 5 instructions")

    def get_tools(self):
        return self.TOOLS

    # ----- public API -----------------------------------------------------------------------
    def reset(self, seed=None):
        self.rng = random.Random(seed)
        self._state, self._calls, self.turn, self._ended = {}, [], 0, False
        self._instructions = list(self.setup(self.rng))
        self._check_definition()
        self._revealed = 1
        self._reveal_more()
        tools = "\n".join(json.dumps(t) for t in self.get_tools())
        scenario = [self.SCENARIO.strip()] if self.SCENARIO.strip() else []
        parts = scenario + ["Tools (OpenAI function schemas):\n" + tools]
        parts.append('Call one tool per turn: <tool_call>{"name": "TOOL", "arguments": {...}}</tool_call>\n'
                     "When every instruction is complete, reply <answer>done</answer>.")
        parts.append(self._instruction_line(0))
        info = self._info()
        # For a chat template with native tool calling: the schemas as the template prints
        # them (json.dumps, as transformers' tojson), and the task without the schemas and the
        # call format, which the template states.
        info["tools"] = [json.dumps(t, ensure_ascii=False) for t in self.get_tools()]
        info["task"] = "\n\n".join(scenario + ["When every instruction is complete, reply <answer>done</answer>.",
                                                self._instruction_line(0)])
        return "\n\n".join(parts), info

    def step(self, action):
        if self._ended:
            return "The episode is over.", 0.0, True, False, self._info()
        self.turn += 1
        matches = list(_ACTION_TAG.finditer(action if isinstance(action, str) else ""))
        reward, terminated, error = 0.0, False, None
        results, ending = [], None
        if not matches:
            error = "no <tool_call>...</tool_call> or <answer>done</answer> found"
        for m in matches:
            if m.group(1) == "answer":
                if m.group(2).strip().lower() != "done":
                    error = "the only answer is <answer>done</answer>"
                    ending = _format_error(error)
                else:
                    terminated = True
                    reward = 1.0 if all(self.criteria()) else 0.0
                    ending = "All instructions complete. Well done!" if reward > 0 else (
                        "Not every instruction was complete: " +
                        ", ".join(str(i + 1) for i, ok in enumerate(self.criteria()) if not ok) + " unfinished.")
                break  # nothing after the answer counts
            name, args, call_error = self._parse_call(m.group(2))
            if call_error is None:
                results.append(self._run_tool(name, args))
            else:
                error = call_error
                results.append(_format_error(call_error))
        if error is not None:
            reward = FORMAT_ERROR_REWARD if not terminated else reward
        if results or ending is not None:
            obs = "\n".join(results + ([ending] if ending is not None else []))
        else:
            obs = _format_error(error)
        truncated = not terminated and self.turn >= self.max_turns
        if truncated:
            reward = 0.0
            obs += "\n\nOut of turns. The next correct action was: " + self.solution()
        self._ended = terminated or truncated
        info = self._info()
        if error is not None:
            info["error"] = error
        # Each call's result, in order: what a native tool template shows as its tool messages.
        info["tool_results"] = results
        return obs, reward, terminated, truncated, info

    def solution(self):
        for ins in self._instructions:
            if not ins["check"]():
                name, args = ins["next_call"]()
                return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"
        return "<answer>done</answer>"

    def criteria(self):
        return [bool(ins["check"]()) for ins in self._instructions]

    def called(self, tool, /, **arguments):
        return any(n == tool and all(a.get(k) == v for k, v in arguments.items()) for n, a in self._calls)

    def close(self):
        pass

    # ----- internals ------------------------------------------------------------------------
    def _schemas(self):
        return {t["function"]["name"]: t["function"] for t in self.get_tools()}

    def _check_definition(self):
        if not 3 <= len(self._instructions) <= 5:
            raise ValueError(f"need 3 to 5 instructions, got {len(self._instructions)}")
        for ins in self._instructions:
            if not (isinstance(ins.get("text"), str) and callable(ins.get("check")) and callable(ins.get("next_call"))):
                raise ValueError("each instruction needs 'text' (str), 'check' and 'next_call' (callables)")
        for name, fn in self._schemas().items():
            method = getattr(self, "tool_" + name, None)
            if method is None:
                raise ValueError(f"tool '{name}' has no method tool_{name}")
            params = inspect.signature(method).parameters
            props = (fn.get("parameters") or {}).get("properties", {})
            if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
                missing = [p for p in props if p not in params]
                if missing:
                    raise ValueError(f"tool_{name} lacks parameters {missing} declared in its schema")

    def _instruction_line(self, i):
        return f"Instruction {i + 1} of {len(self._instructions)}: {self._instructions[i]['text']}"

    def _reveal_more(self):
        lines = []
        while self._revealed < len(self._instructions) and self._instructions[self._revealed - 1]["check"]():
            lines.append(f"Instruction {self._revealed} is complete.")
            self._revealed += 1
            lines.append(self._instruction_line(self._revealed - 1))
        return lines

    def _parse_call(self, body):
        try:
            call = json.loads(body)
        except (ValueError, RecursionError) as exc:
            return None, None, f"the tool call is not valid JSON ({exc})"
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return None, None, 'the tool call must be a JSON object with a string "name"'
        name, args = call["name"], call.get("arguments")
        if args is None:
            args = {}
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                return None, None, '"arguments" is a string that is not valid JSON'
        if not isinstance(args, dict):
            return None, None, '"arguments" must be a JSON object'
        schemas = self._schemas()
        if name not in schemas:
            return None, None, f"unknown tool '{name}' (available: {', '.join(schemas)})"
        params = schemas[name].get("parameters") or {}
        props = params.get("properties", {})
        for key in params.get("required", []):
            if key not in args:
                return None, None, f"tool '{name}' is missing required argument '{key}'"
        for key, value in args.items():
            if key not in props:
                return None, None, f"tool '{name}' has no argument '{key}' (arguments: {', '.join(props) or 'none'})"
            err = _type_error(props[key], value, key)
            if err:
                return None, None, f"tool '{name}': {err}"
        return name, args, None

    def _run_tool(self, name, args):
        self._calls.append((name, dict(args)))
        try:
            result = getattr(self, "tool_" + name)(**args)
            text = result if isinstance(result, str) else json.dumps(result, default=str)
        except Exception as exc:  # a tool failure is information for the agent, not a crash
            text = f"ERROR: {exc}"
        lines = [f"Tool result ({name}): {text}"] + self._reveal_more()
        if all(self.criteria()):
            lines.append("Every instruction is complete. Reply <answer>done</answer> to finish.")
        return "\n".join(lines)

    def _info(self):
        return {"turn": self.turn, "revealed": self._revealed, "num_instructions": len(self._instructions),
                "criteria": self.criteria()}
