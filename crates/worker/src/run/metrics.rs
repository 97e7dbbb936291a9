//! The step's metrics (spec, "Metrics to log each step"): each phase returns what it measured
//! as a typed part of [`StepMetrics`], and [`StepMetrics::values`] names them as reported, so
//! every name is written once, here. The live windows' part ([`LiveStats`], computed by
//! `score::live_stats` with `spade::metrics`) holds the spec's list (learnable share,
//! easy/medium/hard, regret and both arm means, per-skill win rates, reward levels, zero-std
//! share, acceptance, rejection reasons, formula reveals, and the Vendi score with the kernel of
//! `metrics.vendi_kernel`, named in its metrics) and the worker's extras: `envs`,
//! `acceptance_rate_run`, `distinct_accepted_run` (distinct programs accepted so far),
//! `failed_env_share`, and the checks during play: `play_env_calls` (reset and step returns
//! checked this step), `play_violations` (plays that broke the contract),
//! `play_violation_rate` (violations per checked call) and `broken_in_play_envs` (live
//! environments retired for a violation).

use spade::EnvKind;
use spade::metrics;
use std::collections::BTreeMap;

/// What the step itself observed (the rest comes from the state).
#[derive(Debug, Default)]
pub struct StepObservations {
    pub zero_std: Vec<bool>,
    /// Per play group: every return 0, every return above 0.
    pub all_zero: Vec<bool>,
    pub all_positive: Vec<bool>,
    pub acceptance: metrics::Acceptance,
    pub formula_reveals: Vec<bool>,
    /// Reset and step returns checked against the contract this step (hint and no-hint plays).
    pub env_calls: u64,
    /// Plays of this step that broke the contract.
    pub violations: u64,
}

impl StepObservations {
    /// Adds what a later phase of the step observed.
    pub fn absorb(&mut self, later: StepObservations) {
        self.zero_std.extend(later.zero_std);
        self.all_zero.extend(later.all_zero);
        self.all_positive.extend(later.all_positive);
        self.acceptance.accepted += later.acceptance.accepted;
        self.acceptance.rejected += later.acceptance.rejected;
        for (reason, n) in later.acceptance.reasons {
            *self.acceptance.reasons.entry(reason).or_default() += n;
        }
        self.formula_reveals.extend(later.formula_reveals);
        self.env_calls += later.env_calls;
        self.violations += later.violations;
    }

    /// Counts the checked calls and the violations of played episodes.
    pub fn note_plays(&mut self, eps: &[crate::play::Episode]) {
        for ep in eps {
            self.env_calls += u64::from(ep.env_calls);
            self.violations += u64::from(ep.failure.is_some());
        }
    }
}

/// Wall-clock seconds per phase of a step (the reference logs its phases' timings): a phase
/// runs from its `Loop::phase` call to the next one or the step's end; a phase entered twice
/// in a step adds up.
#[derive(Debug, Default)]
pub struct PhaseClock {
    current: Option<(&'static str, std::time::Instant)>,
    totals: BTreeMap<&'static str, f64>,
}

impl PhaseClock {
    /// Ends the running phase and starts `phase`.
    pub fn enter(&mut self, phase: &'static str) {
        self.stop();
        self.current = Some((phase, std::time::Instant::now()));
    }

    fn stop(&mut self) {
        if let Some((name, since)) = self.current.take() {
            *self.totals.entry(name).or_default() += since.elapsed().as_secs_f64();
        }
    }

