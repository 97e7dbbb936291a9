"""ToolUseBaseEnv: tool-use environments in the reference implementation's interface.

The reference implementation (``spade-rl/spade``, ``spade/core/envs/tool_use_base_env.py`` and
its multi-turn designer prompt) has its designer subclass a base class that owns the call
protocol; the subclass only writes ``reset``, ``solution`` and one ``tool_<name>`` method per
tool. This file is our implementation of that interface (the paper presets' designer prompt asks
for it); ``ToolUseEnv`` in ``spade_tooluse.py`` is the project's own, stricter contract (every
instruction with a steppable ``next_call``), kept for the compact prompts. The sandbox injects
both classes into every environment's namespace, so an environment subclasses one WITHOUT
importing it::

    class ArchiveEnv(ToolUseBaseEnv):
        def reset(self, seed=None):
            rng = random.Random(seed)
            self._state = {"cwd": "/home", "tree": {...}, "listed": None}
            self._tools = {
                "cd": {"description": "Change directory",
                       "parameters": {"type": "object",
                                      "properties": {"path": {"type": "string"}},
                                      "required": ["path"]}},
                ...
            }
            self._user_messages = ["Go to the reports folder.", "Archive the oldest report.", ...]
            self._message_criteria = [lambda s: s["cwd"] == "/home/reports", ...]
            self._current_msg = 0
            self._expected_answer = "done"
            return self._user_messages[0], {}

        def tool_cd(self, path=""):
            ...                       # read / change self._state, return a string
            return "Changed to " + path

        def solution(self):
            return "cd(path='/home/reports') mv(src='r1.txt', dst='archive') <answer>done</answer>"

Contract
--------
* ``reset(self, seed=None) -> (observation, info)``: draw the task from ``seed`` (seed the
  ``random`` module or a ``random.Random``), set ``self._state`` (the simulated backend),
  ``self._tools`` (``{name: {"description": str, "parameters": JSON schema}}``) and
  ``self._expected_answer``; return the task text and a dict. A multi-turn task also sets
  ``self._user_messages`` (3 to 5 instructions, revealed one at a time),
  ``self._message_criteria`` (one ``state -> bool`` callable per instruction, False at reset),
  ``self._current_msg = 0`` and ``self._expected_answer = "done"``, and returns the first
  instruction.
* ``tool_<name>(self, **arguments) -> str``: one method per entry of ``self._tools``, with
  exactly the schema's parameter names; deterministic (randomness belongs in ``reset``).
* ``solution(self) -> str``: the whole correct solution from the reset state: the tool calls in
  order, each written as a call ``name(arg=value, ...)`` with literal values (or as
  ``<tool_call>{json}</tool_call>``), then the answer (``<answer>...</answer>`` or
  ``ANSWER: ...``). The sandbox's solvability check plays these calls and then
  ``<answer>{_expected_answer}</answer>``, and expects the win.

What the base class does (the reference's behaviour, with the differences named):

* ``step(action)``: the action is the agent's whole reply. An ``<answer>...</answer>`` is checked
  first with ``_check_answer`` (case-insensitive, numbers within 0.01; with ``_user_messages``
  it also needs every instruction complete): right -> "Correct!", reward 1.0, terminated; wrong
  -> reward 0.0, the episode goes on with ``_incorrect_answer_feedback()`` (which names the
  pending instruction). Otherwise every ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
  in the reply runs in order (the reference's step runs the first; its native tool-calling
  loop runs them all), each shown as "Tool result:" and listed in ``info["tool_results"]``.
  No call and no answer, or a call that is not JSON: reward -0.1. An unknown tool or a tool
  that raises is reported as its result. At ``max_turns`` (default 10) the episode is
  truncated with reward 0.0 and the observation shows ``solution()``.
* after each tool call it calls ``self._advance_if_done()`` (the reference's designer writes
  this helper into every tool; ours is in the base class, and a subclass's own override is used
  instead): while the current instruction's criterion holds, the next instruction is revealed.
* ``reset`` is wrapped so that the first observation also lists the tools and the call format
  (for agents without a native tool template) and ``info`` carries ``"task"`` (the subclass's
  observation) and ``"tools"`` (the schemas as JSON texts) for agents with one.
* ``get_tools()`` and ``execute_tool(name, arguments) -> {"output", "returncode"}`` as the
  reference has them; ``criteria()`` evaluates ``_message_criteria`` on ``_state`` (a criterion
  that raises counts as False); stepping after the end returns "The episode is over." with
  nothing changed.
"""

