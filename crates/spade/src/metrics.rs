//! The metrics logged each step (spec, "Metrics to log each step"): learnable share,
//! easy/medium/hard shares, the share of zero-variance groups, mean regret and both arms'
//! mean returns, per-skill win rates, acceptance rate and rejection reasons, distinct reward
//! levels, the formula-reveal rate, and the windowed Vendi score ([`vendi`]).
//!
//! [`step_metrics`] turns one step's facts into the flat name -> value map that
//! `report::Message::Metrics` carries; the names are stable (the dashboard plots them).

pub mod vendi;

use crate::config::MetricsSection;
use crate::reward::mean;
use std::collections::BTreeMap;

/// Share of environments whose no-hint win rate lies in [low, high] (spec: [0.2, 0.8]).
pub fn learnable_share(win_rates: &[f64], low: f64, high: f64) -> Option<f64> {
    share(win_rates, |w| w >= low && w <= high)
}

/// Easy (win rate above `easy_above`), hard (below `hard_below`) and medium (the rest) shares
/// (spec: thresholds 0.8 and 0.2).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Difficulty {
    pub easy: f64,
    pub medium: f64,
    pub hard: f64,
}

pub fn difficulty(win_rates: &[f64], easy_above: f64, hard_below: f64) -> Option<Difficulty> {
    let easy = share(win_rates, |w| w > easy_above)?;
    let hard = share(win_rates, |w| w < hard_below)?;
    Some(Difficulty {
        easy,
        hard,
        medium: 1.0 - easy - hard,
    })
}

/// Share (0-1, despite the name) of play groups whose returns did not vary (spec 6:
/// `zero_std_group_pct`). The reference logs the same name as a fraction
/// (`spade/slime/spade_rollout.py`: `num_zero_std_groups / num_groups_total`), so the two
/// curves compare directly; the dashboard plots it with the other shares.
pub fn zero_std_group_pct(zero_std: &[bool]) -> Option<f64> {
    let n = zero_std.len();
    (n > 0).then(|| zero_std.iter().filter(|z| **z).count() as f64 / n as f64)
}

/// Mean win rate per skill, from (skill, win rate) pairs.
pub fn per_skill_win_rate<S: AsRef<str>>(pairs: &[(S, f64)]) -> BTreeMap<String, f64> {
    let mut acc: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    for (skill, w) in pairs {
        let e = acc.entry(skill.as_ref().to_string()).or_default();
        e.0 += w;
        e.1 += 1;
    }
    acc.into_iter()
        .map(|(k, (sum, n))| (k, sum / n as f64))
        .collect()
}

/// Designer attempts of a step and why the rejected ones failed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Acceptance {
    pub accepted: u64,
    pub rejected: u64,
    /// rejection reason -> count
    pub reasons: BTreeMap<String, u64>,
}

impl Acceptance {
    pub fn accept(&mut self) {
        self.accepted += 1;
    }

    pub fn reject(&mut self, reason: &str) {
        self.rejected += 1;
        *self.reasons.entry(reason.to_string()).or_default() += 1;
    }

    /// Accepted / attempted; `None` before any attempt.
    pub fn rate(&self) -> Option<f64> {
        let n = self.accepted + self.rejected;
        (n > 0).then(|| self.accepted as f64 / n as f64)
    }
}

/// Number of distinct values among an environment's observed rewards (equal to 1e-6): 2 for a
/// win/lose game, more for games with partial credit.
pub fn distinct_reward_levels(rewards: &[f64]) -> u32 {
    let mut levels: Vec<i64> = rewards
        .iter()
        .filter(|r| r.is_finite())
        .map(|r| (r * 1e6).round() as i64)
        .collect();
    levels.sort_unstable();
    levels.dedup();
    levels.len() as u32
}

/// Whether a game's first observation gives its answer away: a cheap check, documented here
/// because it is a heuristic. `solution` is what `solution()` returned (e.g. `\boxed{42}`).
/// The observation reveals it when
/// 1. the answer appears verbatim as a whole token or phrase and is distinctive enough not
///    to appear by chance (at least 3 characters, or 2 digits or more), or
/// 2. a phrase such as "answer is", "answer:", "solution is" or "solution:" is followed
///    directly by the answer (any length).
///
/// It misses formulas stated in words ("multiply the two numbers") and may flag an answer
/// that is also part of the question; the spec's rate is an alarm, not a verdict.
pub fn reveals_formula(first_observation: &str, solution: &str) -> bool {
    let answer = crate::parse::last_boxed(solution)
        .unwrap_or(solution)
        .trim();
    if answer.is_empty() {
        return false;
    }
    let obs = first_observation.to_lowercase();
    let ans = answer.to_lowercase();
    let distinctive =
        ans.chars().count() >= 3 || (ans.len() >= 2 && ans.chars().all(|c| c.is_ascii_digit()));
    let is_token_at = |i: usize| {
        let before = obs[..i].chars().next_back();
        let after = obs[i + ans.len()..].chars().next();
        let boundary = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric() && c != '_');
        boundary(before) && boundary(after)
    };
    if distinctive && obs.match_indices(&ans).any(|(i, _)| is_token_at(i)) {
        return true;
    }
    [
        "answer is",
        "answer:",
        "solution is",
        "solution:",
        "answer would be",
    ]
    .iter()
    .any(|phrase| {
        obs.match_indices(phrase).any(|(i, _)| {
            let rest = obs[i + phrase.len()..].trim_start();
            let rest = rest.strip_prefix("\\boxed{").unwrap_or(rest);
            rest.starts_with(&ans)
                && rest[ans.len()..]
                    .chars()
                    .next()
                    .is_none_or(|c| !c.is_alphanumeric())
        })
    })
}

