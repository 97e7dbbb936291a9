//! The step metrics' tests: their names, and the shapes computed from plays and phases.

use super::*;

/// The attack: a loss that diverges to NaN. Serialized into the report it becomes `null`,
/// which the service refuses, so the run failed; it is left out and named instead, and the
/// step's metrics still round-trip through JSON.
#[test]
fn a_non_finite_metric_is_left_out_not_sent() -> Result<(), serde_json::Error> {
    let m = BTreeMap::from([
        ("loss".to_string(), f64::NAN),
        ("grad_norm".to_string(), f64::INFINITY),
        ("reward_mean".to_string(), 0.5),
    ]);
    let (kept, skipped) = finite_only(&m);
    assert_eq!(kept, BTreeMap::from([("reward_mean".to_string(), 0.5)]));
    assert_eq!(skipped, ["grad_norm", "loss"]);
    let msg = spade::report::Message::Metrics {
        step: 3,
        elapsed_s: 1.0,
        values: kept,
    };
    let back: spade::report::Message = serde_json::from_str(&serde_json::to_string(&msg)?)?;
    assert_eq!(back, msg);
    Ok(())
}

#[test]
fn the_live_window_never_overwrites_what_the_step_reported() {
    // A closing window reported its trained designer rewards (mean 0.25 of 0.5 and 0.0);
    // the live window's blend of the new environments (0.8) comes after.
    let mut m = BTreeMap::from([
        ("designer_reward_trained_mean".to_string(), 0.25),
        ("regret_mean".to_string(), 0.1),
    ]);
    let live = BTreeMap::from([
        ("designer_reward_mean".to_string(), 0.8),
        ("regret_mean".to_string(), 0.4),
    ]);
    merge_live(&mut m, live);
    assert_eq!(m["designer_reward_trained_mean"], 0.25);
    assert_eq!(m["designer_reward_mean"], 0.8);
    assert_eq!(m["regret_mean"], 0.1, "the step's own value stays");
}

/// Every name a step can report, from a step that measured everything: a renamed metric
/// breaks the dashboards' charts and the comparisons with older runs, so it fails here.
#[test]
fn the_phase_clock_adds_a_phase_entered_twice_and_starts_afresh() {
    let mut c = PhaseClock::default();
    c.enter("generate");
    std::thread::sleep(std::time::Duration::from_millis(20));
    c.enter("hint plays");
    std::thread::sleep(std::time::Duration::from_millis(10));
    c.enter("generate");
    std::thread::sleep(std::time::Duration::from_millis(20));
    let t: BTreeMap<String, f64> = c.take().into_iter().collect();
    let names: Vec<&str> = t.keys().map(String::as_str).collect();
    assert_eq!(names, ["time/generate_s", "time/hint_plays_s"]);
    assert!(t["time/generate_s"] >= 0.04, "{t:?}");
    assert!(
        t["time/hint_plays_s"] >= 0.01 && t["time/hint_plays_s"] < 0.04,
        "{t:?}"
    );
    assert!(c.take().is_empty());
}

#[test]
fn response_lengths_count_the_agents_tokens_and_the_truncated_share_the_budget_ends() {
    let ep = |written: usize, prompt: usize, truncated: bool| crate::play::Episode {
        loss_mask: [vec![false; prompt], vec![true; written]].concat(),
        truncated,
        ..crate::play::Episode::new(0, false)
    };
    // 10, 30 and 50 tokens written after prompts of 100: mean 30, max 50; 1 of 3 cut.
    let eps = [ep(10, 100, false), ep(30, 100, true), ep(50, 100, false)];
    let (lengths, share) = PlayStats::shape(&eps);
    assert_eq!(lengths, Some((30.0, 50.0)));
    assert!((share - 1.0 / 3.0).abs() < 1e-12);
    assert_eq!(PlayStats::shape(&[]), (None, 0.0));
}

