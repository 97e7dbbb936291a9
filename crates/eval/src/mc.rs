//! Multiple choice (`mc:PATH.jsonl`), scored as GPQA is: the options are shuffled for every
//! sample, shown with letters, and the model answers with the letter in `\boxed{}`.
//!
//! One JSON object per line:
//! `{"question": "...", "options": ["...", "...", ...], "answer": "B"}` where `options` holds 2
//! to 26 distinct non-empty strings in the file's order and `answer` names the correct one, as
//! its letter in that order (`"A"` is the first) or as its exact text. An optional string `task`
//! groups questions (default: the file's stem). Blank lines are skipped.
//!
//! The order shown to sample `s` of the question on line `l` of task `t` is a Fisher-Yates
//! shuffle driven by SplitMix64 seeded with [`reply_seed`]`(seed, t, l, s)`: the same run seed
//! shows the same orders on any machine, and the order each sample saw is recorded in its
//! result (`detail`, e.g. `order CADB, gold C`).
//!
//! [`reply_seed`]: crate::generate::reply_seed

use crate::error::EvalError;
use crate::jsonl::{self, kind_of};
use std::path::Path;

/// The system prompt for multiple-choice questions.
pub const SYSTEM_PROMPT: &str = "Answer the multiple-choice question. Think it through, then \
give the letter of the one correct option as your final answer in \\boxed{}, e.g. \\boxed{A}.";

/// One question of a multiple-choice file.
#[derive(Debug, Clone, PartialEq)]
pub struct McItem {
    /// 1-based line number in the file.
    pub line: usize,
    pub task: String,
    pub question: String,
    /// In the file's order.
    pub options: Vec<String>,
    /// Index of the correct option in `options`.
    pub answer: usize,
}

/// Options per question at most (one letter each).
pub const MAX_OPTIONS: usize = 26;

/// Reads and checks a multiple-choice file.
pub fn load(path: &Path) -> Result<Vec<McItem>, EvalError> {
    let (text, stem) = jsonl::read(path, "mc")?;
    parse(&text, path, &stem)
}

/// Parses multiple-choice JSONL text; errors name the line and the field.
pub fn parse(text: &str, path: &Path, default_task: &str) -> Result<Vec<McItem>, EvalError> {
    jsonl::parse(text, path, |l| {
        let question = l.question()?;
        let options = options(l)?;
        let answer = match l.obj.get("answer") {
            Some(serde_json::Value::String(s)) => {
                let s = s.trim();
                match letter_index(s).filter(|&i| i < options.len()) {
                    Some(i) => i,
                    None => options.iter().position(|o| o == s).ok_or_else(|| {
                        l.err(format!(
                            "field `answer` must be a letter A-{} or the text of one of the \
                             options, found {s:?}",
                            letter(options.len() - 1)
                        ))
                    })?,
                }
            }
            Some(other) => {
                return Err(l.err(format!(
                    "field `answer` must be a string, found {}",
                    kind_of(other)
                )));
            }
            None => return Err(l.err("missing field `answer`".into())),
        };
        Ok(McItem {
            line: l.line,
            task: l.task(default_task)?,
            question,
            options,
            answer,
        })
    })
}

/// The `options` field: 2 to [`MAX_OPTIONS`] distinct non-empty strings.
fn options(l: &jsonl::Line<'_>) -> Result<Vec<String>, EvalError> {
    let list = match l.obj.get("options") {
        Some(serde_json::Value::Array(a)) => a,
        Some(other) => {
            return Err(l.err(format!(
                "field `options` must be an array of strings, found {}",
                kind_of(other)
            )));
        }
        None => return Err(l.err("missing field `options`".into())),
    };
    let mut options: Vec<String> = vec![];
    for (j, o) in list.iter().enumerate() {
        match o {
            serde_json::Value::String(s) if !s.trim().is_empty() => {
                options.push(s.trim().to_string())
            }
            other => {
                return Err(l.err(format!(
                    "field `options`, item {j}: expected a non-empty string, found {}",
                    if other.is_string() {
                        "an empty string"
                    } else {
                        kind_of(other)
                    }
                )));
            }
        }
    }
    if !(2..=MAX_OPTIONS).contains(&options.len()) {
        return Err(l.err(format!(
            "field `options` has {} options; expected 2 to {MAX_OPTIONS}",
            options.len()
        )));
    }
    for (j, o) in options.iter().enumerate() {
        if let Some(k) = options[..j].iter().position(|p| p == o) {
            return Err(l.err(format!(
                "field `options`: items {k} and {j} are the same text"
            )));
        }
    }
    Ok(options)
}

/// `A` for 0, `B` for 1, ...
pub fn letter(i: usize) -> char {
    char::from(b'A' + (i % MAX_OPTIONS) as u8)
}

/// 0 for `A` (or `a`), ...; None for anything but one letter.
fn letter_index(s: &str) -> Option<usize> {
    let mut chars = s.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if c.is_ascii_alphabetic() => {
            Some(usize::from(c.to_ascii_uppercase() as u8 - b'A'))
        }
        _ => None,
    }
}

