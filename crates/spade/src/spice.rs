//! SPICE (Self-Play In Corpus Environments, Meta FAIR, arXiv 2510.24684; spec "SPICE"), the pure
//! half: the challenger's task format and its parser, the reasoner's answer check, both roles'
//! rewards and the role-wise DrGRPO advantages. The run kind that drives them (corpus draws,
//! sampling, storage) is `spade_worker`'s `spice` module (`run.algorithm = "spice"`); these are
//! the parts its numbers live in.
//!
//! Task format (what the challenger prompt asks for, [`challenger_prompt`]): a `<question>`,
//! for a multiple-choice task four `<option>`s and the letter of the right one as the
//! `<answer>`, for a free-form task the `<answer>` and its `<answer_type>` (integer, expression
//! or string). The answer must be taken from the document; the reasoner never sees it.

use crate::parse::last_boxed;

/// Answers the reasoner gives per task (SPICE: G = 8).
pub const GROUP_SIZE: usize = 8;
/// Sampling temperature of both roles (SPICE: 1.0).
pub const TEMPERATURE: f64 = 1.0;
/// Tasks per batch (SPICE: B = 128).
pub const BATCH: usize = 128;
/// Attempts per document until a valid task is produced (SPICE: up to N = 1,024).
pub const MAX_ATTEMPTS: u32 = 1024;
/// The challenger's reward for an invalid task (SPICE: rho = -0.1).
pub const INVALID_REWARD: f64 = -0.1;
/// Longest document segment the challenger reads, in tokens (SPICE: 5,992).
pub const MAX_DOCUMENT_TOKENS: usize = 5992;

/// What kind of answer a free-form task has, which decides how answers are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerType {
    Integer,
    Expression,
    String,
}

/// A valid challenger task.
#[derive(Debug, Clone, PartialEq)]
pub enum Task {
    /// Four options A-D and the index (0-3) of the right one.
    MultipleChoice {
        question: String,
        options: [String; 4],
        answer: usize,
    },
    FreeForm {
        question: String,
        answer: String,
        answer_type: AnswerType,
    },
}

impl Task {
    pub fn question(&self) -> &str {
        match self {
            Task::MultipleChoice { question, .. } | Task::FreeForm { question, .. } => question,
        }
    }

    /// The text the reasoner reads: the question, and the options of a multiple-choice task.
    pub fn reasoner_text(&self) -> String {
        match self {
            Task::MultipleChoice {
                question, options, ..
            } => {
                let mut s = question.clone();
                for (l, o) in LETTERS.iter().zip(options) {
                    s.push_str(&format!("\n{l}) {o}"));
                }
                s
            }
            Task::FreeForm { question, .. } => question.clone(),
        }
    }

    /// The reference answer as the reasoner should box it.
    pub fn reference(&self) -> String {
        match self {
            Task::MultipleChoice { answer, .. } => LETTERS[*answer % 4].to_string(),
            Task::FreeForm { answer, .. } => answer.clone(),
        }
    }
}

const LETTERS: [char; 4] = ['A', 'B', 'C', 'D'];

/// Why a challenger reply is not a valid task (it then earns [`INVALID_REWARD`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    #[error("no <{0}> ... </{0}> in the reply")]
    Missing(&'static str),
    #[error("<{0}> is empty")]
    Empty(&'static str),
    #[error("a multiple-choice task needs 4 <option>s, found {0}")]
    Options(usize),
    #[error("the answer of a multiple-choice task must be A, B, C or D, found {0:?}")]
    Letter(String),
    #[error("<answer_type> must be integer, expression or string, found {0:?}")]
    AnswerType(String),
    #[error("the integer answer {0:?} does not parse as an integer")]
    NotInteger(String),
    #[error("the expression answer {0:?} does not evaluate to a number")]
    NotExpression(String),
    #[error("two options are the same: {0:?}")]
    DuplicateOption(String),
}

/// Every `<tag>...</tag>` body in `text`, in order.
fn tagged<'a>(text: &'a str, tag: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = vec![];
    let mut rest = text;
    while let Some(i) = rest.find(&open) {
        let after = &rest[i + open.len()..];
        let Some(j) = after.find(&close) else { break };
        out.push(after[..j].trim());
        rest = &after[j + close.len()..];
    }
    out
}