import ast
import inspect
import json
import re

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_ANY_TAG = re.compile(r"<(tool_call|answer)>(.*?)</\1>", re.DOTALL)
_ANSWER_LINE = re.compile(r"\bANSWER\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
FORMAT_ERROR_REWARD = -0.1


def _wrap_reset(own):
    def reset(self, seed=None):
        if getattr(self, "_spade_in_reset", False):
            return own(self, seed)  # a subclass of a subclass: only the outermost call wraps
        self._spade_in_reset = True
        try:
            self.turn_count = 0
            self._call_history = []
            self._current_msg = 0
            self._spade_ended = False
            self._spade_plan = None
            self._spade_pos = 0
            out = own(self, seed)
        finally:
            self._spade_in_reset = False
        if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], str)):
            return out  # the runner names what is wrong with it
        task, info = out
        tools = self.get_tools()
        info = dict(info) if isinstance(info, dict) else {}
        info["task"] = task
        info["tools"] = [json.dumps(t, ensure_ascii=False, default=str) for t in tools]
        listing = "\n".join(info["tools"])
        obs = (task + "\n\nTools (OpenAI function schemas):\n" + listing +
               '\n\nCall a tool with <tool_call>{"name": "TOOL", "arguments": {...}}</tool_call>; '
               "submit with <answer>...</answer>.")
        return obs, info

    reset._spade_wrapped = True
    return reset


