//! The enumerations that cross layers: the worker reports them, the database stores them as
//! PostgreSQL enum types, the API serializes them and the dashboard renders them. Each is defined
//! once here so that a value added in one place is a value everywhere (before, four crates kept
//! twins joined by `From` impls).
//!
//! The serde spelling is the database's, so a value read back serializes exactly as stored. The
//! `sqlx` feature adds the database derives; only `spade-db` enables it.

use serde::{Deserialize, Serialize};

/// A member's role in a team (`team_role`). Ordered: `Viewer < Editor < Owner`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type))]
#[cfg_attr(
    feature = "sqlx",
    sqlx(type_name = "team_role", rename_all = "lowercase")
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads everything of the team; changes nothing.
    Viewer,
    /// Creates, cancels, resumes and deletes runs and projects; shares runs.
    Editor,
    /// Everything an editor does, plus managing members.
    Owner,
}

impl Role {
    /// Whether this role may change state (anything beyond reading).
    pub fn can_edit(self) -> bool {
        self >= Role::Editor
    }
}

/// Lifecycle of a run (`run_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type))]
#[cfg_attr(
    feature = "sqlx",
    sqlx(type_name = "run_status", rename_all = "lowercase")
)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Waiting for the scheduler.
    Queued,
    /// Claimed; the job is being started.
    Starting,
    /// The worker reported that it started.
    Running,
    /// A user asked to stop; the worker stops at the next step boundary.
    Cancelling,
    /// Stopped on request.
    Cancelled,
    /// Finished every step.
    Succeeded,
    /// Stopped by an error.
    Failed,
}

impl RunStatus {
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Queued,
        RunStatus::Starting,
        RunStatus::Running,
        RunStatus::Cancelling,
        RunStatus::Cancelled,
        RunStatus::Succeeded,
        RunStatus::Failed,
    ];

    /// The database spelling (also the JSON one).
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Starting => "starting",
            RunStatus::Running => "running",
            RunStatus::Cancelling => "cancelling",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// Terminal states: nothing changes a run in them except `resume`.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Cancelled | RunStatus::Succeeded | RunStatus::Failed
        )
    }

    /// Whether the run can still change (cancel applies).
    pub fn is_active(self) -> bool {
        !self.is_terminal()
    }

    /// Whether a resume makes sense (it stopped before finishing).
    pub fn is_resumable(self) -> bool {
        matches!(self, RunStatus::Cancelled | RunStatus::Failed)
    }
}

/// The two families of environments (spec, "Environment contract"; `env_kind`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type))]
#[cfg_attr(
    feature = "sqlx",
    sqlx(type_name = "env_kind", rename_all = "snake_case")
)]
#[serde(rename_all = "snake_case")]
pub enum EnvKind {
    /// Text games: `reset`/`step`/`solution`, actions in `\boxed{}`.
    #[default]
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

/// Whether validation accepted an environment, and whether it kept to the contract in play
/// (`env_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type))]
#[cfg_attr(
    feature = "sqlx",
    sqlx(type_name = "env_status", rename_all = "snake_case")
)]
#[serde(rename_all = "snake_case")]
pub enum EnvStatus {
    /// Passed every check; enters the pool.
    Accepted,
    /// Failed a check; kept for inspection with its reason.
    Rejected,
    /// Accepted, then broke the contract while played (the reason and the failing play's seed
    /// are in `rejection_reason` / `rejection_message`); played no more.
    BrokenInPlay,
}

/// A member's review mark on an environment (`env_verdict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type))]
#[cfg_attr(
    feature = "sqlx",
    sqlx(type_name = "env_verdict", rename_all = "snake_case")
)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Worth keeping: plays as intended.
    Good,
    /// Does not work as its description says (a wrong checker, an unsolvable instance).
    Broken,
    /// Can be won without doing the task (a reward that a trick or a format hack earns).
    RewardHackable,
}