fn one<'a>(text: &'a str, tag: &'static str) -> Result<&'a str, TaskError> {
    match tagged(text, tag).last() {
        None => Err(TaskError::Missing(tag)),
        Some(&"") => Err(TaskError::Empty(tag)),
        Some(s) => Ok(s),
    }
}

/// Parses a challenger reply (its `<think>` part ignored) into a task.
pub fn parse_task(reply: &str) -> Result<Task, TaskError> {
    let reply = crate::parse::strip_think(reply);
    let question = one(&reply, "question")?.to_string();
    let answer = one(&reply, "answer")?.to_string();
    let options = tagged(&reply, "option");
    if !options.is_empty() {
        let options: Vec<String> = options.iter().map(|s| s.to_string()).collect();
        let arr: [String; 4] = options
            .clone()
            .try_into()
            .map_err(|_| TaskError::Options(options.len()))?;
        if arr.iter().any(String::is_empty) {
            return Err(TaskError::Empty("option"));
        }
        for (i, o) in arr.iter().enumerate() {
            if arr[..i].iter().any(|p| normalize(p) == normalize(o)) {
                return Err(TaskError::DuplicateOption(o.clone()));
            }
        }
        let letter = mcq_letter(&answer).ok_or_else(|| TaskError::Letter(answer.clone()))?;
        return Ok(Task::MultipleChoice {
            question,
            options: arr,
            answer: letter,
        });
    }
    let kind = one(&reply, "answer_type")?.to_ascii_lowercase();
    let answer_type = match kind.as_str() {
        "integer" => AnswerType::Integer,
        "expression" => AnswerType::Expression,
        "string" => AnswerType::String,
        _ => return Err(TaskError::AnswerType(kind)),
    };
    match answer_type {
        AnswerType::Integer if parse_integer(&answer).is_none() => {
            return Err(TaskError::NotInteger(answer));
        }
        AnswerType::Expression if eval(&answer).is_none() => {
            return Err(TaskError::NotExpression(answer));
        }
        _ => {}
    }
    Ok(Task::FreeForm {
        question,
        answer,
        answer_type,
    })
}

/// `A`, `(b)`, `C)`, `Option D` -> 0..=3.
fn mcq_letter(s: &str) -> Option<usize> {
    let t = s
        .trim()
        .trim_start_matches("Option")
        .trim_start_matches("option")
        .trim()
        .trim_matches(|c| c == '(' || c == ')' || c == '.' || c == ' ');
    let mut chars = t.chars();
    let c = chars.next()?.to_ascii_uppercase();
    if chars.next().is_some() {
        return None;
    }
    LETTERS.iter().position(|&l| l == c)
}

fn normalize(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .trim_end_matches('.')
        .to_lowercase()
}

fn parse_integer(s: &str) -> Option<i128> {
    let t: String = s
        .trim()
        .trim_start_matches('$')
        .trim_end_matches('$')
        .chars()
        .filter(|c| *c != ',' && *c != ' ' && *c != '_')
        .collect();
    t.parse().ok()
}

