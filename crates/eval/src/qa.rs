//! Boxed-answer QA: user-provided question sets (e.g. AIME) as JSONL, one object per line:
//! `{"question": "...", "answer": "..."}` (the answer may also be a number; an optional string
//! `task` groups questions into tasks, default: the file's stem). Blank lines are skipped.
//!
//! The model's last `\boxed{}` is compared with the reference answer by math-verify inside the
//! sandbox: `verify(parse("\boxed{gold}"), parse("\boxed{prediction}"))`. Wrapping both in a box
//! makes math-verify read plain (`1/2`, `0.5`) and LaTeX (`\frac{1}{2}`) forms alike.

use crate::error::EvalError;
use crate::jsonl::{self, kind_of};
use crate::sandbox;
use serde::{Deserialize, Serialize};
use spade_sandbox::Runner;
use std::path::Path;
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
    let (text, stem) = jsonl::read(path, "qa")?;
    parse(&text, path, &stem)
}

/// Parses QA JSONL text; errors name the line and the field.
pub fn parse(text: &str, path: &Path, default_task: &str) -> Result<Vec<QaItem>, EvalError> {
    jsonl::parse(text, path, |l| {
        let question = l.question()?;
        let answer = match l.obj.get("answer") {
            Some(serde_json::Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
            Some(serde_json::Value::String(_)) => {
                return Err(l.err("field `answer` is empty".into()));
            }
            Some(serde_json::Value::Number(n)) => n.to_string(),
            Some(other) => {
                return Err(l.err(format!(
                    "field `answer` must be a string or a number, found {}",
                    kind_of(other)
                )));
            }
            None => return Err(l.err("missing field `answer`".into())),
        };
        Ok(QaItem {
            line: l.line,
            task: l.task(default_task)?,
            question,
            answer,
        })
    })
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
