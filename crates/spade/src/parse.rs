//! Reading what the policy wrote: the agent's action (the last `\boxed{...}` for games,
//! the last `<tool_call>{json}</tool_call>` or `<answer>done</answer>` for tool use), the
//! designer's environment code, and the self-judge's verdict.
//!
//! A reply may open with a `<think>...</think>` block (Qwen3's thinking mode); anything inside
//! it is ignored, so an action the model only considered does not count. A reply without a
//! well-formed action is a format error, which costs [`FORMAT_PENALTY`] as that turn's reward
//! (spec, tool-use contract; the same rule is applied to games).

/// Reward of a malformed agent turn (spec, "Environment contract (tool use)": -0.1).
pub const FORMAT_PENALTY: f64 = -0.1;

/// What is wrong with a reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// No `\boxed{...}` with balanced braces.
    #[error("no \\boxed{{...}} answer found (the last \\boxed{{...}} in the reply is the action)")]
    NoBoxed,
    /// The last `\boxed{}` is empty.
    #[error("the \\boxed{{}} answer is empty")]
    EmptyBoxed,
    /// Neither a `<tool_call>` nor an `<answer>` element.
    #[error("no <tool_call>...</tool_call> or <answer>done</answer> found")]
    NoToolAction,
    /// The tool call's body is not the expected JSON.
    #[error("the tool call is not valid: {0}")]
    BadToolCall(String),
    /// An `<answer>` other than `done`.
    #[error("the only answer is <answer>done</answer>, found <answer>{0}</answer>")]
    BadAnswer(String),
    /// No Python code in the designer's reply.
    #[error("no Python code found (expected one class whose name ends in `Env`)")]
    NoCode,
}

/// The reply without any `<think>...</think>` blocks (an unclosed one hides the rest).
pub fn strip_think(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<think>") {
        out.push_str(&rest[..start]);
        match rest[start..].find("</think>") {
            Some(end) => rest = &rest[start + end + "</think>".len()..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

/// Contents of the last `\boxed{...}` whose braces balance (nested braces allowed), or
/// `None`. An unbalanced last one (a reply cut off mid-answer) falls back to the one before.
pub fn last_boxed(text: &str) -> Option<&str> {
    const OPEN: &str = "\\boxed{";
    let mut best = None;
    let mut from = 0;
    while let Some(pos) = text[from..].find(OPEN) {
        let start = from + pos + OPEN.len();
        let mut depth = 1usize;
        for (i, c) in text[start..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        best = Some(&text[start..start + i]);
                        break;
                    }
                }
                _ => {}
            }
        }
        from = start;
    }
    best
}

/// The action to step a game with: `\boxed{X}` for the last boxed X of the reply (the form the
/// environments parse), thinking removed.
pub fn game_action(reply: &str) -> Result<String, FormatError> {
    let visible = strip_think(reply);
    let inner = last_boxed(&visible).ok_or(FormatError::NoBoxed)?;
    if inner.trim().is_empty() {
        return Err(FormatError::EmptyBoxed);
    }
    Ok(format!("\\boxed{{{}}}", inner.trim()))
}

/// A tool-use action.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolAction {
    /// `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
    Call {
        name: String,
        arguments: serde_json::Map<String, serde_json::Value>,
    },
    /// `<answer>done</answer>`
    Done,
}