/// Whether the reasoner's reply answers `task`: its last `\boxed{}` compared as the answer type
/// says (SPICE uses math-verify: equivalence for math, exact match otherwise). Integers compare
/// as numbers (`1,024` = `1024`); expressions by value (`1/2` = `0.5` = `\frac{1}{2}`, within
/// 1e-9 relative), falling back to normalised text when either side does not evaluate; strings
/// and options after whitespace and case normalisation.
pub fn is_correct(task: &Task, reply: &str) -> bool {
    let reply = crate::parse::strip_think(reply);
    let Some(given) = last_boxed(&reply) else {
        return false;
    };
    match task {
        Task::MultipleChoice {
            answer, options, ..
        } => {
            mcq_letter(given) == Some(*answer)
                || normalize(given) == normalize(&options[*answer % 4])
        }
        Task::FreeForm {
            answer,
            answer_type,
            ..
        } => match answer_type {
            AnswerType::Integer => match (parse_integer(given), parse_integer(answer)) {
                (Some(a), Some(b)) => a == b,
                _ => false,
            },
            AnswerType::Expression => match (eval(given), eval(answer)) {
                (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * b.abs().max(1.0),
                _ => normalize(given) == normalize(answer),
            },
            AnswerType::String => normalize(given) == normalize(answer),
        },
    }
}

/// The challenger's reward for a valid task from the K reasoner answers' correctness:
/// `exp(-(Var - 0.25)^2 / (2 * 0.01))`, Var the population variance of the 0/1 correctness
/// (p(1-p)), so 1.0 at a 50% pass rate and `exp(-3.125)` when all or none are right.
pub fn challenger_reward(correct: &[bool]) -> f64 {
    if correct.is_empty() {
        return INVALID_REWARD;
    }
    let p = correct.iter().filter(|&&c| c).count() as f64 / correct.len() as f64;
    let var = p * (1.0 - p);
    (-(var - 0.25).powi(2) / (2.0 * 0.01)).exp()
}

/// The reasoner's reward: 1 if correct, else 0.
pub fn reasoner_reward(correct: bool) -> f64 {
    if correct { 1.0 } else { 0.0 }
}

/// DrGRPO advantages within one role's group: `r_i - mean(r)`, no division by the standard
/// deviation.
pub fn drgrpo_advantages(rewards: &[f64]) -> Vec<f64> {
    if rewards.is_empty() {
        return vec![];
    }
    let mean = rewards.iter().sum::<f64>() / rewards.len() as f64;
    rewards.iter().map(|r| r - mean).collect()
}

/// The challenger's role (system prompt).
pub const CHALLENGER_SYSTEM: &str = "You are a challenger. You read a document and write one \
question, with its answer taken from the document, that a strong reasoner who cannot see the \
document finds hard but can answer. Reply in the requested format only.";

/// The reasoner's role (system prompt).
pub const REASONER_SYSTEM: &str = "You are a reasoner. Answer the question: reason step by \
step, then give the final answer in \\boxed{}.";

/// The challenger's instructions for one document (the answer must come from it).
pub fn challenger_prompt(document: &str, multiple_choice: bool) -> String {
    let format = if multiple_choice {
        "<question>...</question>\n<option>...</option> (exactly four, the first is A)\n<answer>the letter of the right option</answer>"
    } else {
        "<question>...</question>\n<answer>...</answer>\n<answer_type>integer, expression or string</answer_type>"
    };
    format!(
        "Read the document and write one challenging question whose answer is stated in or \
         follows from it. Someone who cannot see the document will answer it, so the question \
         must stand on its own. Reply in this format:\n{format}\n\nDocument:\n{document}"
    )
}

/// The reasoner's instructions (no document).
pub fn reasoner_prompt(task: &Task) -> String {
    format!(
        "{}\n\nReason step by step, then put your final answer in \\boxed{{}}.",
        task.reasoner_text()
    )
}

/// The skill a task is stored under (tasks are browsed with the environments).
pub fn skill(task: &Task) -> &'static str {
    skill_of_format(matches!(task, Task::MultipleChoice { .. }))
}

/// The skill of a task asked for in one format (also of a document that got no valid task).
pub fn skill_of_format(multiple_choice: bool) -> &'static str {
    if multiple_choice {
        SKILL_MCQ
    } else {
        SKILL_FREE_FORM
    }
}

/// Skill names of stored SPICE tasks, by format.
pub const SKILL_MCQ: &str = "spice_multiple_choice";
pub const SKILL_FREE_FORM: &str = "spice_free_form";

