//! The suites' JSONL files (`qa:`, `mc:`, `code:`): one JSON object per line, blank lines
//! skipped, and every error naming the file, the line and the field.

use crate::error::EvalError;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// A file's text and its stem (the default task of its lines; `fallback` without one).
pub(crate) fn read(path: &Path, fallback: &str) -> Result<(String, String), EvalError> {
    let text = std::fs::read_to_string(path).map_err(|e| EvalError::io(path, e))?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or(fallback)
        .to_string();
    Ok((text, stem))
}

/// One object of a file.
pub(crate) struct Line<'a> {
    path: &'a Path,
    /// 1-based.
    pub line: usize,
    pub obj: &'a Map<String, Value>,
}

impl Line<'_> {
    /// An error at this line.
    pub fn err(&self, reason: String) -> EvalError {
        EvalError::MalformedLine {
            path: PathBuf::from(self.path),
            line: self.line,
            reason,
        }
    }

    /// A non-empty string field; None when absent (or null) and not `required`.
    pub fn string(&self, field: &str, required: bool) -> Result<Option<String>, EvalError> {
        match self.obj.get(field) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
            Some(Value::String(_)) => Err(self.err(format!("field `{field}` is empty"))),
            None | Some(Value::Null) if !required => Ok(None),
            None => Err(self.err(format!("missing field `{field}`"))),
            Some(other) => Err(self.err(format!(
                "field `{field}` must be a string, found {}",
                kind_of(other)
            ))),
        }
    }

    /// The required `question`.
    pub fn question(&self) -> Result<String, EvalError> {
        Ok(self.string("question", true)?.unwrap_or_default())
    }

    /// The optional `task`, `default` without one.
    pub fn task(&self, default: &str) -> Result<String, EvalError> {
        Ok(self
            .string("task", false)?
            .unwrap_or_else(|| default.to_string()))
    }
}

/// `f` applied to every object of `text`; a line that is not a JSON object, or that `f`
/// refuses, fails the whole file (a partial suite would score something else than asked). A
/// file without objects is refused too.
pub(crate) fn parse<T>(
    text: &str,
    path: &Path,
    mut f: impl FnMut(&Line<'_>) -> Result<T, EvalError>,
) -> Result<Vec<T>, EvalError> {
    let mut out = vec![];
    for (i, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let err = |reason: String| EvalError::MalformedLine {
            path: PathBuf::from(path),
            line: i + 1,
            reason,
        };
        let v: Value = serde_json::from_str(raw)
            .map_err(|e| err(format!("not JSON: {e} (column {})", e.column())))?;
        let obj = v
            .as_object()
            .ok_or_else(|| err(format!("expected a JSON object, found {}", kind_of(&v))))?;
        out.push(f(&Line {
            path,
            line: i + 1,
            obj,
        })?);
    }
    if out.is_empty() {
        return Err(EvalError::EmptyQa {
            path: PathBuf::from(path),
        });
    }
    Ok(out)
}

/// What a JSON value is, for messages.
pub(crate) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
