//! The LLM self-judge (spec, "Validation"): a policy taught to answer `\boxed{no}` to the judge
//! prompt of a seed game rejects it, one taught `\boxed{yes}` accepts it, and a failing play
//! gives no verdict. The judge prompt is built from the game's own solution played in the
//! real sandbox.

use spade_policy::preset::{self, BUILTIN_TEXT};
use spade_policy::sft::{SftConfig, SftTrainer, encode_pairs};
use spade_sandbox::{EnvKind, Pool, PoolConfig, RunnerConfig, ValidationConfig};
use spade_worker::designer::{self, DesignOptions};
use std::time::Duration;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn pool() -> Pool {
    let mut cfg = PoolConfig::new(RunnerConfig::new(spade_sandbox::default_runner_path()));
    cfg.max_runners = 2;
    Pool::new(cfg)
}

fn options() -> DesignOptions {
    DesignOptions {
        attempts: 1,
        temperature: 0.6,
        cut: spade_worker::play::Cut::NONE,
        max_new_tokens: 12,
        repair_fstrings: false,
        validation: ValidationConfig {
            budget: Duration::from_secs(60),
            ..ValidationConfig::default()
        },
        self_judge: true,
        judge_temperature: 0.6,
        judge_cut: spade_worker::play::Cut::NONE,
        judge_max_new_tokens: 12,
        backend: spade_worker::play::Backend::default(),
        prompts: spade::prompt::PromptStyle::Compact,
    }
}

#[test]
fn the_judge_reads_the_code_and_a_played_trajectory_and_its_verdict_decides() -> TestResult {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let code = std::fs::read_to_string(
        root.join("envs/seed/games/mathematical_reasoning/marble_remainders.py"),
    )?;
    let pool = pool();
    let opts = options();
    let prompt = designer::judge_prompt_text(
        &pool,
        &code,
        EnvKind::Game,
        None,
        opts.validation.budget,
        opts.prompts,
    )
    .ok_or("the seed game's solution play failed")?;
    assert!(prompt.contains("class "), "the code is in the prompt");
    for (answer, verdict) in [("\\boxed{no}", Some(false)), ("\\boxed{yes}", Some(true))] {
        let p = preset::tiny(&[BUILTIN_TEXT], 5, |_| {})?;
        let tok = p.require_tokenizer()?;
        let data = encode_pairs(tok, &[(prompt.clone(), answer.to_string())], 4096)?;
        let mut tr = SftTrainer::new(&p, SftConfig::default())?;
        tr.fit(&p, &data, 30, 1, |_, _, _| {})?;
        let got = designer::judge(&p, &pool, &code, EnvKind::Game, None, 1, &opts)?;
        assert_eq!(got, verdict, "taught {answer}");
    }
    // A game whose solution crashes gives no verdict (counted as accept by the caller).
    let broken = code.replacen(
        "def solution(self):",
        "def solution(self):\n        raise RuntimeError('x')",
        1,
    );
    assert_ne!(broken, code, "the fixture still has a solution()");
    let p = preset::tiny(&[BUILTIN_TEXT], 5, |_| {})?;
    assert_eq!(
        designer::judge(&p, &pool, &broken, EnvKind::Game, None, 1, &opts)?,
        None
    );
    Ok(())
}

/// Under the reference's prompts a tool-use program is audited from its code alone (the
/// reference's tool-use environment validator); a game still gets the trajectory of its own
/// solution.
#[test]
fn the_reference_audits_tool_use_code_alone_and_shows_games_a_played_trajectory() -> TestResult {
    let pool = pool();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../envs/seed");
    let tool = std::fs::read_to_string(root.join("tooluse/bank_transfers.py"))?;
    let budget = Duration::from_secs(60);
    let style = spade::prompt::PromptStyle::Reference;
    let audit = designer::judge_prompt_text(&pool, &tool, EnvKind::ToolUse, None, budget, style)
        .ok_or("no prompt")?;
    assert!(audit.contains(spade::prompt::reference::TOOL_AUDIT_SYSTEM));
    assert!(audit.contains(tool.trim_end()));
    assert!(!audit.contains("Initial observation"), "{audit}");
    // The earlier (compact) judge plays the tool-use solution and shows it.
    let compact = spade::prompt::PromptStyle::Compact;
    let played = designer::judge_prompt_text(&pool, &tool, EnvKind::ToolUse, None, budget, compact)
        .ok_or("no prompt")?;
    assert!(played.contains("<tool_call>"), "{played}");
    assert!(!played.contains(spade::prompt::reference::TOOL_AUDIT_SYSTEM));
    Ok(())
}