impl Task {
    /// The task in the challenger's reply format ([`challenger_prompt`]): what
    /// [`parse_task`] reads back as this task.
    pub fn to_reply(&self) -> String {
        match self {
            Task::MultipleChoice {
                question,
                options,
                answer,
            } => {
                let mut s = format!("<question>{question}</question>\n");
                for o in options {
                    s.push_str(&format!("<option>{o}</option>\n"));
                }
                s.push_str(&format!("<answer>{}</answer>", LETTERS[*answer % 4]));
                s
            }
            Task::FreeForm {
                question,
                answer,
                answer_type,
            } => format!(
                "<question>{question}</question>\n<answer>{answer}</answer>\n<answer_type>{}</answer_type>",
                answer_type.as_str()
            ),
        }
    }

    /// How a task is stored and shown (in an environment's code field): the format, the
    /// question with its options, the reference answer, and the document excerpt it came from.
    pub fn describe(&self, excerpt: &str) -> String {
        let format = match self {
            Task::MultipleChoice { .. } => "multiple choice".to_string(),
            Task::FreeForm { answer_type, .. } => format!("free form, {}", answer_type.as_str()),
        };
        format!(
            "# SPICE task ({format})\n\n## Question\n{}\n\n## Answer\n{}\n\n## Document excerpt\n{excerpt}\n",
            self.reasoner_text(),
            self.reference()
        )
    }
}

impl AnswerType {
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerType::Integer => "integer",
            AnswerType::Expression => "expression",
            AnswerType::String => "string",
        }
    }
}

/// A fill-in-the-blank task taken from `document` (a sentence with one of its longer words
/// blanked out; for a multiple-choice task that word and three others of the document as the
/// options, in an order drawn from `seed`): the tiny model's warm start teaches the task
/// format with these, since a model of a few million parameters cannot write one from scratch.
/// None when the document has no usable sentence.
pub fn cloze_task(document: &str, seed: u64, multiple_choice: bool) -> Option<Task> {
    let clean = |w: &str| w.trim_matches(|c: char| !c.is_alphanumeric()).to_string();
    let sentences: Vec<&str> = document
        .split(['.', '!', '?', '\n'])
        .map(str::trim)
        .filter(|s| (6..=40).contains(&s.split_whitespace().count()))
        .collect();
    if sentences.is_empty() {
        return None;
    }
    let pick = |n: usize, salt: u64| {
        (seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt.wrapping_mul(0xbf58_476d_1ce4_e5b9))
            .rotate_left(17) as usize
            % n
    };
    let sentence = sentences[pick(sentences.len(), 1)];
    let words: Vec<&str> = sentence.split_whitespace().collect();
    let candidates: Vec<usize> = (0..words.len())
        .filter(|&i| {
            let w = clean(words[i]);
            w.chars().count() >= 5 && w.chars().all(char::is_alphabetic)
        })
        .collect();
    if candidates.is_empty() {
        return None;
    }
    let at = candidates[pick(candidates.len(), 2)];
    let answer = clean(words[at]);
    let blanked: Vec<String> = words
        .iter()
        .enumerate()
        .map(|(i, w)| {
            if i == at {
                w.replace(answer.as_str(), "____")
            } else {
                (*w).to_string()
            }
        })
        .collect();
    let question = format!("Which word fills the blank? \"{}\"", blanked.join(" "));
    if !multiple_choice {
        return Some(Task::FreeForm {
            question,
            answer,
            answer_type: AnswerType::String,
        });
    }
    let mut others: Vec<String> = vec![];
    let mut all: Vec<String> = document
        .split_whitespace()
        .map(clean)
        .filter(|w| w.chars().count() >= 5 && w.chars().all(char::is_alphabetic))
        .collect();
    all.dedup();
    for k in 0..all.len() {
        let w = &all[(pick(all.len(), 10 + k as u64) + k) % all.len()];
        if normalize(w) != normalize(&answer)
            && !others.iter().any(|o| normalize(o) == normalize(w))
        {
            others.push(w.clone());
        }
        if others.len() == 3 {
            break;
        }
    }
    if others.len() < 3 {
        return None;
    }
    let slot = pick(4, 3);
    let mut options: Vec<String> = others;
    options.insert(slot, answer);
    let options: [String; 4] = options.try_into().ok()?;
    Some(Task::MultipleChoice {
        question,
        options,
        answer: slot,
    })
}