/// The last `<tool_call>` or `<answer>` element of the reply, parsed the way the
/// `ToolUseEnv` base class (envs/python/spade_tooluse.py) reads it: `arguments` may be
/// missing or null (no arguments) or a JSON string encoding an object. The environment
/// checks names and argument types against its schemas; this only checks the shape.
pub fn tool_action(reply: &str) -> Result<ToolAction, FormatError> {
    let visible = strip_think(reply);
    let (tag, body) = last_element(&visible).ok_or(FormatError::NoToolAction)?;
    if tag == "answer" {
        let answer = body.trim();
        return if answer.eq_ignore_ascii_case("done") {
            Ok(ToolAction::Done)
        } else {
            Err(FormatError::BadAnswer(answer.chars().take(80).collect()))
        };
    }
    let bad = |m: &str| FormatError::BadToolCall(m.to_string());
    let value: serde_json::Value =
        serde_json::from_str(body.trim()).map_err(|e| bad(&format!("not JSON ({e})")))?;
    let serde_json::Value::Object(mut obj) = value else {
        return Err(bad(
            "expected a JSON object {\"name\": ..., \"arguments\": {...}}",
        ));
    };
    let name = match obj.remove("name") {
        Some(serde_json::Value::String(s)) if !s.is_empty() => s,
        _ => return Err(bad("\"name\" must be a non-empty string")),
    };
    let arguments = match obj.remove("arguments") {
        None | Some(serde_json::Value::Null) => serde_json::Map::new(),
        Some(serde_json::Value::Object(m)) => m,
        Some(serde_json::Value::String(s)) => match serde_json::from_str(&s) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => {
                return Err(bad(
                    "\"arguments\" is a string that does not encode an object",
                ));
            }
        },
        Some(_) => return Err(bad("\"arguments\" must be an object")),
    };
    Ok(ToolAction::Call { name, arguments })
}

/// The last `<tool_call>...</tool_call>` or `<answer>...</answer>` element: (tag, body).
fn last_element(text: &str) -> Option<(&'static str, &str)> {
    let mut best: Option<(usize, &'static str, &str)> = None;
    for tag in ["tool_call", "answer"] {
        let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
        let mut from = 0;
        while let Some(pos) = text[from..].find(&open) {
            let start = from + pos + open.len();
            let Some(len) = text[start..].find(&close) else {
                break;
            };
            if best.is_none_or(|(p, _, _)| start > p) {
                best = Some((start, tag, &text[start..start + len]));
            }
            from = start + len + close.len();
        }
    }
    best.map(|(_, tag, body)| (tag, body))
}

/// The environment code in a designer reply: the longest fenced block marked `python` (or
/// unmarked) that defines a class ending in `Env`; without fences, the whole reply from its
/// first `class`/`import`/`from` line if that defines such a class.
pub fn extract_code(reply: &str) -> Result<String, FormatError> {
    let visible = strip_think(reply);
    let defines_env = |code: &str| {
        code.lines().any(|l| {
            let l = l.trim_start();
            l.starts_with("class ")
                && l[6..]
                    .split(['(', ':'])
                    .next()
                    .is_some_and(|n| n.trim().ends_with("Env"))
        })
    };
    let mut blocks = Vec::new();
    let mut rest = visible.as_str();
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        let Some(nl) = after.find('\n') else { break };
        let lang = after[..nl].trim();
        let body = &after[nl + 1..];
        let end = body.find("```").unwrap_or(body.len());
        if lang.is_empty() || lang.eq_ignore_ascii_case("python") || lang == "py" {
            blocks.push(&body[..end]);
        }
        rest = body.get(end + 3..).unwrap_or("");
    }
    if let Some(best) = blocks
        .into_iter()
        .filter(|b| defines_env(b))
        .max_by_key(|b| b.len())
    {
        return Ok(best.trim_end().to_string() + "\n");
    }
    let start = visible
        .lines()
        .scan(0usize, |off, l| {
            let here = *off;
            *off += l.len() + 1;
            Some((here, l))
        })
        .find(|(_, l)| {
            ["class ", "import ", "from "]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .map(|(off, _)| off);
    match start {
        Some(off) if defines_env(&visible[off..]) => {
            Ok(visible[off..].trim_end().to_string() + "\n")
        }
        _ => Err(FormatError::NoCode),
    }
}

/// The self-judge's verdict: `Some(true)` for `\boxed{yes}`, `Some(false)` for `\boxed{no}`,
/// `None` when it answered neither (the reference counts a judge error as accept; the caller
/// decides).
pub fn judge_verdict(reply: &str) -> Option<bool> {
    let visible = strip_think(reply);
    match last_boxed(&visible)?.trim().to_ascii_lowercase().as_str() {
        "yes" => Some(true),
        "no" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
