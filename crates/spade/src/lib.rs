//! The SPADE algorithm as pure functions of their inputs and seeds: no I/O, no libtorch, no
//! CPython. Every reward and metric can therefore be tested with the numbers of
//! `shared/spade-spec.md`. The worker composes this crate with the sandbox and the policy.

use serde::{Deserialize, Serialize};

pub mod config;
pub mod report;
pub mod reward;
pub mod skills;

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
