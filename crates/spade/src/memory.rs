//! The memory of past environments (spec, "One training step", steps 2 and 9): the last 200
//! scored environments (code excerpt up to 2,000 characters, win rate, regret, skill), from
//! which each designer prompt draws 2 positive examples (sampled from the top max(3n, 10) by
//! regret among environments with a win rate in [0.15, 0.85], n = 2 the positives asked for)
//! and 1 negative (win rate above 0.9 or below 0.1). Positives show the designer what "at the
//! edge of the agent's ability" looks like; the negative shows what to avoid. The memory is
//! what gives difficulty continuity between regenerations.
//!
//! Examples are drawn from records of the slot's skill, as the reference does
//! (`spade/core/env_memory.py`: `high_regret_seeds(skill=...)`, `low_quality_examples(skill=...)`);
//! `memory.match_by = "kind"` draws from every record of the same kind (games or tool use)
//! instead. The memory persists with the run as JSON ([`Memory::to_json`] /
//! [`Memory::from_json`]); the caller writes and reads the file.

use crate::EnvKind;
use crate::config::{MemoryMatch, MemorySection};
use rand::Rng;
use rand::seq::IndexedRandom;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// One remembered environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryRecord {
    pub env_id: String,
    pub step: u64,
    pub skill: String,
    pub kind: EnvKind,
    /// The environment's code, cut to `code_chars` characters.
    pub code: String,
    /// No-hint win rate over its window.
    pub win_rate: f64,
    pub regret: f64,
}

/// The examples chosen for one designer prompt.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Examples<'a> {
    pub positives: Vec<&'a MemoryRecord>,
    pub negatives: Vec<&'a MemoryRecord>,
}

impl Examples<'_> {
    /// The environment the designer is most likely to derive from (reported as
    /// `parent_env_id`): the first positive.
    pub fn parent_env_id(&self) -> Option<&str> {
        self.positives.first().map(|r| r.env_id.as_str())
    }
}

/// Why persisted memory could not be restored.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The JSON does not describe a memory.
    #[error("memory file is not valid: {0}")]
    Json(#[from] serde_json::Error),
}

/// The last `capacity` records, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    pub capacity: usize,
    pub code_chars: usize,
    records: VecDeque<MemoryRecord>,
}

