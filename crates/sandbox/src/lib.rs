//! The parent side of the sandbox: the protocol spoken with `spade-sandbox-runner` processes
//! and a handle that starts one runner, talks to it and kills it. Generated environment code
//! never runs in the caller's process: only the runner (which alone embeds CPython) executes
//! it. Isolation layers, the pool and validation arrive with the sandbox milestone.

pub mod protocol;
pub mod runner;

pub use protocol::{PROTOCOL_VERSION, Request, Response};
pub use runner::{Runner, SandboxError};