/// Evaluates a small arithmetic expression: numbers, `+ - * / ^`, parentheses, `\frac{a}{b}`,
/// `\sqrt{x}`, `sqrt(x)`, `pi`, `\pi`, `\cdot`, `\times`, surrounding `$`. None when it is
/// anything else (symbols, equations).
pub fn eval(s: &str) -> Option<f64> {
    let t = s
        .trim()
        .trim_matches('$')
        .replace("\\left", "")
        .replace("\\right", "")
        .replace("\\cdot", "*")
        .replace("\\times", "*")
        .replace("\\pi", "pi")
        .replace("\\dfrac", "\\frac")
        .replace(',', "");
    let mut p = Expr {
        s: t.as_bytes(),
        i: 0,
    };
    let v = p.sum()?;
    p.ws();
    (p.i == p.s.len() && v.is_finite()).then_some(v)
}

struct Expr<'a> {
    s: &'a [u8],
    i: usize,
}

impl Expr<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(|c| c.is_ascii_whitespace()) {
            self.i += 1;
        }
    }

    fn eat(&mut self, lit: &str) -> bool {
        self.ws();
        if self.s[self.i..].starts_with(lit.as_bytes()) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }

    fn sum(&mut self) -> Option<f64> {
        let mut v = self.product()?;
        loop {
            if self.eat("+") {
                v += self.product()?;
            } else if self.eat("-") {
                v -= self.product()?;
            } else {
                return Some(v);
            }
        }
    }

    fn product(&mut self) -> Option<f64> {
        let mut v = self.power()?;
        loop {
            if self.eat("*") {
                v *= self.power()?;
            } else if self.eat("/") {
                v /= self.power()?;
            } else {
                return Some(v);
            }
        }
    }

    fn power(&mut self) -> Option<f64> {
        let base = self.unary()?;
        if self.eat("^") {
            // Right-associative; `^{...}` is a group.
            let e = if self.eat("{") {
                let e = self.sum()?;
                self.eat("}").then_some(e)?
            } else {
                self.power()?
            };
            return Some(base.powf(e));
        }
        Some(base)
    }

    fn unary(&mut self) -> Option<f64> {
        if self.eat("-") {
            return Some(-self.unary()?);
        }
        if self.eat("+") {
            return self.unary();
        }
        self.atom()
    }

    fn group(&mut self, open: &str, close: &str) -> Option<f64> {
        if !self.eat(open) {
            return None;
        }
        let v = self.sum()?;
        self.eat(close).then_some(v)
    }

    fn atom(&mut self) -> Option<f64> {
        self.ws();
        if self.eat("\\frac") {
            let a = self.group("{", "}")?;
            let b = self.group("{", "}")?;
            return Some(a / b);
        }
        if self.eat("\\sqrt") || self.eat("sqrt") {
            let x = if self.s.get(self.i) == Some(&b'(') {
                self.group("(", ")")?
            } else {
                self.group("{", "}")?
            };
            return Some(x.sqrt());
        }
        if self.eat("pi") {
            return Some(std::f64::consts::PI);
        }
        if self.s.get(self.i) == Some(&b'(') {
            return self.group("(", ")");
        }
        if self.s.get(self.i) == Some(&b'{') {
            return self.group("{", "}");
        }
        let start = self.i;
        while self
            .s
            .get(self.i)
            .is_some_and(|c| c.is_ascii_digit() || *c == b'.')
        {
            self.i += 1;
        }
        std::str::from_utf8(&self.s[start..self.i])
            .ok()
            .filter(|t| !t.is_empty())?
            .parse()
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_challenger_reward_at_the_worked_points() {
        // 4 of 8 right: Var = 0.25, the maximum 1.0.
        let half = [true, true, true, true, false, false, false, false];
        assert!((challenger_reward(&half) - 1.0).abs() < 1e-12);
        // All right or all wrong: Var = 0, exp(-(0.25)^2 / 0.02) = exp(-3.125).
        let want = (-3.125f64).exp();
        assert!((challenger_reward(&[true; 8]) - want).abs() < 1e-12);
        assert!((challenger_reward(&[false; 8]) - want).abs() < 1e-12);
        // 2 of 8: Var = 0.1875, exp(-(0.0625)^2 / 0.02) = exp(-0.1953125).
        let quarter = [true, true, false, false, false, false, false, false];
        assert!((challenger_reward(&quarter) - (-0.1953125f64).exp()).abs() < 1e-12);
        assert_eq!(challenger_reward(&[]), INVALID_REWARD);
        assert_eq!(INVALID_REWARD, -0.1);
    }

    #[test]
    fn drgrpo_advantages_centre_without_scaling() {
        // Rewards 1, 0, 0, 1, 1: mean 0.6 -> 0.4, -0.6, -0.6, 0.4, 0.4 (no std division).
        let a = drgrpo_advantages(&[1.0, 0.0, 0.0, 1.0, 1.0]);
        for (x, y) in a.iter().zip([0.4, -0.6, -0.6, 0.4, 0.4]) {
            assert!((x - y).abs() < 1e-12, "{a:?}");
        }
        // Challenger group: rewards 1.0, exp(-3.125), -0.1 (invalid).
        let r = [1.0, (-3.125f64).exp(), -0.1];
        let mean = (1.0 + (-3.125f64).exp() - 0.1) / 3.0;
        let a = drgrpo_advantages(&r);
        assert!((a[0] - (1.0 - mean)).abs() < 1e-12);
        assert!((a.iter().sum::<f64>()).abs() < 1e-12);
        assert!(drgrpo_advantages(&[]).is_empty());
    }

    #[test]
    fn tasks_parse_in_both_formats_and_bad_ones_say_why() {
        let mcq = "<think>the doc says 1989</think><question>When did the wall fall?</question>\
                   <option>1961</option><option>1989</option><option>1990</option>\
                   <option>1991</option><answer>(B)</answer>";
        let t = parse_task(mcq).unwrap();
        assert!(matches!(t, Task::MultipleChoice { answer: 1, .. }));
        assert_eq!(t.reference(), "B");
        assert!(
            t.reasoner_text().ends_with("D) 1991"),
            "{}",
            t.reasoner_text()
        );
        let free = "<question>How many moons?</question><answer>1,024</answer>\
                    <answer_type>Integer</answer_type>";
        let t = parse_task(free).unwrap();
        assert!(matches!(
            t,
            Task::FreeForm {
                answer_type: AnswerType::Integer,
                ..
            }
        ));
        for (bad, want) in [
            ("no tags at all", TaskError::Missing("question")),
            ("<question>q</question>", TaskError::Missing("answer")),
            (
                "<question>q</question><option>a</option><option>b</option><answer>A</answer>",
                TaskError::Options(2),
            ),
            (
                "<question>q</question><option>a</option><option>b</option><option>c</option><option>d</option><answer>E</answer>",
                TaskError::Letter("E".into()),
            ),
            (
                "<question>q</question><option>a</option><option>A</option><option>c</option><option>d</option><answer>A</answer>",
                TaskError::DuplicateOption("A".into()),
            ),
            (
                "<question>q</question><answer>x</answer><answer_type>integer</answer_type>",
                TaskError::NotInteger("x".into()),
            ),
            (
                "<question>q</question><answer>x+1</answer><answer_type>expression</answer_type>",
                TaskError::NotExpression("x+1".into()),
            ),
            (
                "<question>q</question><answer>x</answer><answer_type>date</answer_type>",
                TaskError::AnswerType("date".into()),
            ),
            (
                "<question> </question><answer>1</answer>",
                TaskError::Empty("question"),
            ),
        ] {
            assert_eq!(parse_task(bad), Err(want), "{bad}");
        }
    }

    #[test]
    fn answers_are_checked_by_type() {
        let task = |a: &str, t: AnswerType| Task::FreeForm {
            question: "q".into(),
            answer: a.into(),
            answer_type: t,
        };
        let int = task("1024", AnswerType::Integer);
        assert!(is_correct(&int, "so \\boxed{1,024}"));
        assert!(!is_correct(&int, "\\boxed{1025}"));
        assert!(!is_correct(&int, "1024 (no box)"));
        let expr = task("\\frac{1}{2}", AnswerType::Expression);
        for ok in [
            "\\boxed{0.5}",
            "\\boxed{1/2}",
            "\\boxed{\\frac{2}{4}}",
            "\\boxed{2^{-1}}",
        ] {
            assert!(is_correct(&expr, ok), "{ok}");
        }
        assert!(!is_correct(&expr, "\\boxed{0.51}"));
        let root = task("2\\sqrt{2}", AnswerType::Expression);
        assert!(!is_correct(&root, "\\boxed{2}"));
        assert_eq!(eval("2*\\sqrt{2}"), Some(2.0 * 2f64.sqrt()));
        assert_eq!(
            eval("2\\sqrt{2}"),
            None,
            "implicit products are not evaluated"
        );
        assert!(
            is_correct(&root, "\\boxed{2\\sqrt{2}}"),
            "equal text still matches"
        );
        let s = task("Ada Lovelace", AnswerType::String);
        assert!(is_correct(&s, "\\boxed{ada  lovelace}"));
        assert!(!is_correct(&s, "\\boxed{Lovelace}"));
        let mcq = Task::MultipleChoice {
            question: "q".into(),
            options: ["1961".into(), "1989".into(), "1990".into(), "1991".into()],
            answer: 1,
        };
        assert!(is_correct(&mcq, "\\boxed{B}"));
        assert!(is_correct(&mcq, "\\boxed{(b)}"));
        assert!(is_correct(&mcq, "\\boxed{1989}"));
        assert!(!is_correct(&mcq, "\\boxed{C}"));
        // The last box counts, and a <think> part is ignored.
        assert!(is_correct(
            &mcq,
            "<think>\\boxed{B}</think> \\boxed{A} then \\boxed{B}"
        ));
        assert!(!is_correct(&mcq, "<think>\\boxed{B}</think> \\boxed{A}"));
    }

    #[test]
    fn cloze_tasks_of_the_bundled_corpus_read_back_and_their_reference_is_correct() {
        let corpus = crate::corpus::Corpus::bundled();
        let mut made = [0usize; 2];
        for (i, d) in corpus.documents().iter().enumerate() {
            for (f, mcq) in [false, true].into_iter().enumerate() {
                let Some(t) = cloze_task(&d.text, i as u64 * 7 + 1, mcq) else {
                    continue;
                };
                made[f] += 1;
                let back = parse_task(&t.to_reply()).unwrap_or_else(|e| panic!("{e}: {t:?}"));
                assert_eq!(back, t);
                assert_eq!(skill(&t), if mcq { SKILL_MCQ } else { SKILL_FREE_FORM });
                let answer = format!("so \\boxed{{{}}}", t.reference());
                assert!(is_correct(&t, &answer), "{t:?}");
                assert!(!is_correct(&t, "\\boxed{zzzz}"));
                assert!(t.question().contains("____"));
                assert!(
                    t.describe("excerpt")
                        .contains("## Document excerpt\nexcerpt")
                );
            }
        }
        let n = corpus.len();
        assert!(
            made[0] * 10 >= n * 9 && made[1] * 10 >= n * 9,
            "{made:?} of {n}"
        );
        // Reproducible from the seed, and the seed matters.
        let d = &corpus.documents()[0].text;
        assert_eq!(cloze_task(d, 3, true), cloze_task(d, 3, true));
        let differ = (0..20).any(|s| cloze_task(d, s, true) != cloze_task(d, 3, true));
        assert!(differ);
        assert_eq!(cloze_task("too short.", 1, false), None);
    }
}