#[test]
fn the_step_metrics_keep_their_reported_names() {
    let grpo = spade_policy::grpo::GrpoStats {
        loss: 0.5,
        clip_frac: 0.1,
        grad_norm: 2.0,
        mean_tis: 0.9,
        ..Default::default()
    };
    let m = StepMetrics {
        attempts: BTreeMap::from([(EnvKind::Game, 24), (EnvKind::ToolUse, 8)]),
        closed: ClosedStats {
            window_regret: BTreeMap::from([(EnvKind::Game, 0.3)]),
            ema: BTreeMap::from([("Optimization".to_string(), EmaSkill::default())]),
            designer_reward_trained_mean: Some(0.2),
        },
        play: Some(PlayStats {
            plays: 192,
            per_env: 8,
            rlve: Some(RlveStats::default()),
            logprob_gap: Some((0.01, 0.2)),
            lengths: Some((120.5, 400.0)),
            truncated_share: 0.25,
            engine: Some(spade_policy::engine::EngineStats {
                decode_passes: 4,
                decode_rows: 10,
                ..Default::default()
            }),
            env_wait_s: Some(1.5),
        }),
        update: UpdateStats {
            agent_samples: 100,
            batch_samples: 192,
            trimmed_samples: 20,
            designer: Some((
                12,
                BTreeMap::from([(EnvKind::Game, 32.0), (EnvKind::ToolUse, 16.0)]),
            )),
            grpo: Some(grpo),
            vllm: Some(crate::vllm::SyncStats::default()),
        },
        spice: Some(SpiceStats {
            valid: Some((0.5, 0.9, 0.5)),
            ..SpiceStats::default()
        }),
        live: Some(LiveStats {
            spec: BTreeMap::from([
                ("learnable_share".to_string(), 0.25),
                // The step's own value wins over the live window's.
                ("agent_samples".to_string(), -1.0),
            ]),
            env_calls: 10,
            violations: 1,
            distinct_accepted_run: Some(3),
            acceptance_rate_run: Some(0.4),
            failed_env_share: Some(0.0),
            ..LiveStats::default()
        }),
    };
    let v = m.values();
    let names: Vec<&str> = v.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "acceptance_rate_run",
            "agent_samples",
            "batch_samples",
            "broken_in_play_envs",
            "challenger_samples",
            "clip_frac",
            "designer_loss_weight",
            "designer_reward_trained_mean",
            "designer_samples",
            "distinct_accepted_run",
            "ema/Optimization/mu_fast",
            "ema/Optimization/mu_slow",
            "ema/Optimization/potential",
            "engine/evictions",
            "engine/generated",
            "engine/mean_batch",
            "engine/peak_batch",
            "engine/peak_blocks",
            "engine/peak_slots",
            "engine/prefilled",
            "engine/reads",
            "engine/reused",
            "engine/shared",
            "entropy",
            "envs",
            "failed_env_share",
            "game/attempts",
            "game/designer_loss_weight",
            "game/window_regret",
            "grad_norm",
            "kl_mean",
            "learnable_share",
            "loss",
            "play_env_calls",
            "play_violation_rate",
            "play_violations",
            "plays_no_hint",
            "plays_per_env",
            "ratio_mean",
            "reasoner_samples",
            "response_length_max",
            "response_length_mean",
            "rlve_checks",
            "rlve_difficulty_max",
            "rlve_difficulty_mean",
            "rlve_raised",
            "spice/attempts",
            "spice/invalid_rate",
            "spice/mcq_share",
            "spice/pass_rate",
            "spice/tasks",
            "spice/variance_reward",
            "time/env_wait_s",
            "tis_mean",
            "tool_use/attempts",
            "tool_use/designer_loss_weight",
            "trimmed_samples",
            "truncated_share",
            "vllm_logprob_gap_max",
            "vllm_logprob_gap_mean",
            "vllm_probe_gap",
            "vllm_restarts",
            "vllm_sync_s",
        ]
    );
    assert_eq!(v["agent_samples"], 100.0);
    assert_eq!(v["batch_samples"], 192.0);
    assert_eq!(v["trimmed_samples"], 20.0);
    assert_eq!(v["engine/mean_batch"], 2.5);
    assert_eq!(v["time/env_wait_s"], 1.5);
    assert_eq!(v["play_violation_rate"], 0.1);
    // With two kinds the unprefixed weight is the last kind's (as before the struct).
    assert_eq!(v["designer_loss_weight"], 16.0);
}
