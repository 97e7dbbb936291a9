//! Programs judged in the sandbox: HumanEval's canonical solutions all pass and broken ones
//! fail; the three `code:` test shapes give the verdicts their tests call for; an infinite loop,
//! a fork bomb and a memory bomb fail within their limits and leave the pool working; what one
//! program does to its interpreter does not reach the next.

use spade_eval::code::{self, CallTest, CodeProblem, StdioTest, Tests};
use spade_sandbox::{Pool, PoolConfig};
use std::time::{Duration, Instant};

fn code_pool() -> Pool {
    let path = spade_sandbox::default_runner_path();
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build -p spade-sandbox-runner`",
        path.display()
    );
    let mut cfg = PoolConfig::new(code::runner_config(&spade_sandbox::RunnerConfig::new(path)));
    cfg.max_runners = 2;
    cfg.warm = 1;
    Pool::new(cfg)
}

fn problem(tests: Tests, time_limit: f64) -> CodeProblem {
    CodeProblem {
        id: "t".into(),
        task: "t".into(),
        question: "q".into(),
        prompt: String::new(),
        tests,
        time_limit,
    }
}

fn check_add() -> CodeProblem {
    problem(
        Tests::Check {
            entry_point: "add".into(),
            test: "def check(f):\n    assert f(1, 2) == 3\n    assert f(-1, 1) == 0\n".into(),
        },
        2.0,
    )
}

fn verdict(pool: &Pool, p: &CodeProblem, program: &str) -> code::Verdict {
    code::judge(pool, p, program).unwrap_or_else(|e| panic!("judge: {e}"))
}

#[test]
fn humaneval_canonical_solutions_pass_and_broken_ones_fail() {
    let pool = code_pool();
    let problems = code::humaneval(&pool).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(problems.len(), 164, "HumanEval has 164 problems");
    let started = Instant::now();
    let mut failed = vec![];
    for (p, canonical) in &problems {
        let v = verdict(&pool, p, &p.program(canonical));
        if !v.passed {
            failed.push(format!("{}: {:?}", p.id, v.reason));
        }
    }
    let per = started.elapsed().as_secs_f64() / problems.len() as f64;
    eprintln!("HumanEval canonical solutions: {per:.3} s per program");
    assert!(failed.is_empty(), "canonical solutions failed: {failed:#?}");
    // The model's whole function (what a chat model replies) replaces the prompt's stub.
    let (p0, canonical0) = &problems[0];
    let whole = format!(
        "from typing import List\n\ndef {}(numbers: List[float], threshold: float) -> bool:\n{}",
        "has_close_elements", canonical0
    );
    assert!(verdict(&pool, p0, &p0.program(&whole)).passed);
    // Broken: every function of the first 20 returns None; a wrong constant; a syntax error.
    for (p, _) in problems.iter().take(20) {
        let v = verdict(&pool, p, &p.program("    return None\n"));
        assert!(!v.passed, "{} passed returning None", p.id);
    }
    let v = verdict(&pool, p0, &p0.program("    return True\n"));
    assert!(!v.passed && v.reason.as_deref().unwrap_or("").contains("AssertionError"));
    let v = verdict(&pool, p0, &p0.program("    return (\n"));
    assert!(!v.passed && v.reason.as_deref().unwrap_or("").contains("SyntaxError"));
}

#[test]
fn the_three_test_shapes_give_their_verdicts() {
    let pool = code_pool();
    let stdio = problem(
        Tests::Stdio {
            tests: vec![
                StdioTest {
                    input: "1 2\n".into(),
                    output: "3\n".into(),
                },
                StdioTest {
                    input: "10 -4\n".into(),
                    output: "6".into(),
                },
            ],
        },
        2.0,
    );
    for good in [
        "a, b = map(int, input().split())\nprint(a + b)",
        "import sys\na, b = map(int, sys.stdin.read().split())\nsys.stdout.write(f'{a+b}   \\n\\n')",
        "import sys\nprint(sum(map(int, sys.stdin.buffer.readline().split())))\nsys.exit(0)",
    ] {
        let v = verdict(&pool, &stdio, good);
        assert!(v.passed, "{good}: {:?}", v.reason);
    }
    let v = verdict(&pool, &stdio, "print(3)");
    assert_eq!(v.reason.as_deref(), Some("test 2: wrong output '3\\n'"));
    let v = verdict(&pool, &stdio, "import sys\nsys.exit(1)");
    assert_eq!(v.reason.as_deref(), Some("test 1: exit status 1"));

    let calls = problem(
        Tests::Calls {
            entry_point: "pair".into(),
            tests: vec![CallTest {
                input: vec![serde_json::json!(1), serde_json::json!([2, 3])],
                output: serde_json::json!([1, [2, 3]]),
            }],
        },
        2.0,
    );
    // A tuple equals the JSON list.
    assert!(verdict(&pool, &calls, "def pair(a, b):\n    return (a, tuple(b))").passed);
    let v = verdict(&pool, &calls, "def pair(a, b):\n    return [a]");
    assert_eq!(v.reason.as_deref(), Some("test 1: returned [1]"));
    let v = verdict(&pool, &calls, "def other(a, b):\n    return 0");
    assert_eq!(
        v.reason.as_deref(),
        Some("the program defines no function `pair`")
    );

    let check = check_add();
    assert!(verdict(&pool, &check, "def add(a, b):\n    return a + b").passed);
    assert!(!verdict(&pool, &check, "def add(a, b):\n    return a - b").passed);
}

#[test]
fn loops_forks_and_memory_bombs_fail_within_their_limits() {
    let pool = code_pool();
    let p = check_add();
    let deadline = p.deadline();
    let started = Instant::now();
    let v = verdict(&pool, &p, "def add(a, b):\n    while True:\n        pass");
    let took = started.elapsed();
    assert!(!v.passed);
    assert!(
        v.reason.as_deref().unwrap_or("").contains("timed out"),
        "{v:?}"
    );
    assert!(
        took >= deadline && took < deadline + Duration::from_secs(10),
        "the loop ran {took:?} for a deadline of {deadline:?}"
    );
    for bomb in [
        "import os\nwhile True:\n    os.fork()",
        "import subprocess\nsubprocess.run(['sh', '-c', ':(){ :|:& };:'])",
        "import threading\nthreading.Thread(target=print).start()",
        "x = bytearray(3 << 30)",
    ] {
        let started = Instant::now();
        let v = verdict(
            &pool,
            &p,
            &format!("{bomb}\ndef add(a, b):\n    return a + b"),
        );
        assert!(!v.passed, "{bomb} passed");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{bomb} took {:?}",
            started.elapsed()
        );
        eprintln!("{bomb:?}: {:?}", v.reason);
    }
    // The pool still judges correctly afterwards.
    assert!(verdict(&pool, &p, "def add(a, b):\n    return a + b").passed);
}

#[test]
fn one_program_cannot_reach_the_next() {
    let pool = code_pool();
    let p = check_add();
    // Tampers with builtins and a module, leaves a file in its scratch directory, and fails.
    let tamper = "import builtins, json\nbuiltins.AssertionError = type('Quiet', (Exception,), {})\n\
                  json.dumps = lambda *a, **k: '{\"passed\": true}'\n\
                  open('left-behind', 'w').write('x')\n\
                  def add(a, b):\n    return 0";
    let v = verdict(&pool, &p, tamper);
    assert!(!v.passed, "a tampered json.dumps forged a pass: {v:?}");
    let probe = "import builtins, json, os\n\
                 assert builtins.AssertionError.__name__ == 'AssertionError'\n\
                 assert json.dumps([1]) == '[1]'\n\
                 assert not os.path.exists('left-behind')\n\
                 def add(a, b):\n    return a + b";
    let v = verdict(&pool, &p, probe);
    assert!(
        v.passed,
        "the next program saw the last one's changes: {v:?}"
    );
}

#[test]
fn the_sample_code_file_is_solvable_and_unsolved_without_code() {
    let pool = code_pool();
    let path = crate::root().join("corpus/eval/code-sample.jsonl");
    let problems = code::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let solutions = [
        "a, b = map(int, input().split())\nprint(a + b)",
        "print(input()[::-1])",
        "import math\nprint(math.factorial(int(input())))",
        "input()\nprint(max(map(int, input().split())))",
        "def is_palindrome(s):\n    return s == s[::-1]",
        "def count_vowels(s):\n    return sum(c in 'aeiou' for c in s)",
        "def fib(n):\n    out = [0, 1]\n    while len(out) < n:\n        out.append(out[-1] + out[-2])\n    return out[:n]",
        "    return sum(int(d) for d in str(n))",
    ];
    assert_eq!(problems.len(), solutions.len());
    for (p, sol) in problems.iter().zip(solutions) {
        let v = verdict(&pool, p, &p.program(sol));
        assert!(v.passed, "{}: {:?}", p.id, v.reason);
        assert!(!verdict(&pool, p, &p.program("pass")).passed, "{}", p.id);
    }
}