    /// The step's phases as metrics (`time/<phase>_s`, spaces as underscores), and a fresh
    /// clock for the next step.
    pub fn take(&mut self) -> Vec<(String, f64)> {
        self.stop();
        std::mem::take(&mut self.totals)
            .into_iter()
            .map(|(name, secs)| (format!("time/{}_s", name.replace(' ', "_")), secs))
            .collect()
    }
}

/// Adds the live-window metrics to the step's, keeping what the step already reported under
/// the same name (a closing window's numbers are not overwritten by the live window's).
pub fn merge_live(m: &mut BTreeMap<String, f64>, live: BTreeMap<String, f64>) {
    for (k, v) in live {
        m.entry(k).or_insert(v);
    }
}

/// The finite values of `m`, and the names of the others (NaN or infinite: a diverged loss),
/// which a report cannot carry (see `Loop::end_step`).
pub fn finite_only(m: &BTreeMap<String, f64>) -> (BTreeMap<String, f64>, Vec<String>) {
    let mut kept = BTreeMap::new();
    let mut skipped = Vec::new();
    for (k, v) in m {
        if v.is_finite() {
            kept.insert(k.clone(), *v);
        } else {
            skipped.push(k.clone());
        }
    }
    (kept, skipped)
}

/// The mean of `xs`; None when empty.
pub(super) fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// A step's metrics as its phases measured them. Each phase returns its part and only
/// [`StepMetrics::values`] names them as reported, so a metric's name is written once, here.
#[derive(Debug, Clone, Default)]
pub struct StepMetrics {
    /// Designer attempts of each kind regenerated this step (`{kind}/attempts`).
    pub attempts: BTreeMap<EnvKind, u64>,
    /// What the windows closed this step measured (a later close of a kind replaces an
    /// earlier one's figures: the last step closes again what it regenerated).
    pub closed: ClosedStats,
    /// The no-hint plays (none when nothing was live).
    pub play: Option<PlayStats>,
    /// The update (also when it had nothing to train on).
    pub update: UpdateStats,
    /// A SPICE step's tasks and answers.
    pub spice: Option<SpiceStats>,
    /// The live windows after the plays (SPADE and fixed-env runs).
    pub live: Option<LiveStats>,
}

/// What closing windows measured.
#[derive(Debug, Clone, Default)]
pub struct ClosedStats {
    /// Mean regret of the closed window's environments (`{kind}/window_regret`).
    pub window_regret: BTreeMap<EnvKind, f64>,
    /// The EMA learning potential's averages of each skill after its update
    /// (`ema/{skill}/mu_fast`, `mu_slow`, `potential`).
    pub ema: BTreeMap<String, EmaSkill>,
    /// Mean reward of the designer samples that train (`designer_reward_trained_mean`; not
    /// `designer_reward_mean`, which is the live window's).
    pub designer_reward_trained_mean: Option<f64>,
}

impl ClosedStats {
    /// Adds a later close's figures; they replace the earlier ones of the same name.
    pub fn absorb(&mut self, later: ClosedStats) {
        self.window_regret.extend(later.window_regret);
        self.ema.extend(later.ema);
        if later.designer_reward_trained_mean.is_some() {
            self.designer_reward_trained_mean = later.designer_reward_trained_mean;
        }
    }
}

/// One skill's EMA learning potential after a window.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EmaSkill {
    pub mu_fast: f64,
    pub mu_slow: f64,
    pub potential: f64,
}

/// The step's no-hint plays.
#[derive(Debug, Clone, Default)]
pub struct PlayStats {
    /// Plays in all (`plays_no_hint`) and per environment (`plays_per_env`).
    pub plays: usize,
    pub per_env: usize,
    /// The RLVE baseline's difficulty update.
    pub rlve: Option<RlveStats>,
    /// `model.rollout = "vllm"`: |server - tch| log-prob gap over the sampled tokens
    /// (`vllm_logprob_gap_mean`, `_max`), when any token was sampled.
    pub logprob_gap: Option<(f64, f64)>,
    /// Tokens the agent wrote per no-hint play, mean and max (`response_length_mean`, `_max`:
    /// the reference's response lengths), and the share of plays that ended on a budget
    /// (`truncated_share`: a cut turn, the context or the episode budget).
    pub lengths: Option<(f64, f64)>,
    pub truncated_share: f64,
    /// What the engine did serving the no-hint plays (`engine/...`), when it served them.
    pub engine: Option<spade_policy::engine::EngineStats>,
    /// Seconds the decode loop of the no-hint plays waited for environments
    /// (`time/env_wait_s`; `None` on the sampler path, which has no decode loop).
    pub env_wait_s: Option<f64>,
}

impl PlayStats {
    /// The response lengths and the truncated share of `eps` (every no-hint play of a step).
    pub fn shape<'a>(
        eps: impl IntoIterator<Item = &'a crate::play::Episode>,
    ) -> (Option<(f64, f64)>, f64) {
        let (mut n, mut sum, mut max, mut truncated) = (0usize, 0usize, 0usize, 0usize);
        for ep in eps {
            let written = ep.loss_mask.iter().filter(|&&m| m).count();
            n += 1;
            sum += written;
            max = max.max(written);
            truncated += usize::from(ep.truncated);
        }
        if n == 0 {
            return (None, 0.0);
        }
        (
            Some((sum as f64 / n as f64, max as f64)),
            truncated as f64 / n as f64,
        )
    }
}

