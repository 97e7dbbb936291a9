//! The f-string brace repair (`designer.repair_fstrings`): the most common syntax error of
//! generated environments is an f-string whose literal braces are not doubled
//! (`f"Enter {row, col} as {x}"` where `{row, col}` was meant as text, or a JSON example inside
//! an f-string). The reference implementation mends it before validation
//! (`spade/core/utils/parsing.py`, `repair_fstring_braces`); this is the same rule in our own
//! code: while the source does not parse, take the line of the syntax error and double the
//! braces of every `{...}` on it (no nested braces) whose inside does not parse as a Python
//! expression; stop when the line does not change, after 20 rounds, or when the source parses.
//!
//! Parsing needs CPython, and the code is untrusted, so the repair runs in a runner from the
//! pool like every other call on generated code (`ast.parse` of hostile input can be slow or
//! deep; the runner's limits hold it).

use crate::pool::Pool;
use crate::runner::SandboxError;
use std::time::Duration;

/// The repair in Python, as one function of the source text; `REPAIRED` is its result.
const REPAIR_PY: &str = r#"
import ast as _ast
import re as _re


def _spade_repair(code, rounds=20):
    for _ in range(rounds):
        try:
            _ast.parse(code)
            return code
        except SyntaxError as exc:
            if not exc.lineno:
                return code
            lines = code.split("\n")
            at = exc.lineno - 1
            if at >= len(lines):
                return code

            def double(m):
                try:
                    _ast.parse(m.group(1), mode="eval")
                    return m.group(0)
                except SyntaxError:
                    return "{{" + m.group(1) + "}}"

            fixed = _re.sub(r"\{([^{}]*)\}", double, lines[at])
            if fixed == lines[at]:
                return code
            lines[at] = fixed
            code = "\n".join(lines)
    return code


REPAIRED = json.dumps(_spade_repair(SOURCE))
"#;

/// Longest the repair may take (20 parses of one program).
const LIMIT: Duration = Duration::from_secs(10);

/// `code` with its f-string braces repaired, or `None` when the repair changes nothing (the
/// source parses, or its syntax error is of another kind).
pub fn fstring_braces(pool: &Pool, code: &str) -> Result<Option<String>, SandboxError> {
    let mut leased = pool.checkout()?;
    // A JSON string literal is a valid Python string literal with the same value (serde_json
    // escapes only ", \ and control characters, all as Python reads them); encoding it twice
    // keeps the program's own text out of the generated source.
    let literal =
        serde_json::to_string(&serde_json::to_string(code).unwrap_or_default()).unwrap_or_default();
    let source = format!("import json\nSOURCE = json.loads({literal})\n{REPAIR_PY}");
    let text = leased.runner.exec(&source, "REPAIRED", LIMIT)?;
    let repaired: String = serde_json::from_str(&text).map_err(|e| {
        SandboxError::Env(crate::protocol::EnvError {
            kind: crate::protocol::EnvErrorKind::Contract,
            message: format!("the repair did not answer a JSON string: {e}"),
        })
    })?;
    Ok((repaired != code).then_some(repaired))
}
