//! Enumerations stored as PostgreSQL enum types, shared by queries and the API's JSON. Their
//! spellings are the database's, so a value read back serializes exactly as it is stored.

use serde::{Deserialize, Serialize};

/// A member's role in a team (`team_role`). Ordered: `Viewer < Editor < Owner`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, sqlx::Type,
)]
#[sqlx(type_name = "team_role", rename_all = "lowercase")]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, sqlx::Type)]
#[sqlx(type_name = "run_status", rename_all = "lowercase")]
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
    /// Terminal states: nothing changes a run in them except `resume`.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Cancelled | RunStatus::Succeeded | RunStatus::Failed
        )
    }

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
}

/// What kind of environment the designer wrote (`env_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, sqlx::Type)]
#[sqlx(type_name = "env_kind", rename_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum EnvKind {
    /// A game the agent plays turn by turn.
    Game,
    /// A tool-use task (`ToolUseEnv`).
    ToolUse,
}

impl From<EnvKind> for spade::EnvKind {
    fn from(k: EnvKind) -> Self {
        match k {
            EnvKind::Game => spade::EnvKind::Game,
            EnvKind::ToolUse => spade::EnvKind::ToolUse,
        }
    }
}

impl From<spade::EnvKind> for EnvKind {
    fn from(k: spade::EnvKind) -> Self {
        match k {
            spade::EnvKind::Game => EnvKind::Game,
            spade::EnvKind::ToolUse => EnvKind::ToolUse,
        }
    }
}

/// Whether validation accepted an environment, and whether it kept to the contract in play
/// (`env_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, sqlx::Type)]
#[sqlx(type_name = "env_status", rename_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum EnvStatus {
    /// Passed every check; enters the pool.
    Accepted,
    /// Failed a check; kept for inspection with its reason.
    Rejected,
    /// Accepted, then broke the contract while played (the reason and the failing play's seed
    /// are in `rejection_reason` / `rejection_message`); played no more.
    #[sqlx(rename = "broken_in_play")]
    #[serde(rename = "broken_in_play")]
    BrokenInPlay,
}

impl From<EnvStatus> for spade::report::EnvStatus {
    fn from(s: EnvStatus) -> Self {
        use spade::report::EnvStatus as R;
        match s {
            EnvStatus::Accepted => R::Accepted,
            EnvStatus::Rejected => R::Rejected,
            EnvStatus::BrokenInPlay => R::BrokenInPlay,
        }
    }
}

impl From<spade::report::EnvStatus> for EnvStatus {
    fn from(s: spade::report::EnvStatus) -> Self {
        use spade::report::EnvStatus as R;
        match s {
            R::Accepted => EnvStatus::Accepted,
            R::Rejected => EnvStatus::Rejected,
            R::BrokenInPlay => EnvStatus::BrokenInPlay,
        }
    }
}

/// A member's review mark on an environment (`env_verdict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, sqlx::Type)]
#[sqlx(type_name = "env_verdict", rename_all = "snake_case")]
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
    /// The database's (and the API's) name.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Good => "good",
            Verdict::Broken => "broken",
            Verdict::RewardHackable => "reward_hackable",
        }
    }
}