/// SplitMix64: a tiny generator whose output is fixed by its seed forever (unlike a crate's,
/// which may change between releases), so recorded orders can be recomputed.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The order in which `n` options are shown: `order[j]` is the file index of the option shown
/// as letter `j`.
pub fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = SplitMix64(seed);
    for i in (1..n).rev() {
        // The modulo bias is below 2^-58 for 26 options.
        let j = (rng.next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

/// The user message for `item` with its options in `order`, and the gold letter.
pub fn render(item: &McItem, order: &[usize]) -> (String, char) {
    let mut text = item.question.trim_end().to_string();
    text.push_str("\n\n");
    let mut gold = 'A';
    for (j, &i) in order.iter().enumerate() {
        text.push_str(&format!("{}) {}\n", letter(j), item.options[i]));
        if i == item.answer {
            gold = letter(j);
        }
    }
    (text, gold)
}

/// The order as letters of the file's order (`CADB`: the first option shown is the file's
/// third), for the record.
pub fn order_code(order: &[usize]) -> String {
    order.iter().map(|&i| letter(i)).collect()
}

/// The letter a boxed answer names: `B`, `(B)`, `B)`, `\text{B}`, `\textbf{B}`, `B. text`;
/// None when it names no single option letter among the first `n`.
pub fn answer_letter(boxed: &str, n: usize) -> Option<char> {
    let mut s = boxed.trim();
    for wrapper in ["\\text{", "\\textbf{", "\\mathrm{", "\\mathbf{"] {
        if let Some(inner) = s.strip_prefix(wrapper).and_then(|r| r.strip_suffix('}')) {
            s = inner.trim();
        }
    }
    let s = s.trim_start_matches('(').trim();
    let mut chars = s.chars();
    let c = chars.next()?.to_ascii_uppercase();
    let rest = chars.as_str().trim_start();
    let ends = rest.is_empty() || rest.starts_with([')', '.', ':', ' ']);
    let i = usize::from(c as u8).checked_sub(usize::from(b'A'))?;
    (c.is_ascii_uppercase() && ends && i < n).then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_err(text: &str) -> String {
        match parse(text, Path::new("gpqa.jsonl"), "gpqa") {
            Ok(items) => panic!("accepted: {items:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn answers_are_letters_or_option_texts() -> Result<(), EvalError> {
        let items = parse(
            "{\"question\": \"q\", \"options\": [\"x\", \"y\", \"z\"], \"answer\": \"b\"}\n\n\
             {\"question\": \"r\", \"options\": [\"4\", \"5\"], \"answer\": \"5\", \"task\": \"t\"}\n",
            Path::new("gpqa.jsonl"),
            "gpqa",
        )?;
        assert_eq!((items[0].answer, items[0].task.as_str()), (1, "gpqa"));
        assert_eq!((items[1].line, items[1].answer), (3, 1));
        assert_eq!(items[1].task, "t");
        Ok(())
    }

    #[test]
    fn malformed_lines_name_the_line_and_the_field() {
        let q = "\"question\": \"q\"";
        assert_eq!(
            parse_err(&format!("{{{q}, \"answer\": \"A\"}}")),
            "gpqa.jsonl:1: missing field `options`"
        );
        assert_eq!(
            parse_err(&format!("{{{q}, \"options\": [\"a\"], \"answer\": \"A\"}}")),
            "gpqa.jsonl:1: field `options` has 1 options; expected 2 to 26"
        );
        assert_eq!(
            parse_err(&format!(
                "{{{q}, \"options\": [\"a\", \"b\", \"a\"], \"answer\": \"A\"}}"
            )),
            "gpqa.jsonl:1: field `options`: items 0 and 2 are the same text"
        );
        assert_eq!(
            parse_err(&format!(
                "{{{q}, \"options\": [\"a\", 3], \"answer\": \"A\"}}"
            )),
            "gpqa.jsonl:1: field `options`, item 1: expected a non-empty string, found a number"
        );
        assert_eq!(
            parse_err(&format!(
                "{{{q}, \"options\": [\"a\", \"b\"], \"answer\": \"C\"}}"
            )),
            "gpqa.jsonl:1: field `answer` must be a letter A-B or the text of one of the \
             options, found \"C\""
        );
        assert_eq!(
            parse_err(&format!(
                "{{{q}, \"options\": [\"a\", \"b\"], \"answer\": 1}}"
            )),
            "gpqa.jsonl:1: field `answer` must be a string, found a number"
        );
        assert!(parse_err("\n").contains("no questions"));
    }

    #[test]
    fn a_seed_fixes_the_order_and_the_gold_letter_follows_the_option() {
        // Recorded once: these orders must never change, or recorded results stop matching.
        assert_eq!(order_code(&shuffled(4, 0)), order_code(&shuffled(4, 0)));
        let orders: Vec<String> = (0..6).map(|s| order_code(&shuffled(4, s))).collect();
        // Checked against an independent SplitMix64 (first output for seed 0: 0xe220a8397b1dcdaf).
        assert_eq!(orders, ["CBAD", "CADB", "ABDC", "CDAB", "ADBC", "ADBC"]);
        let distinct: std::collections::HashSet<String> =
            (0..200).map(|s| order_code(&shuffled(4, s))).collect();
        assert_eq!(distinct.len(), 24, "every order of 4 options turns up");
        let item = McItem {
            line: 1,
            task: "t".into(),
            question: "Which is red?".into(),
            options: vec!["sky".into(), "rose".into(), "grass".into()],
            answer: 1,
        };
        let (text, gold) = render(&item, &[2, 0, 1]);
        assert_eq!(text, "Which is red?\n\nA) grass\nB) sky\nC) rose\n");
        assert_eq!(gold, 'C');
    }

    #[test]
    fn boxed_letters_are_read_in_their_usual_spellings() {
        for (boxed, want) in [
            ("B", Some('B')),
            ("b", Some('B')),
            ("(C)", Some('C')),
            ("C)", Some('C')),
            ("\\text{D}", Some('D')),
            ("\\textbf{(A)}", Some('A')),
            ("A. rose", Some('A')),
            ("E", None),
            ("AB", None),
            ("rose", None),
            ("", None),
        ] {
            assert_eq!(answer_letter(boxed, 4), want, "{boxed:?}");
        }
    }
}
