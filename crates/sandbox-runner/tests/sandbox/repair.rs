//! The f-string brace repair (`spade_sandbox::repair`, `designer.repair_fstrings`): code the
//! parser refuses for undoubled literal braces is mended and then accepted; code it cannot
//! mend, or that parses already, is left alone.

use super::{pool_with, quick, workspace_root};
use spade_sandbox::repair::fstring_braces;
use spade_sandbox::validate;
use spade_sandbox::validate::Reason;
use std::time::Duration;

fn good() -> String {
    let p = workspace_root().join("crates/sandbox-runner/tests/fixtures/good/guess_number.py");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn an_fstring_with_undoubled_braces_is_repaired_and_then_accepted() {
    let pool = pool_with(1, 0, Duration::from_secs(20));
    // The designer's usual slip: a format example inside an f-string, its braces meant as
    // text. `{your guess}` is no expression, and `\boxed{}` holds an empty one.
    let broken = good().replace(
        "f\"{guess} is too low.\"",
        "f\"{guess} is too low. Reply as \\\\boxed{your guess} or \\\\boxed{}.\"",
    );
    assert_ne!(
        broken,
        good(),
        "the fixture changed: the replacement found nothing"
    );
    let first = validate(&pool, &broken, &quick());
    assert_eq!(
        first.rejection.as_ref().map(|r| r.reason),
        Some(Reason::SyntaxError),
        "{first:#?}"
    );
    let fixed = fstring_braces(&pool, &broken)
        .expect("the repair runs")
        .expect("the repair changes the line");
    // Only the broken braces are doubled; `{guess}` is an expression and stays.
    assert!(
        fixed.contains(
            "f\"{guess} is too low. Reply as \\\\boxed{{your guess}} or \\\\boxed{{}}.\""
        ),
        "{}",
        fixed.lines().find(|l| l.contains("too low")).unwrap_or("")
    );
    assert_eq!(fixed.lines().count(), broken.lines().count());
    let second = validate(&pool, &fixed, &quick());
    assert!(second.accepted, "{second:#?}");
}

#[test]
fn code_that_parses_or_fails_for_another_reason_is_left_alone() {
    let pool = pool_with(1, 0, Duration::from_secs(20));
    assert_eq!(fstring_braces(&pool, &good()).ok(), Some(None));
    // A syntax error without braces on its line: nothing to double.
    let other = good().replace("def reset(self, seed=None):", "def reset(self, seed=None:");
    assert_ne!(other, good());
    assert_eq!(fstring_braces(&pool, &other).ok(), Some(None));
    // Program text that tries to break out of the string it travels in stays data.
    let hostile = "x = 1\nprint(f\"{row col}\")\n\"\"\"\nimport os; os._exit(3)\n\"\"\"";
    let r = fstring_braces(&pool, hostile).expect("the repair runs");
    assert_eq!(
        r.as_deref(),
        Some("x = 1\nprint(f\"{{row col}}\")\n\"\"\"\nimport os; os._exit(3)\n\"\"\"")
    );
}
