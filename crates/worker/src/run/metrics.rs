//! The step's metrics (spec, "Metrics to log each step") over the live environments: learnable
//! share, easy/medium/hard, mean regret with both arm means, per-skill win rates, acceptance,
//! distinct reward levels, the formula-reveal rate, and the Vendi score of the environments of
//! the window (subsamples, mean and s.d. over draws). TODO(core): spade::metrics.

use super::Loop;
use crate::{WorkerError, interim, seeds};
use std::collections::BTreeMap;

pub(super) fn step_metrics(
    lp: &Loop<'_>,
    m: &mut BTreeMap<String, f64>,
) -> Result<(), WorkerError> {
    let c = &lp.cfg.metrics;
    let envs: Vec<&crate::state::LiveEnv> =
        lp.state.windows.values().flat_map(|w| &w.envs).collect();
    m.insert("envs".into(), envs.len() as f64);
    let rates: Vec<f64> = envs.iter().filter_map(|e| e.win_rate()).collect();
    if !rates.is_empty() {
        let n = rates.len() as f64;
        let share = |f: &dyn Fn(f64) -> bool| rates.iter().filter(|&&w| f(w)).count() as f64 / n;
        m.insert(
            "learnable_share".into(),
            share(&|w| w >= c.learnable_low && w <= c.learnable_high),
        );
        m.insert("easy_share".into(), share(&|w| w > c.easy_above));
        m.insert("hard_share".into(), share(&|w| w < c.hard_below));
        m.insert(
            "medium_share".into(),
            share(&|w| w >= c.hard_below && w <= c.easy_above),
        );
    }
    let arm = |f: &dyn Fn(&crate::state::LiveEnv) -> &Vec<f64>| {
        let all: Vec<f64> = envs.iter().flat_map(|e| f(e).iter().copied()).collect();
        (!all.is_empty()).then(|| all.iter().sum::<f64>() / all.len() as f64)
    };
    let (rh, rn) = (arm(&|e| &e.hint_returns), arm(&|e| &e.no_hint_returns));
    if let Some(v) = rh {
        m.insert("r_hint".into(), v);
    }
    if let Some(v) = rn {
        m.insert("r_no_hint".into(), v);
    }
    let regrets: Vec<f64> = envs
        .iter()
        .filter(|e| !e.hint_returns.is_empty() && !e.no_hint_returns.is_empty())
        .map(|e| {
            let mean = |x: &Vec<f64>| x.iter().sum::<f64>() / x.len() as f64;
            mean(&e.hint_returns) - mean(&e.no_hint_returns)
        })
        .collect();
    if !regrets.is_empty() {
        m.insert(
            "mean_regret".into(),
            regrets.iter().sum::<f64>() / regrets.len() as f64,
        );
    }
    let mut per_skill: BTreeMap<&str, (u32, usize)> = BTreeMap::new();
    for e in &envs {
        let s = per_skill.entry(e.skill.as_str()).or_insert((0, 0));
        s.0 += e.no_hint_wins;
        s.1 += e.no_hint_returns.len();
    }
    for (skill, (wins, n)) in per_skill {
        if n > 0 {
            m.insert(format!("win_rate/{skill}"), f64::from(wins) / n as f64);
        }
    }
    if lp.state.attempts_total > 0 {
        m.insert(
            "acceptance_rate".into(),
            lp.state.accepted_total as f64 / lp.state.attempts_total as f64,
        );
    }
    if !envs.is_empty() {
        let n = envs.len() as f64;
        m.insert(
            "reward_levels_mean".into(),
            envs.iter()
                .map(|e| e.reward_levels.len() as f64)
                .sum::<f64>()
                / n,
        );
        m.insert(
            "formula_reveal_rate".into(),
            envs.iter().filter(|e| e.reveals_solution).count() as f64 / n,
        );
        m.insert(
            "failed_env_share".into(),
            envs.iter().filter(|e| e.failed.is_some()).count() as f64 / n,
        );
    }
    vendi(lp, m);
    Ok(())
}

/// Vendi over the window's embeddings: `draws` subsamples of `subsample` environments (all of
/// them when fewer), mean and s.d. of the score and of score / n.
fn vendi(lp: &Loop<'_>, m: &mut BTreeMap<String, f64>) {
    let c = &lp.cfg.metrics;
    let vecs: Vec<Vec<f64>> = lp
        .state
        .embeddings
        .iter()
        .map(|e| e.vector.iter().map(|&x| f64::from(x)).collect())
        .collect();
    if vecs.len() < 2 {
        return;
    }
    let k = c.vendi_subsample.min(vecs.len());
    let draws = if k == vecs.len() {
        1
    } else {
        c.vendi_draws.max(1)
    };
    let mut scores = Vec::new();
    for d in 0..draws {
        let mut idx: Vec<usize> = (0..vecs.len()).collect();
        // Partial Fisher-Yates with derived seeds.
        for i in 0..k {
            let r = seeds::derive(
                lp.cfg.run.seed,
                &[seeds::tag::VENDI, lp.state.step, d as u64, i as u64],
            );
            let j = i + (r as usize) % (idx.len() - i);
            idx.swap(i, j);
        }
        let sub: Vec<Vec<f64>> = idx[..k].iter().map(|&i| vecs[i].clone()).collect();
        scores.push(interim::vendi(&interim::cosine_kernel(&sub)));
    }
    let n = scores.len() as f64;
    let mean = scores.iter().sum::<f64>() / n;
    let sd = (scores.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / n).sqrt();
    m.insert("vendi_mean".into(), mean);
    m.insert("vendi_sd".into(), sd);
    m.insert("vendi_per_n".into(), mean / k as f64);
}
