//! The SPADE algorithm as pure functions of their inputs and seeds: no I/O, no libtorch, no
//! CPython. Every reward and metric can therefore be tested with the numbers of
//! `shared/spade-spec.md`. The worker composes this crate with the sandbox and the policy.

pub mod reward;
