//! The `spade` binary's help is the map of what it does; users read it first.

use std::process::Command;

fn spade(args: &[&str]) -> std::process::Output {
    match Command::new(env!("CARGO_BIN_EXE_spade"))
        .args(args)
        .output()
    {
        Ok(o) => o,
        Err(e) => panic!("cannot run spade: {e}"),
    }
}

#[test]
fn help_lists_every_subcommand() {
    let out = spade(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for sub in ["env", "model", "worker", "train", "vendi", "eval", "doctor"] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(sub)),
            "`spade --help` lacks `{sub}`:\n{text}"
        );
    }
    let env_help = String::from_utf8_lossy(&spade(&["env", "--help"]).stdout).into_owned();
    assert!(
        env_help.contains("check") && env_help.contains("play"),
        "{env_help}"
    );
}

#[test]
fn usage_errors_exit_with_code_2_and_say_what_is_wrong() {
    let out = spade(&["env", "check"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("<FILE>"), "{err}");
}