/// One environment scored at the end of its window.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredEnv {
    pub skill: String,
    pub win_rate_no_hint: f64,
    pub regret: f64,
    pub mean_return_hint: f64,
    pub mean_return_no_hint: f64,
    /// The designer reward it earned.
    pub designer_reward: f64,
    pub reward_levels: u32,
}

/// Everything [`step_metrics`] summarises for one step.
#[derive(Debug, Clone, Default)]
pub struct StepFacts {
    /// Environments whose window closed this step (or the live pool, as the caller prefers).
    pub scored: Vec<ScoredEnv>,
    /// One flag per play group trained this step.
    pub zero_std: Vec<bool>,
    /// One flag per play group: every return 0 (nothing won), and every return above 0 (all
    /// won); the reference logs both shares (`all_zero_group_pct`, `all_positive_group_pct`):
    /// they say which side a uniform group is uniform on.
    pub all_zero: Vec<bool>,
    pub all_positive: Vec<bool>,
    pub acceptance: Acceptance,
    /// One flag per environment generated this step: does its first observation reveal it.
    pub formula_reveals: Vec<bool>,
    pub vendi: Option<vendi::VendiSummary>,
    /// The kernel that produced `vendi` (`metrics.vendi_kernel`: `ngram`, `policy`), named in
    /// its metrics; empty = the unnamed `vendi_mean` of older runs.
    pub vendi_kernel: &'static str,
}

/// The flat metrics of one step. Names: `learnable_share`, `easy_share`, `medium_share`,
/// `hard_share`, `zero_std_group_pct`, `all_zero_group_pct`, `all_positive_group_pct`,
/// `regret_mean`, `r_hint`, `r_no_hint` (mean returns of the two arms), `designer_reward_mean`,
/// `win_rate/<skill>`, `acceptance_rate`, `accepted`, `rejected`, `rejections/<reason>`,
/// `reward_levels_mean`, `formula_reveal_rate`, and `vendi_<kernel>_mean`, `vendi_<kernel>_sd`,
/// `vendi_<kernel>_per_n` with the kernel that produced them (`vendi_mean`... when unnamed).
/// A metric without data this step is left out rather than reported as 0.
pub fn step_metrics(f: &StepFacts, cfg: &MetricsSection) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    let mut put = |name: &str, v: Option<f64>| {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            m.insert(name.to_string(), v);
        }
    };
    let w: Vec<f64> = f.scored.iter().map(|s| s.win_rate_no_hint).collect();
    put(
        "learnable_share",
        learnable_share(&w, cfg.learnable_low, cfg.learnable_high),
    );
    if let Some(d) = difficulty(&w, cfg.easy_above, cfg.hard_below) {
        put("easy_share", Some(d.easy));
        put("medium_share", Some(d.medium));
        put("hard_share", Some(d.hard));
    }
    put("zero_std_group_pct", zero_std_group_pct(&f.zero_std));
    put("all_zero_group_pct", zero_std_group_pct(&f.all_zero));
    put(
        "all_positive_group_pct",
        zero_std_group_pct(&f.all_positive),
    );
    let col = |g: fn(&ScoredEnv) -> f64| mean(&f.scored.iter().map(g).collect::<Vec<_>>());
    put("regret_mean", col(|s| s.regret));
    put("r_hint", col(|s| s.mean_return_hint));
    put("r_no_hint", col(|s| s.mean_return_no_hint));
    put("designer_reward_mean", col(|s| s.designer_reward));
    put("reward_levels_mean", col(|s| f64::from(s.reward_levels)));
    let pairs: Vec<(&str, f64)> = f
        .scored
        .iter()
        .map(|s| (s.skill.as_str(), s.win_rate_no_hint))
        .collect();
    for (skill, rate) in per_skill_win_rate(&pairs) {
        put(&format!("win_rate/{skill}"), Some(rate));
    }
    put("acceptance_rate", f.acceptance.rate());
    if f.acceptance.rate().is_some() {
        put("accepted", Some(f.acceptance.accepted as f64));
        put("rejected", Some(f.acceptance.rejected as f64));
    }
    for (reason, n) in &f.acceptance.reasons {
        put(&format!("rejections/{reason}"), Some(*n as f64));
    }
    put("formula_reveal_rate", share_of_flags(&f.formula_reveals));
    if let Some(v) = f.vendi {
        let name = |stat: &str| match f.vendi_kernel {
            "" => format!("vendi_{stat}"),
            k => format!("vendi_{k}_{stat}"),
        };
        put(&name("mean"), Some(v.mean));
        put(&name("sd"), Some(v.sd));
        put(&name("per_n"), Some(v.per_n()));
    }
    m
}

fn share(xs: &[f64], pred: impl Fn(f64) -> bool) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().filter(|x| pred(**x)).count() as f64 / xs.len() as f64)
}

fn share_of_flags(flags: &[bool]) -> Option<f64> {
    (!flags.is_empty()).then(|| flags.iter().filter(|f| **f).count() as f64 / flags.len() as f64)
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