impl Verdict {
    pub const ALL: [Verdict; 3] = [Verdict::Good, Verdict::Broken, Verdict::RewardHackable];

    /// `good`, `broken` or `reward_hackable`: the database's and the API's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Good => "good",
            Verdict::Broken => "broken",
            Verdict::RewardHackable => "reward_hackable",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

/// A device as `model.device` names it: `auto`, `cpu`, `cuda` (the first GPU the job is
/// given) or `cuda:N`. One parser for the configuration's check, the scheduler's GPU count and
/// the worker's resolution, so the three never disagree on what a name means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceName {
    /// The first GPU when libtorch sees one, else the CPU.
    Auto,
    Cpu,
    /// An index into the GPUs the job is given.
    Cuda(u32),
}

impl DeviceName {
    /// What a device name may be, for error messages.
    pub const EXPECTED: &'static str = "auto, cpu, cuda or cuda:N";

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "auto" => Some(Self::Auto),
            "cpu" => Some(Self::Cpu),
            "cuda" => Some(Self::Cuda(0)),
            other => other
                .strip_prefix("cuda:")
                .filter(|i| !i.starts_with('+'))
                .and_then(|i| i.parse().ok())
                .map(Self::Cuda),
        }
    }

    /// GPUs a job must be given for this name: `cuda:N` indexes the job's devices, so N + 1.
    pub fn gpus_needed(self) -> u32 {
        match self {
            Self::Cuda(i) => i.saturating_add(1),
            Self::Auto | Self::Cpu => 0,
        }
    }
}

/// The GPU index of a `/dev` entry named `nvidiaN` (not `nvidiactl`, `nvidia-uvm`, ...): how
/// the scheduler and `spade doctor` find a node's GPUs without a driver library.
pub fn nvidia_device_index(file_name: &str) -> Option<u32> {
    file_name
        .strip_prefix("nvidia")
        .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|d| d.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_parse_to_the_gpus_a_job_needs() {
        let needed = |n: &str| DeviceName::parse(n).map(DeviceName::gpus_needed);
        assert_eq!(needed("auto"), Some(0));
        assert_eq!(needed("cpu"), Some(0));
        assert_eq!(needed("cuda"), Some(1));
        assert_eq!(needed("cuda:3"), Some(4));
        assert_eq!(needed("cuda:4294967295"), Some(u32::MAX));
        for bad in [
            "gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:+1", "CUDA", "cuda:1 ",
        ] {
            assert_eq!(DeviceName::parse(bad), None, "{bad}");
        }
        assert_eq!(nvidia_device_index("nvidia12"), Some(12));
        for other in ["nvidiactl", "nvidia-uvm", "nvidia", "nvidia-caps", "nvme0"] {
            assert_eq!(nvidia_device_index(other), None, "{other}");
        }
    }

    fn json<T: Serialize>(v: &T) -> String {
        serde_json::to_string(v).expect("an enum serializes")
    }

    /// The serde names are the database's enum labels and the `as_str` names: a rename on one
    /// side only would store one spelling and print another.
    #[test]
    fn every_value_serializes_as_its_stored_name() {
        for s in RunStatus::ALL {
            assert_eq!(json(&s), format!("\"{}\"", s.as_str()));
            assert_eq!(RunStatus::parse(s.as_str()), Some(s));
        }
        for v in Verdict::ALL {
            assert_eq!(json(&v), format!("\"{}\"", v.as_str()));
            assert_eq!(Verdict::parse(v.as_str()), Some(v));
        }
        for k in [EnvKind::Game, EnvKind::ToolUse] {
            assert_eq!(json(&k), format!("\"{}\"", k.as_str()));
        }
        assert_eq!(json(&EnvStatus::BrokenInPlay), "\"broken_in_play\"");
        assert_eq!(json(&Role::Owner), "\"owner\"");
        assert!(Role::Editor.can_edit() && !Role::Viewer.can_edit());
    }
}
