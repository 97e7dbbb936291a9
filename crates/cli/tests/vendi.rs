//! `spade vendi --kernel FILE.json`: the score of valid matrices, precise errors (exit 2) for
//! invalid ones.

use std::process::{Command, Output};

fn vendi(kernel_json: &str, extra: &[&str]) -> Output {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("k.json");
    std::fs::write(&path, kernel_json).expect("write the kernel");
    let path = path.to_str().expect("a UTF-8 temp path");
    let mut args = vec!["vendi", "--kernel", path];
    args.extend_from_slice(extra);
    match Command::new(env!("CARGO_BIN_EXE_spade"))
        .args(&args)
        .output()
    {
        Ok(o) => o,
        Err(e) => panic!("cannot run spade: {e}"),
    }
}

#[test]
fn prints_the_score() {
    let out = vendi("[[1, 0, 0], [0, 1, 0], [0, 0, 1]]", &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let score: f64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a number");
    assert!((score - 3.0).abs() < 1e-9);
    let out = vendi("[[1, 1], [1, 1]]", &["--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!((v["vendi"].as_f64().unwrap_or(0.0) - 1.0).abs() < 1e-9);
    assert_eq!(v["n"], 2);
}

#[test]
fn invalid_matrices_exit_2_with_the_reason() {
    for (json, reason) in [
        ("[[1, 0], [0]]", "must be square"),
        ("[[1, 0.2], [0.1, 1]]", "not symmetric"),
        ("[[1, 0], [0, 0.5]]", "K_ii = 1"),
        ("[[1, true], [0, 1]]", "not a finite number"),
        ("not json", "not valid JSON"),
    ] {
        let out = vendi(json, &[]);
        assert_eq!(out.status.code(), Some(2), "{json}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(reason) && err.contains("k.json"),
            "{json}: {err}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_spade"))
        .args(["vendi", "--kernel", "/nonexistent/k.json"])
        .output()
        .expect("spade runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent/k.json"));
}
