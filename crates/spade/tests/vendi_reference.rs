//! Our Vendi score equals the reference package's (`vendi-score` on PyPI, `vendi.score_K`) to
//! 1e-6 on random positive semi-definite kernels. The package lives in the project's Python
//! venv, which `scripts/setup` installs; a missing venv fails this test (it does not skip),
//! because a silently skipped comparison would prove nothing.

use rand::Rng;
use spade::metrics::vendi::{cosine_kernel, vendi_score};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The venv's python: `$SPADE_CACHE/venv`, else `<workspace>/.deps/venv`, else
/// `~/.cache/spade-studio/venv` (scripts/setup's default).
fn venv_python() -> PathBuf {
    let mut candidates = Vec::new();
    if let Some(cache) = std::env::var_os("SPADE_CACHE") {
        candidates.push(PathBuf::from(cache).join("venv/bin/python3"));
    }
    candidates.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.deps/venv/bin/python3"));
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(PathBuf::from(home).join(".cache/spade-studio/venv/bin/python3"));
    }
    candidates
        .iter()
        .find(|p| p.exists())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "the project's Python venv is missing (looked for {candidates:?}); run scripts/setup, \
                 which installs vendi-score, the reference for this test"
            )
        })
}

const SCRIPT: &str = r#"
import json, sys
import numpy as np
from vendi_score import vendi
kernels = json.load(sys.stdin)
print(json.dumps([float(vendi.score_K(np.array(k, dtype=np.float64))) for k in kernels]))
"#;

fn random_kernels() -> Vec<Vec<Vec<f64>>> {
    let mut rng = spade::seeded_rng(20261130, &[]);
    let mut kernels = Vec::new();
    for case in 0..60 {
        let n = rng.random_range(1..=30);
        // Low dimensions give rank-deficient kernels (zero eigenvalues), high ones near-identity.
        let d = if case % 3 == 0 {
            rng.random_range(1..=3)
        } else {
            rng.random_range(2..=40)
        };
        let rows: Vec<Vec<f64>> = (0..n)
            .map(|_| (0..d).map(|_| rng.random_range(-1.0..1.0)).collect())
            .collect();
        let mut k = cosine_kernel(&rows);
        if case % 5 == 0 && n > 1 {
            // Duplicate items: identical rows and columns.
            k[1] = k[0].clone();
            for row in &mut k {
                row[1] = row[0];
            }
            k[1][1] = 1.0;
        }
        kernels.push(k);
    }
    kernels.push(vec![vec![1.0; 24]; 24]);
    kernels
}

#[test]
fn vendi_equals_the_reference_package() {
    let python = venv_python();
    let kernels = random_kernels();
    let mut child = Command::new(&python)
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", python.display()));
    let input = serde_json::to_vec(&kernels).expect("kernels serialise");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(&input)
        .expect("python reads the kernels");
    let out = child.wait_with_output().expect("python runs");
    assert!(
        out.status.success(),
        "the reference failed (is vendi-score installed? run scripts/setup):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reference: Vec<f64> = serde_json::from_slice(&out.stdout).expect("a JSON list of scores");
    assert_eq!(reference.len(), kernels.len());
    for (i, (k, want)) in kernels.iter().zip(&reference).enumerate() {
        let got = vendi_score(k).unwrap_or_else(|e| panic!("kernel {i} refused: {e}"));
        assert!(
            (got - want).abs() < 1e-6,
            "kernel {i} (n = {}): ours {got}, vendi-score {want}",
            k.len()
        );
    }
}
