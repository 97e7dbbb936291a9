//! Names of the held-out evaluation suites, checked where no evaluator is linked (the run
//! configuration, the service's API): `spade-eval` runs them, and its `Suite::parse` accepts
//! exactly these names.

/// Suites with fixed names: the four reasoning-gym categories at hard settings, all four at
/// once, HumanEval, BFCL v4 multi-turn (each category, or all four), and the bundled seed
/// environments.
pub const NAMED: &[&str] = &[
    "rg-algorithmic",
    "rg-arithmetic",
    "rg-cognition",
    "rg-logic",
    "rg-hard",
    "humaneval",
    "bfcl-multi-turn",
    "bfcl-multi-turn-base",
    "bfcl-multi-turn-miss-func",
    "bfcl-multi-turn-miss-param",
    "bfcl-multi-turn-long-context",
    "envs",
];

/// Prefixes of suites that name a question file (read from the corpus roots on the server).
pub const FILE_PREFIXES: &[&str] = &["qa:", "mc:", "code:"];

/// The prefix of a suite that names an environment directory or pool.
pub const POOL_PREFIX: &str = "envs:";

/// What a suite name may be, for error messages.
pub const EXPECTED: &str = "rg-algorithmic, rg-arithmetic, rg-cognition, rg-logic, rg-hard, \
                            humaneval, bfcl-multi-turn, bfcl-multi-turn-{base,miss-func,\
                            miss-param,long-context}, envs, envs:DIR, qa:PATH.jsonl, \
                            mc:PATH.jsonl or code:PATH.jsonl";

/// Whether `samples` replies per question at `temperature` would be one greedy reply repeated:
/// more than one sample at temperature 0, except in environment suites (`envs`, `envs:DIR`),
/// whose samples are episodes with seeds of their own. The CLI, the evaluation and the API all
/// refuse such a request.
pub fn repeats_greedy_reply(suite: &str, samples: u32, temperature: f64) -> bool {
    let environments = suite == "envs" || suite.starts_with(POOL_PREFIX);
    samples > 1 && temperature == 0.0 && !environments
}

/// Accepts a suite name `spade eval --suite` understands; otherwise says what was expected.
/// Paths (`qa:`, `envs:`) are only checked for being present: they are read where the job runs.
pub fn check(name: &str) -> Result<(), String> {
    if NAMED.contains(&name) {
        return Ok(());
    }
    let path = FILE_PREFIXES
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .or_else(|| name.strip_prefix(POOL_PREFIX));
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
    fn several_greedy_samples_are_refused_except_as_episodes() {
        assert!(repeats_greedy_reply("humaneval", 4, 0.0));
        assert!(repeats_greedy_reply("bfcl-multi-turn", 2, 0.0));
        assert!(!repeats_greedy_reply("humaneval", 4, 0.6));
        assert!(!repeats_greedy_reply("humaneval", 1, 0.0));
        assert!(!repeats_greedy_reply("envs", 4, 0.0));
        assert!(!repeats_greedy_reply("envs:pools/p", 4, 0.0));
        assert!(repeats_greedy_reply("envsx", 4, 0.0));
    }

    #[test]
    fn names_and_prefixed_paths_are_accepted_and_others_explained() {
        for ok in [
            "rg-hard",
            "rg-logic",
            "envs",
            "envs:my/pool",
            "qa:aime.jsonl",
            "mc:gpqa.jsonl",
            "code:lcb.jsonl",
            "humaneval",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for bad in [
            "", "rg", "gsm8k", "qa:", "mc:", "code: ", "envs: ", "RG-HARD",
        ] {
            let e = check(bad).expect_err(bad);
            assert!(
                e.contains("rg-hard") && e.contains("qa:PATH.jsonl"),
                "{bad}: {e}"
            );
        }
    }
}
