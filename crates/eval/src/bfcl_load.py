# Reads one BFCL v4 multi-turn category from the installed `bfcl-eval` package and checks it:
# REQUEST = {"category": "base" | "miss_func" | "miss_param" | "long_context"}. REPLY is
# {"entries": [...]} (one object per test entry: what bfcl_env.py needs as ENTRY),
# {"problems": ["FILE:LINE: field: what is wrong", ...]} or {"error": "..."} when the package
# is missing. REQUEST may carry "questions" and "answers" texts to check instead of the
# package's files (they keep the files' names in messages). The held-out functions of miss_func entries are taken out of the function list
# and kept per turn, as BFCL's loader does.
import ast
import importlib.util
import os

_CLASS_DOCS = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
}


def _literal_call(s):
    node = ast.parse(s, mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError("not a call of a plain function name")
    for a in node.args:
        ast.literal_eval(a)
    for k in node.keywords:
        if k.arg is None:
            raise ValueError("** arguments are not supported")
        ast.literal_eval(k.value)


def _lines(path, text=None):
    if text is None:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            yield n, line


def _objects(path, text, problems):
    """(where, value) for every line of the file that is JSON; the others become problems."""
    for n, line in _lines(path, text):
        try:
            yield "%s:%d" % (path, n), n, json.loads(line)
        except ValueError as e:
            problems.append("%s:%d: not JSON (%s)" % (path, n, e))


def _load():
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        return {"error": "no module named bfcl_eval"}
    data = os.path.join(list(spec.submodule_search_locations)[0], "data")
    name = "BFCL_v4_multi_turn_%s.json" % REQUEST["category"]
    qpath, apath = os.path.join(data, name), os.path.join(data, "possible_answer", name)
    texts = {qpath: REQUEST.get("questions"), apath: REQUEST.get("answers")}
    for p in (qpath, apath):
        if texts[p] is None and not os.path.isfile(p):
            return {"error": "%s is missing" % p}
    docs = {}
    for cls, file in _CLASS_DOCS.items():
        path = os.path.join(data, "multi_turn_func_doc", file)
        try:
            docs[cls] = [json.loads(l) for _, l in _lines(path)]
        except (OSError, ValueError) as e:
            return {"problems": ["%s: %s" % (path, e)]}
    problems, answers = [], {}
    for where, _, a in _objects(apath, texts[apath], problems):
        gt = a.get("ground_truth") if isinstance(a, dict) else None
        if not isinstance(gt, list) or not all(
                isinstance(t, list) and all(isinstance(c, str) for c in t) for t in gt):
            problems.append("%s: ground_truth: expected a list of lists of call strings" % where)
            continue
        for t, turn in enumerate(gt):
            for c in turn:
                try:
                    _literal_call(c)
                except (SyntaxError, ValueError) as e:
                    problems.append("%s: ground_truth[%d]: %r: %s" % (where, t, c, e))
        answers[a.get("id")] = gt
    entries = []
    for where, n, e in _objects(qpath, texts[qpath], problems):
        if not isinstance(e, dict) or not isinstance(e.get("id"), str):
            problems.append("%s: id: expected a string" % where)
            continue
        q = e.get("question")
        if not isinstance(q, list) or not all(
                isinstance(t, list) and all(isinstance(m, dict) and isinstance(m.get("content"), str)
                                            for m in t) for t in q):
            problems.append("%s: question: expected a list of turns of {role, content} messages" % where)
            continue
        classes = e.get("involved_classes")
        if not isinstance(classes, list) or not classes or any(c not in docs for c in classes):
            problems.append("%s: involved_classes: expected some of %s, got %r"
                            % (where, ", ".join(docs), classes))
            continue
        config = e.get("initial_config", {})
        if not isinstance(config, dict):
            problems.append("%s: initial_config: expected an object" % where)
            continue
        gt = answers.get(e["id"])
        if gt is None:
            problems.append("%s: id %s has no ground truth in %s" % (where, e["id"], apath))
            continue
        if len(gt) != len(q):
            problems.append("%s: %d turns, but the ground truth has %d" % (where, len(q), len(gt)))
            continue
        functions = [f for c in classes for f in docs[c]]
        holdout = {}
        missed = e.get("missed_function", {})
        if not isinstance(missed, dict):
            problems.append("%s: missed_function: expected an object" % where)
            continue
        for turn, names in missed.items():
            if not (turn.isdigit() and int(turn) < len(q)) or not isinstance(names, list):
                problems.append("%s: missed_function: %r: expected a turn index and a list of names"
                                % (where, turn))
                continue
            if q[int(turn)]:
                problems.append("%s: missed_function: turn %s has a user message" % (where, turn))
            held = []
            for fn in names:
                found = [f for f in functions if f.get("name") == fn]
                if not found:
                    problems.append("%s: missed_function: no function %r" % (where, fn))
                    continue
                functions.remove(found[0])
                held.append(found[0])
            holdout[turn] = held
        for t, turn in enumerate(q):
            if not turn and str(t) not in holdout:
                problems.append("%s: question[%d]: no message" % (where, t))
        entries.append({
            "id": e["id"], "line": n, "question": q, "initial_config": config,
            "involved_classes": classes, "functions": functions, "holdout": holdout,
            "ground_truth": gt,
        })
    if problems:
        return {"problems": problems}
    return {"entries": entries}


REPLY = json.dumps(_load())
