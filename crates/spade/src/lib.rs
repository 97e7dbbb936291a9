//! The SPADE algorithm as pure functions of their inputs and seeds: no I/O, no libtorch, no
//! CPython. Every reward and metric can therefore be tested with the numbers of
//! `shared/spade-spec.md`. The worker composes this crate with the sandbox and the policy.
//!
//! Map: [`config`] (the run configuration), [`skills`], [`corpus`], [`memory`] and [`prompt`]
//! (what the designer reads), [`parse`] (what the policy wrote), [`reward`] (returns,
//! advantages, designer rewards), [`metrics`] (including the Vendi score), [`report`] (the
//! messages the worker sends to the service), [`pool`] (the environment pool format),
//! [`rlve`] (RLVE's adaptive difficulty per environment), [`seeded_rng`] (reproducible
//! randomness), [`spice`] (SPICE's task format, answer check, rewards and DrGRPO advantages).

use serde::{Deserialize, Serialize};

pub mod config;
pub mod corpus;
pub mod memory;
pub mod metrics;
pub mod parse;
pub mod pool;
pub mod prompt;
pub mod report;
pub mod reward;
pub mod rlve;
pub mod skills;
pub mod spice;
pub mod suites;

/// The two families of environments (spec, "Environment contract").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvKind {
    /// Text games: `reset`/`step`/`solution`, actions in `\boxed{}`.
    Game,
    /// Tool use: tools backed by `tool_<name>` methods, `<tool_call>` and `<answer>done</answer>`.
    ToolUse,
}

impl EnvKind {
    /// `"game"` or `"tool_use"`, as in JSON and TOML.
    pub fn as_str(self) -> &'static str {
        match self {
            EnvKind::Game => "game",
            EnvKind::ToolUse => "tool_use",
        }
    }
}

/// A reproducible random stream for `(seed, stream...)`, e.g. `(run seed, step, slot,
/// attempt)`: every random choice of a run derives from its seed and the choice's coordinates,
/// so a resumed run repeats exactly the choices it would have made, with no generator state
/// to save. (ChaCha8 is stable across `rand` versions; the mixing is SplitMix64.)
pub fn seeded_rng(seed: u64, stream: &[u64]) -> rand_chacha::ChaCha8Rng {
    use rand::SeedableRng;
    let mut state = splitmix64(seed ^ 0x5350_4144_4500_0000); // "SPADE"
    for &part in stream {
        state = splitmix64(state ^ part);
    }
    rand_chacha::ChaCha8Rng::seed_from_u64(state)
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
