//! Names of the held-out evaluation suites, checked where no evaluator is linked (the run
//! configuration, the service's API): `spade-eval` runs them, and its `Suite::parse` accepts
//! exactly these names.

/// Suites with fixed names: the four reasoning-gym categories at hard settings, all four at
/// once, and the bundled seed environments.
pub const NAMED: &[&str] = &[
    "rg-algorithmic",
    "rg-arithmetic",
    "rg-cognition",
    "rg-logic",
    "rg-hard",
    "envs",
];

/// What a suite name may be, for error messages.
pub const EXPECTED: &str = "rg-algorithmic, rg-arithmetic, rg-cognition, rg-logic, rg-hard, \
                            envs, envs:DIR or qa:PATH.jsonl";

/// Accepts a suite name `spade eval --suite` understands; otherwise says what was expected.
/// Paths (`qa:`, `envs:`) are only checked for being present: they are read where the job runs.
pub fn check(name: &str) -> Result<(), String> {
    if NAMED.contains(&name) {
        return Ok(());
    }
    let path = name
        .strip_prefix("qa:")
        .or_else(|| name.strip_prefix("envs:"));
    match path {
        Some(p) if !p.trim().is_empty() && !p.contains('\0') => Ok(()),
        Some(_) => Err(format!("a path after the prefix ({EXPECTED})")),
        None => Err(EXPECTED.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_prefixed_paths_are_accepted_and_others_explained() {
        for ok in [
            "rg-hard",
            "rg-logic",
            "envs",
            "envs:my/pool",
            "qa:aime.jsonl",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for bad in ["", "rg", "gsm8k", "qa:", "envs: ", "RG-HARD"] {
            let e = check(bad).expect_err(bad);
            assert!(
                e.contains("rg-hard") && e.contains("qa:PATH.jsonl"),
                "{bad}: {e}"
            );
        }
    }
}