class ToolUseBaseEnv:
    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("reset")
        if callable(own) and not getattr(own, "_spade_wrapped", False):
            cls.reset = _wrap_reset(own)

    def __init__(self, max_turns=10, **kwargs):
        self.max_turns = max_turns
        self.turn_count = 0
        self._tools = {}
        self._state = {}
        self._call_history = []
        self._expected_answer = None
        self._spade_ended = False
        self._spade_plan = None
        self._spade_pos = 0
        self.reset()

    # ----- to implement in subclasses -------------------------------------------------------
    def reset(self, seed=None):
        raise NotImplementedError("subclasses set _state, _tools and _expected_answer in reset()")

    def solution(self):
        raise NotImplementedError("subclasses return the tool calls and the answer in solution()")

    # ----- the reference's interface --------------------------------------------------------
    def get_tools(self):
        tools = getattr(self, "_tools", None) or {}
        if isinstance(tools, list):
            return tools
        out = []
        for name, spec in tools.items():
            spec = spec if isinstance(spec, dict) else {}
            out.append({"type": "function", "function": {
                "name": name,
                "description": spec.get("description", ""),
                "parameters": spec.get("parameters", {"type": "object", "properties": {}}),
            }})
        return out

    def execute_tool(self, name, arguments):
        method = getattr(self, "tool_" + str(name), None)
        if method is None or not callable(method):
            return {"output": f"Unknown tool '{name}'", "returncode": 1}
        try:
            result = method(**arguments)
        except Exception as exc:  # a failed call is information for the agent, not a crash
            return {"output": f"Error calling {name}: {exc}", "returncode": 1}
        self._call_history.append({"name": name, "arguments": arguments, "result": str(result)})
        return {"output": str(result) + self._advance_if_done(), "returncode": 0}

    def step(self, action):
        if self._spade_ended:
            return "The episode is over.", 0.0, True, False, self._info()
        self._note_plan_progress(action)
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        text = action if isinstance(action, str) else ""
        answer = _ANSWER.search(text)
        if answer:
            if self._check_answer(answer.group(1).strip()):
                return self._end("Correct!", 1.0, True, False)
            if truncated:
                return self._end("Wrong answer. Solution:\n" + str(self.solution()), 0.0, False, True)
            return self._incorrect_answer_feedback(), 0.0, False, False, self._info()
        bodies = _TOOL_CALL.findall(text)
        if not bodies:
            if truncated:
                return self._end("Time up. Solution:\n" + str(self.solution()), 0.0, False, True)
            return ("Format error: call a tool with <tool_call>{\"name\": ..., \"arguments\": {...}}"
                    "</tool_call>, or submit with <answer>result</answer>.",
                    FORMAT_ERROR_REWARD, False, False, self._info())
        reward, results = 0.0, []
        for body in bodies:
            name, arguments, error = _parse_call(body)
            if error is not None:
                reward = FORMAT_ERROR_REWARD
                results.append("Format error: " + error)
            elif not callable(getattr(self, "tool_" + name, None)):
                results.append(f"Unknown tool '{name}'. Available: " + ", ".join(self._tool_names()))
            else:
                results.append(self.execute_tool(name, arguments)["output"])
        obs = "\n\n".join("Tool result:\n" + r for r in results)
        if truncated:
            obs += "\n\nTime up. Solution:\n" + str(self.solution())
            return self._end(obs, 0.0, False, True, results)
        info = self._info()
        info["tool_results"] = results
        return obs, reward, False, False, info

    def criteria(self):
        crit = getattr(self, "_message_criteria", None)
        if not isinstance(crit, (list, tuple)):
            return []
        out = []
        for c in crit:
            try:
                out.append(bool(c(self._state)))
            except Exception:  # the reference's tools would fail the call; here it is not met
                out.append(False)
        return out

    def close(self):
        pass

    # ----- helpers a subclass may override --------------------------------------------------
    def _advance_if_done(self):
        msgs = getattr(self, "_user_messages", None)
        crit = getattr(self, "_message_criteria", None)
        idx = getattr(self, "_current_msg", 0)
        if not (isinstance(msgs, (list, tuple)) and isinstance(crit, (list, tuple)) and isinstance(idx, int)):
            return ""
        out = ""
        while 0 <= idx < min(len(msgs), len(crit)):
            try:
                met = bool(crit[idx](self._state))
            except Exception:
                met = False
            if not met:
                break
            idx += 1
            self._current_msg = idx
            if idx >= len(msgs):
                out += "\n\nEvery instruction is complete. Reply <answer>done</answer>."
            else:
                out += f"\n\nInstruction {idx} is complete. Instruction {idx + 1} of {len(msgs)}: {msgs[idx]}"
        return out

    def _incorrect_answer_feedback(self):
        msgs = getattr(self, "_user_messages", None)
        idx = getattr(self, "_current_msg", None)
        if isinstance(msgs, (list, tuple)) and isinstance(idx, int) and 0 <= idx < len(msgs):
            return (f"Incorrect: instruction {idx + 1} of {len(msgs)} is not done yet: \"{msgs[idx]}\" "
                    "Use the tools to complete it before answering.")
        return "Incorrect. Keep using tools."

    def _check_answer(self, answer):
        msgs = getattr(self, "_user_messages", None)
        if isinstance(msgs, (list, tuple)) and getattr(self, "_current_msg", 0) < len(msgs):
            return False
        if self._expected_answer is None:
            return False
        a, e = str(answer).strip(), str(self._expected_answer).strip()
        if a.lower() == e.lower():
            return True
        try:
            clean = lambda s: s.replace("$", "").replace(",", "").strip()
            return abs(float(clean(a)) - float(clean(e))) < 0.01
        except (ValueError, TypeError, OverflowError):
            return False

    # ----- internals ------------------------------------------------------------------------
    def _tool_names(self):
        return [t.get("function", {}).get("name", "?") for t in self.get_tools() if isinstance(t, dict)]

    def _end(self, obs, reward, terminated, truncated, results=None):
        self._spade_ended = True
        info = self._info()
        if results is not None:
            info["tool_results"] = results
        return obs, reward, terminated, truncated, info

    def _info(self):
        return {"turn": self.turn_count, "criteria": self.criteria(),
                "current_msg": getattr(self, "_current_msg", 0)}

    # The sandbox's solvability check plays solution()'s calls one a turn: _spade_next_action
    # is what the runner asks for in place of solution() (the reference's solution() is one
    # text for the whole episode), and a step of exactly that action moves on to the next.
    def _spade_next_action(self):
        if self._spade_plan is None:
            self._spade_plan = self._parse_plan(str(self.solution()))
        if self._spade_pos < len(self._spade_plan):
            return self._spade_plan[self._spade_pos]
        return "<answer>" + str(self._expected_answer if self._expected_answer is not None else "done") + "</answer>"

    def _note_plan_progress(self, action):
        plan = self._spade_plan
        if plan is not None and self._spade_pos < len(plan) and action == plan[self._spade_pos]:
            self._spade_pos += 1

    def _parse_plan(self, text):
        names = sorted(self._tool_names(), key=len, reverse=True)
        found = []  # (position, action)
        tagged = []
        for m in _ANY_TAG.finditer(text):
            tagged.append((m.start(), m.end()))
            if m.group(1) == "tool_call":
                name, args, error = _parse_call(m.group(2))
                if error is None:
                    found.append((m.start(), _call_text(name, args)))
        if names:
            pattern = re.compile(r"(?<![\w.])(?:tool_)?(" + "|".join(re.escape(n) for n in names) + r")\s*\(")
            for m in pattern.finditer(text):
                if any(a <= m.start() < b for a, b in tagged):
                    continue
                args = self._literal_call(m.group(1), text, m.end() - 1)
                if args is not None:
                    found.append((m.start(), _call_text(m.group(1), args)))
        found.sort(key=lambda p: p[0])
        plan = [a for _, a in found]
        if self._expected_answer is not None:
            answer = str(self._expected_answer)
        else:
            tag = _ANSWER.findall(text)
            line = _ANSWER_LINE.findall(text)
            answer = tag[-1].strip() if tag else (line[-1].strip() if line else "done")
        plan.append("<answer>" + answer + "</answer>")
        return plan

    def _literal_call(self, name, text, open_paren):
        """The arguments of the call whose '(' is at open_paren, if they are all literals."""
        end = open_paren
        while True:
            end = text.find(")", end + 1)
            if end < 0 or end - open_paren > 2000:
                return None
            try:
                node = ast.parse("f" + text[open_paren:end + 1], mode="eval").body
            except SyntaxError:
                continue
            if not isinstance(node, ast.Call):
                continue
            try:
                args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
                positional = [ast.literal_eval(a) for a in node.args]
            except (ValueError, SyntaxError, TypeError):
                return None
            if positional:
                try:
                    params = [p for p in inspect.signature(getattr(self, "tool_" + name)).parameters]
                except (TypeError, ValueError, AttributeError):
                    return None
                for p, v in zip(params, positional):
                    args.setdefault(p, v)
            return args


def _parse_call(body):
    """(name, arguments, None) for a tool call's JSON body, or (None, None, why not)."""
    try:
        call = json.loads(body)
    except (ValueError, RecursionError):
        return None, None, "the tool call is not valid JSON"
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None, None, 'the tool call must be a JSON object with a string "name"'
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            arguments = {}
    if not isinstance(arguments, dict):
        arguments = {}
    return call["name"], arguments, None


def _call_text(name, arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}, default=str) + "</tool_call>"
