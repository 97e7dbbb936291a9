//! RLVE's verifiable environments (the `rlve-gym` package, 400 of them) as sandboxed games.
//!
//! The adapter, `envs/python/spade_rlve.py`, is one game-contract class (`RlveEnv`) that runs
//! one RLVE environment at one difficulty; [`source`] gives the text a runner loads for an
//! identifier and a difficulty. An RLVE reply is scored whole: its scorer reads the last
//! `<answer>...</answer>`, so a caller steps the reply itself, not a `\boxed{}` taken from it.

use crate::protocol::EnvKind;
use crate::runner::{Runner, SandboxError};
use std::time::Duration;

/// The adapter's source; [`source`] puts the identifier and difficulty in front of it.
pub const ADAPTER: &str = include_str!("../../../envs/python/spade_rlve.py");

/// The contract the adapter follows: one reply, reset/step/solution, a win is reward 1.0.
pub const KIND: EnvKind = EnvKind::Game;

/// Where an answer goes: RLVE's two marker modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Markers {
    /// `<answer>...</answer>` in the whole reply; `solution()` is the marked reference.
    Answer,
    /// The reply's last `\boxed{...}`, as our games take it (the training loop's agents answer
    /// so); `solution()` is the bare reference.
    Boxed,
}

/// One RLVE problem source: the environment `identifier` (a key of RLVE's
/// `identifier2environment`) at `difficulty` (the number of `update()`s of its parameter
/// controller; 0 is the controller's initial parameter), answers in `<answer>` markers.
pub fn source(identifier: &str, difficulty: u32) -> String {
    source_with(identifier, difficulty, Markers::Answer)
}

/// [`source`] with the answer markers chosen.
pub fn source_with(identifier: &str, difficulty: u32, markers: Markers) -> String {
    // A JSON string is a Python string literal with the same value (serde_json escapes only
    // ", \ and control characters, all as Python reads them), so no identifier can break out.
    let literal = serde_json::Value::String(identifier.to_owned()).to_string();
    let markers = match markers {
        Markers::Answer => "answer",
        Markers::Boxed => "boxed",
    };
    format!(
        "RLVE_IDENTIFIER = {literal}\nRLVE_DIFFICULTY = {difficulty}\n\
         RLVE_MARKERS = \"{markers}\"\n{ADAPTER}"
    )
}

/// Every environment identifier of the installed package, asked of a runner (the package is
/// Python; its list is whatever version the venv holds).
pub fn identifiers(runner: &mut Runner, limit: Duration) -> Result<Vec<String>, SandboxError> {
    let code = format!(
        "{}\nRLVE_IDS = json.dumps(rlve_identifiers())\n",
        source("", 0)
    );
    let text = runner.exec(&code, "RLVE_IDS", limit)?;
    serde_json::from_str(&text).map_err(|e| {
        SandboxError::Env(crate::protocol::EnvError {
            kind: crate::protocol::EnvErrorKind::Contract,
            message: format!("the identifier list is not a JSON list of strings: {e}"),
        })
    })
}
