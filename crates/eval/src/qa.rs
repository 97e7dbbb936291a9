//! Boxed-answer QA: user-provided question sets (e.g. AIME) as JSONL, one object per line:
//! `{"question": "...", "answer": "..."}` (the answer may also be a number; an optional string
//! `task` groups questions into tasks, default: the file's stem). Blank lines are skipped.
//!
//! The model's last `\boxed{}` is compared with the reference answer by math-verify inside the
//! sandbox: `verify(parse("\boxed{gold}"), parse("\boxed{prediction}"))`. Wrapping both in a box
//! makes math-verify read plain (`1/2`, `0.5`) and LaTeX (`\frac{1}{2}`) forms alike.

use crate::error::EvalError;
use crate::sandbox;
use serde::{Deserialize, Serialize};
use spade_sandbox::Runner;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One question of a QA file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QaItem {
    /// 1-based line number in the file.
    pub line: usize,
    pub task: String,
    pub question: String,
    pub answer: String,
}

/// Reads and checks a QA file.
pub fn load(path: &Path) -> Result<Vec<QaItem>, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|e| EvalError::io(path, e))?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("qa")
        .to_string();
    parse(&text, path, &stem)
}

/// Parses QA JSONL text; errors name the line and the field.
pub fn parse(text: &str, path: &Path, default_task: &str) -> Result<Vec<QaItem>, EvalError> {
    let err = |line: usize, reason: String| EvalError::MalformedLine {
        path: PathBuf::from(path),
        line,
        reason,
    };
    let mut items = vec![];
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(raw)
            .map_err(|e| err(line, format!("not JSON: {e} (column {})", e.column())))?;
        let obj = v.as_object().ok_or_else(|| {
            err(
                line,
                format!("expected a JSON object, found {}", kind_of(&v)),
            )
        })?;
        let question = match obj.get("question") {
            Some(serde_json::Value::String(s)) if !s.trim().is_empty() => s.clone(),
            Some(serde_json::Value::String(_)) => {
                return Err(err(line, "field `question` is empty".into()));
            }
            Some(other) => {
                return Err(err(
                    line,
                    format!(
                        "field `question` must be a string, found {}",
                        kind_of(other)
                    ),
                ));
            }
            None => return Err(err(line, "missing field `question`".into())),
        };
        let answer = match obj.get("answer") {
            Some(serde_json::Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
            Some(serde_json::Value::String(_)) => {
                return Err(err(line, "field `answer` is empty".into()));
            }
            Some(serde_json::Value::Number(n)) => n.to_string(),
            Some(other) => {
                return Err(err(
                    line,
                    format!(
                        "field `answer` must be a string or a number, found {}",
                        kind_of(other)
                    ),
                ));
            }
            None => return Err(err(line, "missing field `answer`".into())),
        };
        let task = match obj.get("task") {
            None | Some(serde_json::Value::Null) => default_task.to_string(),
            Some(serde_json::Value::String(s)) if !s.trim().is_empty() => s.clone(),
            Some(other) => {
                return Err(err(
                    line,
                    format!(
                        "field `task` must be a non-empty string, found {}",
                        kind_of(other)
                    ),
                ));
            }
        };
        items.push(QaItem {
            line,
            task,
            question,
            answer,
        });
    }
    if items.is_empty() {
        return Err(EvalError::EmptyQa {
            path: PathBuf::from(path),
        });
    }
    Ok(items)
}

pub(crate) fn kind_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

const VERIFY: &str = r#"
from math_verify import parse as _parse, verify as _verify
_out = []
for _gold, _pred in REQUEST:
    if _pred is None:
        _out.append({"score": 0.0, "error": None})
        continue
    try:
        _ok = _verify(_parse("\\boxed{" + _gold + "}"), _parse("\\boxed{" + _pred + "}"))
        _out.append({"score": 1.0 if _ok else 0.0, "error": None})
    except Exception as _e:
        _out.append({"score": 0.0, "error": f"{type(_e).__name__}: {_e}"[:500]})
REPLY = json.dumps(_out)
"#;

/// Compares `(gold, prediction)` pairs with math-verify in `runner`: 1.0 when equivalent, 0.0
/// otherwise (and for a missing prediction).
pub fn verify(
    runner: &mut Runner,
    pairs: &[(String, Option<String>)],
) -> Result<Vec<crate::rg::Scored>, EvalError> {
    // The first call imports math-verify and sympy (seconds); each comparison is bounded by
    // math-verify's own timeouts.
    let limit = Duration::from_secs(120 + 10 * pairs.len() as u64);
    let out: Vec<crate::rg::Scored> = sandbox::call(runner, "math-verify", VERIFY, &pairs, limit)?;
    if out.len() != pairs.len() {
        return Err(EvalError::BadReply {
            what: "math-verify".into(),
            reason: format!("{} results for {} pairs", out.len(), pairs.len()),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_err(text: &str) -> String {
        match parse(text, Path::new("set.jsonl"), "set") {
            Ok(items) => panic!("accepted: {items:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn good_lines_parse_with_numbers_tasks_and_blank_lines() -> Result<(), EvalError> {
        let items = parse(
            "{\"question\": \"1+1?\", \"answer\": \"2\"}\n\n{\"question\": \"q\", \"answer\": 0.5, \"task\": \"aime\"}\n",
            Path::new("set.jsonl"),
            "set",
        )?;
        assert_eq!(items.len(), 2);
        assert_eq!((items[0].line, items[0].task.as_str()), (1, "set"));
        assert_eq!((items[1].line, items[1].answer.as_str()), (3, "0.5"));
        assert_eq!(items[1].task, "aime");
        Ok(())
    }

    #[test]
    fn malformed_lines_are_named_by_line_and_field() {
        let ok = "{\"question\": \"a\", \"answer\": \"1\"}\n";
        assert_eq!(
            parse_err(&format!("{ok}{{\"question\": \"b\"}}")),
            "set.jsonl:2: missing field `answer`"
        );
        assert!(parse_err(&format!("{ok}{ok}not json")).starts_with("set.jsonl:3: not JSON"));
        assert_eq!(
            parse_err("[1, 2]"),
            "set.jsonl:1: expected a JSON object, found an array"
        );
        assert_eq!(
            parse_err("{\"question\": 3, \"answer\": \"1\"}"),
            "set.jsonl:1: field `question` must be a string, found a number"
        );
        assert_eq!(
            parse_err("{\"question\": \"q\", \"answer\": [1]}"),
            "set.jsonl:1: field `answer` must be a string or a number, found an array"
        );
        assert_eq!(
            parse_err("{\"question\": \"q\", \"answer\": \" \"}"),
            "set.jsonl:1: field `answer` is empty"
        );
        assert!(parse_err("\n\n").contains("no questions"));
    }
}