impl Memory {
    /// An empty memory (spec 9: capacity 200, code excerpts of 2,000 characters).
    pub fn new(capacity: usize, code_chars: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            code_chars,
            records: VecDeque::new(),
        }
    }

    pub fn from_config(cfg: &MemorySection) -> Self {
        Self::new(cfg.capacity, cfg.code_chars)
    }

    /// Adds a record (its code cut to `code_chars` characters), dropping the oldest beyond
    /// capacity.
    pub fn push(&mut self, mut record: MemoryRecord) {
        if let Some((cut, _)) = record.code.char_indices().nth(self.code_chars) {
            record.code.truncate(cut);
        }
        self.records.push_back(record);
        while self.records.len() > self.capacity {
            self.records.pop_front();
        }
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Oldest first.
    pub fn records(&self) -> impl Iterator<Item = &MemoryRecord> {
        self.records.iter()
    }

    /// Draws the examples for one designer prompt of `kind` and `skill`, by the spec's rule
    /// with the thresholds of `cfg`, from the records of that skill (or, with
    /// `match_by = "kind"`, of that kind). Fewer are returned when the memory has too few
    /// eligible records (none at the start of a run).
    pub fn examples<R: Rng + ?Sized>(
        &self,
        cfg: &MemorySection,
        kind: EnvKind,
        skill: &str,
        rng: &mut R,
    ) -> Examples<'_> {
        let by_skill = cfg.match_by == MemoryMatch::Skill;
        let same_kind = || {
            self.records
                .iter()
                .filter(move |r| r.kind == kind && (!by_skill || r.skill == skill))
        };
        let mut eligible: Vec<&MemoryRecord> = same_kind()
            .filter(|r| {
                r.win_rate >= cfg.positive_win_rate_low && r.win_rate <= cfg.positive_win_rate_high
            })
            .collect();
        // Highest regret first; newer first among equals, so ties favour recent environments.
        eligible.sort_by(|a, b| b.regret.total_cmp(&a.regret).then(b.step.cmp(&a.step)));
        let pool = (cfg.positive_pool_factor * cfg.positives).max(cfg.positive_pool_min);
        eligible.truncate(pool);
        let negatives: Vec<&MemoryRecord> = same_kind()
            .filter(|r| r.win_rate < cfg.negative_below || r.win_rate > cfg.negative_above)
            .collect();
        Examples {
            positives: eligible
                .choose_multiple(rng, cfg.positives)
                .copied()
                .collect(),
            negatives: negatives
                .choose_multiple(rng, cfg.negatives)
                .copied()
                .collect(),
        }
    }

    /// JSON for persisting with the run.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Restores a memory written by [`Memory::to_json`].
    pub fn from_json(text: &str) -> Result<Self, MemoryError> {
        let mut m: Memory = serde_json::from_str(text)?;
        m.capacity = m.capacity.max(1);
        while m.records.len() > m.capacity {
            m.records.pop_front();
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPT: &str = "Optimization";

    fn rec(i: u64, kind: EnvKind, win_rate: f64, regret: f64) -> MemoryRecord {
        MemoryRecord {
            env_id: format!("e{i}"),
            step: i,
            skill: "Optimization".into(),
            kind,
            code: format!("class E{i}Env: pass"),
            win_rate,
            regret,
        }
    }

    #[test]
    fn keeps_the_last_records_and_cuts_code_by_characters() {
        let mut m = Memory::new(200, 2000);
        for i in 0..250 {
            m.push(rec(i, EnvKind::Game, 0.5, 0.1));
        }
        assert_eq!(m.len(), 200, "spec: the last 200 records");
        assert_eq!(m.records().next().map(|r| r.step), Some(50));
        let mut small = Memory::new(2, 3);
        small.push(MemoryRecord {
            code: "αβγδ".into(),
            ..rec(1, EnvKind::Game, 0.5, 0.0)
        });
        assert_eq!(small.records().next().map(|r| r.code.as_str()), Some("αβγ"));
    }

    #[test]
    fn positives_come_from_the_top_by_regret_in_the_learnable_band() {
        let cfg = MemorySection::default();
        let mut m = Memory::new(200, 2000);
        // 30 eligible records with regrets 0..29; only the top max(3*2, 10) = 10 may be drawn.
        for i in 0..30 {
            m.push(rec(i, EnvKind::Game, 0.5, i as f64 / 100.0));
        }
        m.push(rec(100, EnvKind::Game, 0.95, 0.9)); // too easy: never positive, a negative
        m.push(rec(101, EnvKind::Game, 0.05, 0.9)); // too hard: a negative
        m.push(rec(102, EnvKind::ToolUse, 0.5, 0.99)); // other kind
        for seed in 0..200 {
            let ex = m.examples(&cfg, EnvKind::Game, OPT, &mut crate::seeded_rng(seed, &[]));
            assert_eq!(ex.positives.len(), 2);
            assert_ne!(ex.positives[0].env_id, ex.positives[1].env_id);
            for p in &ex.positives {
                assert!(
                    p.step >= 20 && p.step < 30,
                    "{} is not in the top 10",
                    p.env_id
                );
            }
            assert_eq!(ex.negatives.len(), 1);
            assert!(["e100", "e101"].contains(&ex.negatives[0].env_id.as_str()));
        }
        let ex = m.examples(&cfg, EnvKind::ToolUse, OPT, &mut crate::seeded_rng(0, &[]));
        assert_eq!(ex.parent_env_id(), Some("e102"));
        assert!(ex.negatives.is_empty());
        assert_eq!(
            Memory::new(5, 5).examples(&cfg, EnvKind::Game, OPT, &mut crate::seeded_rng(0, &[])),
            Examples::default()
        );
    }

    #[test]
    fn examples_come_from_the_slots_skill_unless_matched_by_kind() {
        // env_memory.py: high_regret_seeds(skill=...) and low_quality_examples(skill=...).
        let mut m = Memory::new(200, 2000);
        let with_skill = |r: MemoryRecord, skill: &str| MemoryRecord {
            skill: skill.into(),
            ..r
        };
        // One learnable and one too-easy record of each of two skills; the logic ones have the
        // higher regret, so a kind-wide draw of the single positive could pick either.
        m.push(with_skill(rec(1, EnvKind::Game, 0.5, 0.1), OPT));
        m.push(with_skill(rec(2, EnvKind::Game, 0.95, 0.0), OPT));
        m.push(with_skill(
            rec(3, EnvKind::Game, 0.5, 0.9),
            "Logical Deduction",
        ));
        m.push(with_skill(
            rec(4, EnvKind::Game, 0.05, 0.0),
            "Logical Deduction",
        ));
        let cfg = MemorySection {
            positives: 1,
            ..MemorySection::default()
        };
        for seed in 0..50 {
            let ex = m.examples(&cfg, EnvKind::Game, OPT, &mut crate::seeded_rng(seed, &[]));
            assert_eq!(ex.parent_env_id(), Some("e1"), "only Optimization records");
            assert_eq!(ex.negatives.len(), 1);
            assert_eq!(ex.negatives[0].env_id, "e2");
        }
        let kind = MemorySection {
            match_by: MemoryMatch::Kind,
            ..cfg
        };
        let mut seen: Vec<&str> = (0..50)
            .flat_map(|seed| {
                let ex = m.examples(&kind, EnvKind::Game, OPT, &mut crate::seeded_rng(seed, &[]));
                ex.negatives.into_iter().map(|r| r.env_id.as_str())
            })
            .collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen, ["e2", "e4"], "by kind: negatives of both skills");
    }

    #[test]
    fn persists_as_json() {
        let mut m = Memory::new(3, 100);
        for i in 0..4 {
            m.push(rec(i, EnvKind::ToolUse, 0.2, -0.1));
        }
        let back = Memory::from_json(&m.to_json()).expect("round trip");
        assert_eq!(back, m);
        let err = Memory::from_json("{\"capacity\": 3}").expect_err("incomplete");
        assert!(err.to_string().contains("missing field"), "{err}");
    }

    proptest::proptest! {
        #[test]
        fn persisted_numbers_read_back_bit_identical(w in 0.0f64..=1.0, r in -1.0f64..=1.0) {
            let mut m = Memory::new(4, 50);
            m.push(rec(0, EnvKind::Game, w, r));
            let back = Memory::from_json(&m.to_json()).expect("round trip");
            proptest::prop_assert_eq!(back, m);
        }
    }
}
