//! Learning regression on a real pretrained model (issue 37): SmolLM2-135M-Instruct (the
//! `smollm2-135m` preset, imported from the GGUF scripts/setup installs), trained by the
//! fixed-environment GRPO baseline through the real loop (`run::run`, the sandbox, the engine,
//! the trainer) on a pool of four one-turn questions of our own. Nothing is taught first: the
//! instruction-tuned model answers them as it is.
//!
//! The questions ask it to rewrite a sentence with the right number in a box ("The larger of
//! 18 and 11 is \boxed{}."): the action format of every game (the last `\boxed{}`), which this
//! small model rarely writes on its own (measured with transformers: about half its replies
//! box anything, about one in sixteen box the right number). GRPO must raise the no-hint win rate by at least 0.2 within the test; the
//! negative control runs the same code with a learning rate of 1e-12 (the configuration
//! requires lr > 0) and must not rise.
//!
//! Measured on an Intel Xeon (AVX-512), both arms side by side on its 2 cores while another
//! test suite ran: default kernels, 10 steps: GRPO 0.03 -> 0.34 -> 0.81 -> 0.94 ... 1.00,
//! control 0.03-0.12 (770 s); `ATEN_CPU_CAPABILITY=avx2`, 6 steps: GRPO 0.03 -> 0.34 -> 0.59
//! -> 0.88 -> 0.97 -> 1.00, control 0.03-0.09 (460 s). What GRPO teaches is the format and the
//! choice: "The larger of 52 and 47 is \boxed{52}." instead of "... is 21." or an empty box.

use crate::learning::{Res, mean, side_by_side, win_rates, write};
use spade::config::RunConfig;
use std::path::Path;

/// (class-name stem, sentence with an empty box, answer). The answer is always the first
/// number of the sentence, which the model copies into the box more often than the second.
const QUESTIONS: [(&str, &str, i64); 4] = [
    ("Larger52", "The larger of 52 and 47 is \\\\boxed{}.", 52),
    ("Smaller11", "The smaller of 11 and 18 is \\\\boxed{}.", 11),
    ("Larger18", "The larger of 18 and 11 is \\\\boxed{}.", 18),
    ("Smaller47", "The smaller of 47 and 52 is \\\\boxed{}.", 47),
];

fn question_game(stem: &str, sentence: &str, answer: i64) -> String {
    format!(
        r#""""Skill: Mathematical Reasoning. Mechanic: single-answer (1 try). Compare two numbers."""


def last_boxed(text):
    end = len(text)
    while (start := text.rfind("\\boxed{{", 0, end)) >= 0:
        close = text.find("}}", start)
        if close >= 0:
            return text[start + 7:close].strip()
        end = start
    return None


class {stem}Env:
    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = 1

    def reset(self, seed=None):
        self.turn, self.over = 0, False
        return ("Write this sentence with the right number in the box: {sentence}"), {{"turn": 0}}

    def step(self, action):
        if self.over:
            return "The episode is over.", 0.0, True, False, {{"turn": self.turn}}
        self.turn, self.over = 1, True
        if last_boxed(action) == "{answer}":
            return "Correct.", 1.0, True, False, {{"turn": 1}}
        return "Wrong. The answer was {answer}.", 0.0, True, False, {{"turn": 1}}

    def solution(self):
        return "\\boxed{{{answer}}}"

    def close(self):
        pass
"#
    )
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn config(pool: &Path, seed: u64, lr: f64, steps: u64) -> RunConfig {
    let mut cfg = RunConfig::tiny_cpu_demo();
    cfg.run.steps = steps;
    cfg.run.seed = seed;
    cfg.run.checkpoint_every = steps;
    cfg.model.preset = "smollm2-135m".into();
    cfg.model.path = None;
    // The pretrained weights as they are: the test measures what GRPO adds to them.
    cfg.model.warm_start = spade::config::WarmStartData::None;
    cfg.model.agent_max_new_tokens = env_or("SMOL_MAX_NEW_TOKENS", 32);
    cfg.ablation.fixed_env_pool = Some(pool.display().to_string());
    // 4 sentences x 8 plays: groups large enough that z-scored advantages carry signal.
    cfg.agent.global_batch = 32;
    cfg.grpo.lr = lr;
    cfg.eval.every_steps = 0;
    cfg.eval.base_model = false;
    let issues = cfg.validate();
    assert!(issues.is_empty(), "{issues:?}");
    cfg
}

#[test]
fn grpo_raises_smollm2_no_hint_win_rate_and_a_zero_update_does_not() -> Res<()> {
    spade_policy::embed::set_threads(1);
    let dir = tempfile::tempdir()?;
    let pool = dir.path().join("pool");
    for (stem, q, a) in QUESTIONS {
        write(
            &pool,
            &format!("{}.py", stem.to_lowercase()),
            &question_game(stem, q, a),
        )?;
    }
    let steps: u64 = env_or("SMOL_STEPS", 6);
    let lr: f64 = env_or("SMOL_LR", 2e-5);
    let runs: Vec<(String, RunConfig)> = vec![
        (format!("grpo lr {lr:e}"), config(&pool, 1, lr, steps)),
        ("control lr 1e-12".into(), config(&pool, 1, 1e-12, steps)),
    ];
    // The two runs are independent: side by side, one torch thread each.
    let results = side_by_side(&runs, win_rates);
    let (grpo, control) = match results.as_slice() {
        [Ok(g), Ok(c)] => (g.clone(), c.clone()),
        _ => {
            let errors: Vec<String> = results
                .iter()
                .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
                .collect();
            return Err(errors.join("; ").into());
        }
    };
    // The frozen model's win rate: every step of the control (which does not learn) and the
    // GRPO run's first step (played before its first update).
    let frozen: Vec<f64> = control.iter().chain(&grpo[..1]).copied().collect();
    let base = mean(&frozen);
    let tail = |r: &[f64]| mean(&r[r.len().saturating_sub(3)..]);
    let (grpo_end, control_end) = (tail(&grpo), tail(&control));
    eprintln!(
        "smollm2 learning: base {base:.3}, GRPO end {grpo_end:.3} ({grpo:.2?}), control end \
         {control_end:.3} ({control:.2?})"
    );
    // Measured: 0.074 over 288 plays (and 4 of 64 with transformers), inside the issue's band
    // of 0.05..0.6 but not by enough for a bound at 0.05 to hold against sampling noise alone
    // (one standard error is 0.015): the bound guards against a pool that is unwinnable or
    // already solved.
    assert!(
        (0.02..=0.6).contains(&base),
        "starting win rate {base:.3} outside 0.02..0.6: control {control:?}, GRPO {grpo:?}"
    );
    assert!(
        grpo_end >= base + 0.2,
        "GRPO: win rate {base:.2} -> {grpo_end:.2}, expected a rise of at least 0.2 ({grpo:?})"
    );
    assert!(
        control_end < base + 0.1,
        "control: win rate {base:.2} -> {control_end:.2} without a real update ({control:?})"
    );
    Ok(())
}