/// The RLVE difficulty rule after a step (`rlve_checks`, `rlve_raised`,
/// `rlve_difficulty_mean`, `rlve_difficulty_max`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RlveStats {
    pub checks: usize,
    pub raised: usize,
    pub difficulty_mean: f64,
    pub difficulty_max: f64,
}

/// The step's update.
#[derive(Debug, Clone, Default)]
pub struct UpdateStats {
    /// Agent samples with a non-zero advantage in the update's batch (`agent_samples`).
    pub agent_samples: usize,
    /// Samples in the update's batch, zero-advantage ones included (`batch_samples`: the
    /// denominator of `grpo.loss_norm = "sample_mean"`), and agent samples cut off by
    /// `grpo.trim_to_global_batch` (`trimmed_samples`).
    pub batch_samples: usize,
    pub trimmed_samples: usize,
    /// Designer samples of the windows closed this step (`designer_samples`) and each kind's
    /// loss weight (`designer_loss_weight`, and `{kind}/designer_loss_weight` when several
    /// kinds closed), when any window closed with samples.
    pub designer: Option<(usize, BTreeMap<EnvKind, f64>)>,
    /// The optimizer step (`loss`, `clip_frac`, `grad_norm`, `tis_mean`); none when the batch
    /// was empty.
    pub grpo: Option<spade_policy::grpo::GrpoStats>,
    /// `model.rollout = "vllm"`: the weights sync after the update.
    pub vllm: Option<crate::vllm::SyncStats>,
}

/// A SPICE step's challenger and reasoner.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SpiceStats {
    /// Valid tasks (`spice/tasks`) and challenger attempts (`spice/attempts`).
    pub tasks: usize,
    pub attempts: usize,
    /// Attempts that did not parse (`spice/invalid_rate`, a share of the attempts).
    pub invalid: usize,
    /// Over the valid tasks: mean pass rate (`spice/pass_rate`), mean variance reward
    /// (`spice/variance_reward`), share of multiple-choice tasks (`spice/mcq_share`).
    pub valid: Option<(f64, f64, f64)>,
    pub challenger_samples: usize,
    pub reasoner_samples: usize,
    /// With `model.rollout = "vllm"`: the mean and largest gap between the servers' and the
    /// trainer's log-probs of the trained tokens (`vllm_logprob_gap_mean`, `_max`).
    pub logprob_gap: Option<(f64, f64)>,
}

/// The live windows' metrics.
#[derive(Debug, Clone, Default)]
pub struct LiveStats {
    /// The spec's list, named by `spade::metrics::step_metrics`; a name the step measured
    /// itself keeps the step's value (a closing window's is not overwritten by the live one's).
    pub spec: BTreeMap<String, f64>,
    /// Reset and step returns checked this step (`play_env_calls`), plays that broke the
    /// contract (`play_violations`; `play_violation_rate` per checked call).
    pub env_calls: u64,
    pub violations: u64,
    /// Live environments retired for a violation (`broken_in_play_envs`).
    pub broken_in_play_envs: usize,
    /// Live environments (`envs`).
    pub envs: usize,
    /// Distinct programs accepted so far (`distinct_accepted_run`) and the run's acceptance
    /// (`acceptance_rate_run`), once the designer has written anything.
    pub distinct_accepted_run: Option<usize>,
    pub acceptance_rate_run: Option<f64>,
    /// Share of live environments that failed (`failed_env_share`).
    pub failed_env_share: Option<f64>,
}

