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
pub mod seeds;
pub mod skills;
pub mod spice;
pub mod suites;

/// The two families of environments (spec, "Environment contract"), defined with the other
/// shared enums in `spade-types`.
pub use spade_types::EnvKind;

/// A reproducible random stream for `(seed, stream...)`, e.g. `(run seed, step, slot,
/// attempt)`: the positional-seed scheme of [`seeds`] as a `rand` generator.
pub fn seeded_rng(seed: u64, stream: &[u64]) -> rand_chacha::ChaCha8Rng {
    seeds::rng(seed, stream)
}
