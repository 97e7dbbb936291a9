//! The document corpus that conditions the designer (spec, "One training step", step 2): one
//! document per designer attempt, drawn uniformly with a seed, truncated to a word budget
//! (6,000 words for games, 4,000 for tool use). Documents are what keeps generated
//! environments diverse: without them the paper's designer repeated one maze 41 times.
//!
//! Input is JSON Lines with a `text` or `orig_doc` string field per line (other fields are
//! ignored); blank lines are skipped; any other line is an error naming its line number. The
//! caller reads the file; [`Corpus::bundled`] is the small public-domain corpus compiled in
//! (`corpus/bundled.jsonl`, CC0) so the demo runs offline.

use rand::Rng;

/// The bundled corpus, compiled in.
const BUNDLED: &str = include_str!("../../../corpus/bundled.jsonl");

/// One document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// 1-based line of the JSONL input it came from.
    pub line: usize,
    pub text: String,
}

/// Why a corpus was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CorpusError {
    /// A line is not valid JSON.
    #[error("line {line}: not valid JSON ({message})")]
    Json { line: usize, message: String },
    /// A line is JSON but not an object.
    #[error("line {line}: expected a JSON object, found {found}")]
    NotAnObject { line: usize, found: &'static str },
    /// An object has neither `text` nor `orig_doc`.
    #[error("line {line}: no \"text\" or \"orig_doc\" field (fields: {fields})")]
    MissingText { line: usize, fields: String },
    /// The text field is not a string.
    #[error("line {line}: \"{field}\" must be a string, found {found}")]
    NotAString {
        line: usize,
        field: &'static str,
        found: &'static str,
    },
    /// The text field is empty or only whitespace.
    #[error("line {line}: \"{field}\" is empty")]
    EmptyText { line: usize, field: &'static str },
    /// No documents at all.
    #[error("the corpus has no documents")]
    Empty,
}

/// A parsed corpus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corpus {
    docs: Vec<Document>,
}

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

impl Corpus {
    /// Parses JSON Lines text.
    pub fn from_jsonl(text: &str) -> Result<Self, CorpusError> {
        let mut docs = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            if raw.trim().is_empty() {
                continue;
            }
            let value: serde_json::Value =
                serde_json::from_str(raw).map_err(|e| CorpusError::Json {
                    line,
                    message: e.to_string(),
                })?;
            let serde_json::Value::Object(obj) = &value else {
                return Err(CorpusError::NotAnObject {
                    line,
                    found: json_type(&value),
                });
            };
            let (field, v) = match (obj.get("text"), obj.get("orig_doc")) {
                (Some(v), _) => ("text", v),
                (None, Some(v)) => ("orig_doc", v),
                (None, None) => {
                    let mut fields: Vec<&str> = obj.keys().map(String::as_str).collect();
                    fields.truncate(10);
                    return Err(CorpusError::MissingText {
                        line,
                        fields: if fields.is_empty() {
                            "none".into()
                        } else {
                            fields.join(", ")
                        },
                    });
                }
            };
            let serde_json::Value::String(s) = v else {
                return Err(CorpusError::NotAString {
                    line,
                    field,
                    found: json_type(v),
                });
            };
            if s.trim().is_empty() {
                return Err(CorpusError::EmptyText { line, field });
            }
            docs.push(Document {
                line,
                text: s.clone(),
            });
        }
        if docs.is_empty() {
            return Err(CorpusError::Empty);
        }
        Ok(Self { docs })
    }

    /// The bundled public-domain corpus of math and science exposition.
    pub fn bundled() -> Self {
        // The bundled file is checked by a test; an error here would be a build defect.
        Self::from_jsonl(BUNDLED).unwrap_or_else(|e| Self {
            docs: vec![Document {
                line: 0,
                text: format!("(bundled corpus unreadable: {e})"),
            }],
        })
    }

    pub fn len(&self) -> usize {
        self.docs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    pub fn documents(&self) -> &[Document] {
        &self.docs
    }

    /// A document drawn uniformly by `rng`.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> &Document {
        &self.docs[rng.random_range(0..self.docs.len())]
    }

    /// The document for `(seed, stream...)` (e.g. run seed, step, slot, attempt): uniform and
    /// reproducible without keeping generator state (see [`crate::seeded_rng`]).
    pub fn pick(&self, seed: u64, stream: &[u64]) -> &Document {
        self.sample(&mut crate::seeded_rng(seed, stream))
    }
}

/// The first `max_words` whitespace-separated words of `text`, joined by single spaces where
/// it was cut (the text is returned unchanged when it is short enough).
pub fn truncate_words(text: &str, max_words: usize) -> String {
    let mut words = text.split_whitespace();
    let kept: Vec<&str> = words.by_ref().take(max_words).collect();
    if words.next().is_none() {
        text.to_string()
    } else {
        kept.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_text_or_orig_doc_and_skips_blank_lines() {
        let c = Corpus::from_jsonl(
            "{\"text\": \"a b\"}\n\n{\"orig_doc\": \"c\", \"id\": 3}\n{\"text\": \"t\", \"orig_doc\": \"o\"}\n",
        )
        .expect("valid");
        let texts: Vec<(&str, usize)> = c
            .documents()
            .iter()
            .map(|d| (d.text.as_str(), d.line))
            .collect();
        assert_eq!(texts, [("a b", 1), ("c", 3), ("t", 4)]);
    }

    #[test]
    fn malformed_lines_are_named_precisely() {
        let err = |s: &str| Corpus::from_jsonl(s).expect_err("refused");
        assert!(matches!(
            err("{\"text\": \"ok\"}\n{bad"),
            CorpusError::Json { line: 2, .. }
        ));
        assert_eq!(
            err("[1, 2]").to_string(),
            "line 1: expected a JSON object, found an array"
        );
        assert_eq!(
            err("{\"text\": \"x\"}\n{\"title\": \"t\", \"body\": \"b\"}").to_string(),
            "line 2: no \"text\" or \"orig_doc\" field (fields: body, title)"
        );
        assert_eq!(
            err("{\"orig_doc\": 5}").to_string(),
            "line 1: \"orig_doc\" must be a string, found a number"
        );
        assert!(matches!(
            err("{\"text\": \"  \"}"),
            CorpusError::EmptyText { line: 1, .. }
        ));
        assert_eq!(err("\n\n"), CorpusError::Empty);
    }

    #[test]
    fn truncation_counts_words() {
        assert_eq!(truncate_words("one two  three\nfour", 3), "one two three");
        assert_eq!(
            truncate_words("one two\nthree", 3),
            "one two\nthree",
            "short: unchanged"
        );
        assert_eq!(truncate_words("x", 0), "");
    }

    #[test]
    fn sampling_is_seeded_and_covers_every_document() {
        let c = Corpus::bundled();
        assert!(c.len() >= 30, "bundled corpus has {} documents", c.len());
        assert!(c.documents().iter().all(|d| d.line > 0));
        assert_eq!(c.pick(7, &[1, 2, 3]), c.pick(7, &[1, 2, 3]));
        let mut hits = vec![0usize; c.len()];
        for i in 0..(c.len() as u64 * 200) {
            hits[c.pick(1, &[i]).line - 1] += 1;
        }
        // Uniform: every document is drawn, none more than twice as often as expected.
        assert!(hits.iter().all(|&h| h > 100 && h < 400), "{hits:?}");
    }
}