impl StepMetrics {
    /// The metrics as reported, by name.
    pub fn values(&self) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        let mut put = |name: String, v: f64| {
            m.insert(name, v);
        };
        for (kind, n) in &self.attempts {
            put(format!("{}/attempts", kind.as_str()), *n as f64);
        }
        let c = &self.closed;
        for (skill, e) in &c.ema {
            put(format!("ema/{skill}/mu_fast"), e.mu_fast);
            put(format!("ema/{skill}/mu_slow"), e.mu_slow);
            put(format!("ema/{skill}/potential"), e.potential);
        }
        for (kind, r) in &c.window_regret {
            put(format!("{}/window_regret", kind.as_str()), *r);
        }
        if let Some(r) = c.designer_reward_trained_mean {
            put("designer_reward_trained_mean".into(), r);
        }
        if let Some(p) = &self.play {
            put("plays_no_hint".into(), p.plays as f64);
            put("plays_per_env".into(), p.per_env as f64);
            if let Some((mean, max)) = p.lengths {
                put("response_length_mean".into(), mean);
                put("response_length_max".into(), max);
                put("truncated_share".into(), p.truncated_share);
            }
            if let Some(e) = &p.engine {
                put("engine/prefilled".into(), e.prefilled as f64);
                put("engine/reused".into(), e.reused as f64);
                put("engine/shared".into(), e.shared as f64);
                put("engine/generated".into(), e.generated as f64);
                put("engine/reads".into(), e.reads as f64);
                put(
                    "engine/mean_batch".into(),
                    e.decode_rows as f64 / e.decode_passes.max(1) as f64,
                );
                put("engine/evictions".into(), e.evictions as f64);
                put("engine/peak_slots".into(), e.peak_slots as f64);
                put("engine/peak_blocks".into(), e.peak_blocks as f64);
                put("engine/peak_batch".into(), e.peak_batch as f64);
            }
            if let Some(s) = p.env_wait_s {
                put("time/env_wait_s".into(), s);
            }
            if let Some(r) = &p.rlve {
                put("rlve_checks".into(), r.checks as f64);
                put("rlve_raised".into(), r.raised as f64);
                put("rlve_difficulty_mean".into(), r.difficulty_mean);
                put("rlve_difficulty_max".into(), r.difficulty_max);
            }
            if let Some((mean, max)) = p.logprob_gap {
                put("vllm_logprob_gap_mean".into(), mean);
                put("vllm_logprob_gap_max".into(), max);
            }
        }
        if let Some(s) = &self.spice {
            put("spice/tasks".into(), s.tasks as f64);
            put("spice/attempts".into(), s.attempts as f64);
            put(
                "spice/invalid_rate".into(),
                s.invalid as f64 / s.attempts.max(1) as f64,
            );
            if let Some((pass_rate, variance_reward, mcq_share)) = s.valid {
                put("spice/pass_rate".into(), pass_rate);
                put("spice/variance_reward".into(), variance_reward);
                put("spice/mcq_share".into(), mcq_share);
            }
            put("challenger_samples".into(), s.challenger_samples as f64);
            put("reasoner_samples".into(), s.reasoner_samples as f64);
            if let Some((mean, max)) = s.logprob_gap {
                put("vllm_logprob_gap_mean".into(), mean);
                put("vllm_logprob_gap_max".into(), max);
            }
        }
        let u = &self.update;
        put("agent_samples".into(), u.agent_samples as f64);
        if u.batch_samples > 0 {
            put("batch_samples".into(), u.batch_samples as f64);
            put("trimmed_samples".into(), u.trimmed_samples as f64);
        }
        if let Some((n, weights)) = &u.designer {
            put("designer_samples".into(), *n as f64);
            for (kind, w) in weights {
                // With several kinds the unprefixed name holds the last kind's weight.
                put("designer_loss_weight".into(), *w);
                if weights.len() > 1 {
                    put(format!("{}/designer_loss_weight", kind.as_str()), *w);
                }
            }
        }
        if let Some(g) = &u.grpo {
            put("loss".into(), g.loss);
            put("clip_frac".into(), g.clip_frac);
            put("grad_norm".into(), g.grad_norm);
            put("tis_mean".into(), g.mean_tis);
            // Computed by every update; the trainer's drift from the sampler and the reference.
            put("ratio_mean".into(), g.mean_ratio);
            put("kl_mean".into(), g.mean_kl);
            put("entropy".into(), g.entropy);
        }
        if let Some(v) = &u.vllm {
            put("vllm_restarts".into(), f64::from(v.restarts));
            put("vllm_sync_s".into(), v.sync_s);
            put("vllm_probe_gap".into(), v.probe_gap);
        }
        if let Some(l) = &self.live {
            put("play_env_calls".into(), l.env_calls as f64);
            put("play_violations".into(), l.violations as f64);
            if l.env_calls > 0 {
                put(
                    "play_violation_rate".into(),
                    l.violations as f64 / l.env_calls as f64,
                );
            }
            put("broken_in_play_envs".into(), l.broken_in_play_envs as f64);
            put("envs".into(), l.envs as f64);
            if let Some(n) = l.distinct_accepted_run {
                put("distinct_accepted_run".into(), n as f64);
            }
            if let Some(r) = l.acceptance_rate_run {
                put("acceptance_rate_run".into(), r);
            }
            if let Some(s) = l.failed_env_share {
                put("failed_env_share".into(), s);
            }
            merge_live(&mut m, l.spec.clone());
        }
        m
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
