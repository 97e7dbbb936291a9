//! Plain data the pages render, as the backend's API returns it. Pages take these structs and
//! nothing else, so every page renders the same from a server function, a test, or the JSON
//! API. Times are RFC 3339 strings (the browser bundle carries no date library).

use crate::charts::{Point, Series};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The signed-in user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserDto {
    pub id: i64,
    pub email: String,
    pub display_name: String,
}

/// An account as the JSON API returns it (register, `/auth/me`); never the password hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRecord {
    pub id: i64,
    pub email: String,
    pub display_name: String,
    /// The studio's administrator (the first account registered).
    pub is_admin: bool,
    pub created_at: String,
}

/// A saved chart view: named chart settings of one person, offered on every run and compare
/// page (`GET /chart-views`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChartViewRecord {
    pub id: i64,
    pub name: String,
    /// EMA weight, 0 to 0.99.
    pub smoothing: f64,
    /// `step` or `time`.
    pub x_axis: String,
    pub log_y: bool,
    /// Text the chart titles must contain ("Find a chart"); empty: all charts.
    pub find: String,
    pub created_at: String,
}

impl ChartViewRecord {
    /// The view as query parameters of a chart page (`smooth`, `x`, `log`, `find`; defaults
    /// left out), to append to the page's own.
    pub fn query_pairs(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        if self.smoothing > 0.0 {
            q.push(("smooth", format!("{:.2}", self.smoothing)));
        }
        if self.x_axis == "time" {
            q.push(("x", "time".to_owned()));
        }
        if self.log_y {
            q.push(("log", "1".to_owned()));
        }
        if !self.find.is_empty() {
            q.push(("find", self.find.clone()));
        }
        q
    }
}

/// A live login session of the signed-in person (`GET /auth/sessions`, the account page).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub id: i64,
    pub created_at: String,
    /// Its last token refresh (every 15 minutes while a page is open), or its start.
    pub last_active_at: String,
    pub expires_at: String,
    /// The browser or client that logged in, as it named itself.
    pub user_agent: Option<String>,
    /// The session this request came with.
    pub current: bool,
}

impl From<UserRecord> for UserDto {
    /// What a page shows of an account: the API's record without the administrator flag and
    /// the creation time.
    fn from(u: UserRecord) -> Self {
        UserDto {
            id: u.id,
            email: u.email,
            display_name: u.display_name,
        }
    }
}

/// Who is looking at the page: the user and the CSRF token that the page's POST forms carry
/// (the backend turns the form field into the header its API checks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Viewer {
    pub user: UserDto,
    pub csrf: String,
}

/// Lifecycle of a run, environment kind and status: the enums every layer shares, defined once
/// in `spade-types` (the database stores the same values, the API serializes them).
pub use spade_types::{EnvKind, EnvStatus, RunStatus};

/// A row of the runs list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub id: i64,
    pub name: String,
    pub project: String,
    pub status: RunStatus,
    pub step: u64,
    pub total_steps: u64,
    pub created_at: String,
    /// Latest value of a few headline metrics (e.g. `learnable_share`, `regret_mean`).
    pub key_metrics: BTreeMap<String, f64>,
    /// Why the run has produced nothing usable so far, if it has not ([`RunWarning::of`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<RunWarning>,
    /// What the team tagged the run with.
    #[serde(default)]
    pub tags: Vec<String>,
    /// What a queued run's claimed job waits for ("waiting for 2 GPUs (0 of this node's 4
    /// free)"), from the scheduler; None once it started, or when it waits for nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}

/// One metric series of a run, totalled over its steps: what [`RunWarning::of`] reads.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesTotal {
    pub name: String,
    pub sum: f64,
    pub max: f64,
    /// Steps that logged it.
    pub steps: i64,
}

/// A run that produced nothing usable: no environment accepted, or no win. The status stays
/// what the worker reported (a run can succeed and still produce nothing); this says so beside
/// it, on the run's page and in the runs list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunWarning {
    /// A few words for the runs list: `no environment accepted`, `no win`, or both.
    pub label: String,
    /// The whole explanation, with the counts behind it.
    pub detail: String,
}

impl RunWarning {
    /// From the run's totals of `accepted`, `rejected`, `rejections/<reason>` and
    /// `win_rate/<skill>` (other series are ignored): a warning when the designer wrote
    /// environments and none was accepted, or when environments were played and the agent never
    /// won one without a hint. None before the first step's metrics, and for runs that are fine.
    pub fn of(totals: &[SeriesTotal]) -> Option<Self> {
        let get = |n: &str| totals.iter().find(|t| t.name == n);
        let (mut labels, mut detail) = (vec![], vec![]);
        if let Some(accepted) = get("accepted").filter(|a| a.sum == 0.0) {
            let rejected = get("rejected").map_or(0.0, |r| r.sum);
            let mut reasons: Vec<(&str, f64)> = totals
                .iter()
                .filter_map(|t| Some((t.name.strip_prefix("rejections/")?, t.sum)))
                .filter(|(_, n)| *n > 0.0)
                .collect();
            reasons.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
            let why = if reasons.is_empty() {
                String::new()
            } else {
                let list: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
                format!(" ({})", list.join(", "))
            };
            labels.push("no environment accepted");
            detail.push(format!(
                "No environment was accepted in {} step{}: all {rejected} environments the \
                 designer wrote were rejected{why}, so nothing was trained on or added to the pool.",
                accepted.steps,
                plural(accepted.steps),
            ));
        }
        let wins: Vec<&SeriesTotal> = totals
            .iter()
            .filter(|t| t.name.starts_with("win_rate/"))
            .collect();
        if !wins.is_empty() && wins.iter().all(|t| t.max == 0.0) {
            let steps = wins.iter().map(|t| t.steps).max().unwrap_or(0);
            labels.push("no win");
            detail.push(format!(
                "The agent never won an environment without a hint in {steps} step{}: every \
                 no-hint win rate is 0, so GRPO had no success to learn from.",
                plural(steps)
            ));
        }
        (!labels.is_empty()).then(|| RunWarning {
            label: labels.join(", "),
            detail: detail.join(" "),
        })
    }
}

fn plural(n: i64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

impl RunSummary {
    /// The runs list's row of a run: its record with the project's name, the number of steps
    /// it will take (the backend reads it from the progress or the config) and the latest key
    /// metrics; the creation time to the whole second.
    pub fn of(
        r: &RunRecord,
        project: String,
        total_steps: u64,
        key_metrics: BTreeMap<String, f64>,
    ) -> Self {
        RunSummary {
            id: r.id,
            name: r.name.clone(),
            project,
            status: r.status,
            step: u64::try_from(r.progress_step).unwrap_or(0),
            total_steps,
            created_at: whole_seconds(&r.created_at),
            key_metrics,
            warning: None,
            tags: r.tags.clone(),
            waiting: r
                .status_message
                .as_ref()
                .filter(|m| {
                    matches!(r.status, RunStatus::Queued | RunStatus::Starting)
                        && m.starts_with("waiting for ")
                })
                .cloned(),
        }
    }

    /// Progress in [0, 1]; 0 when the total is unknown.
    pub fn progress(&self) -> f64 {
        if self.total_steps == 0 {
            0.0
        } else {
            (self.step as f64 / self.total_steps as f64).clamp(0.0, 1.0)
        }
    }
}

/// A run as the JSON API returns it (create, get, list, cancel, resume): the stored run with
/// every field its members may read (never the worker token's hash). Times are RFC 3339 with
/// the fraction of a second the database keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub id: i64,
    pub project_id: i64,
    pub name: String,
    /// The whole `spade::config::RunConfig`, every default filled in.
    pub config: serde_json::Value,
    pub status: RunStatus,
    /// `local` or `ray`.
    pub executor: String,
    pub seed: i64,
    pub code_version: String,
    pub progress_step: i64,
    pub progress_total: i64,
    pub phase: Option<String>,
    pub status_message: Option<String>,
    pub created_by: Option<i64>,
    pub created_at: String,
    pub updated_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// What the team tagged it with (`PATCH /runs/{id}`).
    #[serde(default)]
    pub tags: Vec<String>,
    /// The team's notes on it, free text.
    #[serde(default)]
    pub notes: String,
}

/// One point of a metric as the JSON API returns it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MetricPoint {
    pub step: i64,
    pub value: f64,
}

/// One metric of a run over a step range, downsampled, as the JSON API returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesRecord {
    pub name: String,
    /// Points stored in the requested range, before downsampling.
    pub total_points: usize,
    pub points: Vec<MetricPoint>,
}

/// A metric a run has logged: how many points, over which steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesSummary {
    pub name: String,
    pub points: i64,
    pub first_step: i64,
    pub last_step: i64,
    /// Counts up whenever points of the series are stored (new or re-logged): equal revisions
    /// mean equal series.
    pub revision: i64,
}

/// One log line of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    pub level: String,
    pub line: String,
}

/// Everything the run page shows besides charts and environments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunDetail {
    pub summary: RunSummary,
    pub config: serde_json::Value,
    pub executor: String,
    pub seed: i64,
    pub code_version: String,
    /// The worker's current phase ("designing", "playing", "training", ...).
    pub phase: Option<String>,
    /// The message of a finished run (why it failed, who cancelled it).
    pub message: Option<String>,
    /// For a queued run: its place in line and what it waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    pub log_tail: Vec<LogLine>,
    /// Whether the viewer may cancel or resume (editors and owners).
    pub can_control: bool,
    /// The team's notes on the run.
    #[serde(default)]
    pub notes: String,
    /// The run's team (0 where the viewer is not told, as through a share link): its tag links
    /// search that team's runs.
    #[serde(default)]
    pub team_id: i64,
}

impl RunDetail {
    /// The run page's header: its record's settings and state, an empty phase or message
    /// shown as none.
    pub fn of(
        r: RunRecord,
        summary: RunSummary,
        log_tail: Vec<LogLine>,
        can_control: bool,
    ) -> Self {
        RunDetail {
            summary,
            config: r.config,
            executor: r.executor,
            seed: r.seed,
            code_version: r.code_version,
            phase: r.phase.filter(|p| !p.is_empty()),
            message: r.status_message.filter(|m| !m.is_empty()),
            queue: None,
            log_tail,
            can_control,
            notes: r.notes,
            team_id: 0,
        }
    }
}

/// One metric of one run over time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricSeries {
    pub name: String,
    /// On the wire as three arrays (`{"step": [..], "time_s": [..], "value": [..]}`), not one
    /// object per point: a run page carries thousands of points for hydration, and the keys
    /// repeated per point were about a third of its HTML.
    #[serde(with = "point_columns")]
    pub points: Vec<Point>,
}

/// The columnar form of a series' points (see [`MetricSeries::points`]).
mod point_columns {
    use crate::charts::Point;
    use serde::{Deserialize, Deserializer, Serialize, Serializer, de::Error};

    #[derive(Serialize, Deserialize)]
    struct Columns {
        step: Vec<f64>,
        time_s: Vec<f64>,
        value: Vec<f64>,
    }

    pub fn serialize<S: Serializer>(points: &[Point], s: S) -> Result<S::Ok, S::Error> {
        Columns {
            step: points.iter().map(|p| p.step).collect(),
            time_s: points.iter().map(|p| p.time_s).collect(),
            value: points.iter().map(|p| p.value).collect(),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Point>, D::Error> {
        let c = Columns::deserialize(d)?;
        if c.step.len() != c.value.len() || c.time_s.len() != c.value.len() {
            return Err(D::Error::custom(format!(
                "points: step, time_s and value must have one entry per point \
                 (got {}, {} and {})",
                c.step.len(),
                c.time_s.len(),
                c.value.len()
            )));
        }
        Ok(c.step
            .into_iter()
            .zip(c.time_s)
            .zip(c.value)
            .map(|((step, time_s), value)| Point {
                step,
                time_s,
                value,
            })
            .collect())
    }
}

impl MetricSeries {
    /// The chart series, named `prefix` + metric name.
    pub fn to_series(&self, prefix: &str) -> Series {
        Series::line(format!("{prefix}{}", self.name), self.points.clone())
    }
}

/// A row of the environment browser.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvironmentSummary {
    pub env_id: String,
    pub run_id: i64,
    pub step: u64,
    pub skill: String,
    pub kind: EnvKind,
    pub status: EnvStatus,
    pub rejection_reason: Option<String>,
    pub regret: Option<f64>,
    pub win_rate_hint: Option<f64>,
    pub win_rate_no_hint: Option<f64>,
    /// The members' review verdicts (`good`, `broken`, `reward_hackable`), one per mark.
    #[serde(default)]
    pub verdicts: Vec<String>,
    /// A short title from the docstring (what the game is); may be empty.
    #[serde(default)]
    pub title: String,
    /// The skill the code's docstring names, when it differs from `skill` (what the designer
    /// was asked for); empty otherwise.
    #[serde(default)]
    pub code_skill: String,
}

impl EnvironmentSummary {
    /// The browser's row of an environment: its API record in run `run_id`, with the members'
    /// verdicts.
    pub fn of(e: &EnvRecord, run_id: i64, verdicts: Vec<String>) -> Self {
        EnvironmentSummary {
            env_id: e.env_id.clone(),
            run_id,
            step: u64::try_from(e.step).unwrap_or(0),
            skill: e.skill.clone(),
            kind: e.kind,
            status: e.status,
            rejection_reason: e.rejection_reason.clone(),
            regret: e.regret,
            win_rate_hint: e.win_rate_hint,
            win_rate_no_hint: e.win_rate_no_hint,
            verdicts,
            title: e.title.clone(),
            code_skill: if e.code_skill.trim().eq_ignore_ascii_case(e.skill.trim()) {
                String::new()
            } else {
                e.code_skill.clone()
            },
        }
    }
}

/// An environment as the JSON API lists it: the stored summary row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvRecord {
    /// The row id (stable; the list's cursors and review marks refer to it).
    pub id: i64,
    pub env_id: String,
    pub step: i64,
    /// The skill the designer was asked for.
    pub skill: String,
    pub kind: EnvKind,
    pub status: EnvStatus,
    pub rejection_reason: Option<String>,
    pub parent_env_id: Option<String>,
    pub regret: Option<f64>,
    pub win_rate_hint: Option<f64>,
    pub win_rate_no_hint: Option<f64>,
    pub designer_reward: Option<f64>,
    pub reward_levels: Option<i32>,
    /// A short title from the docstring (what the game is); may be empty.
    pub title: String,
    /// The skill the code's docstring names (`Skill: ...`); `skill` is what the designer was
    /// asked for, and the two differ when the model wrote another game than asked. Empty when
    /// the docstring names none.
    #[serde(default)]
    pub code_skill: String,
}

/// A sampled play as the JSON API returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlayRecord {
    pub id: i64,
    pub env_id: String,
    pub step: i64,
    pub with_hint: bool,
    pub episode_return: f64,
    pub won: bool,
    pub turns: i32,
    /// `[{role, content}, ...]` as the worker sent it.
    pub transcript: serde_json::Value,
}

/// One environment as the JSON API returns it: the summary's fields, its code and hint, a
/// sample of plays, the environment it was derived from (when that is in the run) and the
/// team's review marks, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvRecordDetail {
    #[serde(flatten)]
    pub summary: EnvRecord,
    pub rejection_message: Option<String>,
    pub code: String,
    pub hint: Option<String>,
    pub attempts: i32,
    pub created_at: String,
    pub plays: Vec<PlayRecord>,
    pub parent: Option<EnvRecord>,
    pub reviews: Vec<ReviewDto>,
}

/// One turn of a played transcript.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnDto {
    pub role: String,
    pub content: String,
}

/// One sampled play of an environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlayDto {
    pub with_hint: bool,
    pub episode_return: f64,
    pub won: bool,
    pub turns: u32,
    pub transcript: Vec<TurnDto>,
}

impl From<PlayRecord> for PlayDto {
    fn from(p: PlayRecord) -> Self {
        PlayDto {
            with_hint: p.with_hint,
            episode_return: p.episode_return,
            won: p.won,
            turns: u32::try_from(p.turns).unwrap_or(0),
            // Stored as the worker sent it, [{role, content}, ...]; anything else shows no turns.
            transcript: serde_json::from_value(p.transcript).unwrap_or_default(),
        }
    }
}

/// The memory environment an environment was derived from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentEnvironment {
    pub env_id: String,
    pub code: String,
}

/// The environment page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvironmentDetail {
    pub summary: EnvironmentSummary,
    pub run_name: String,
    pub code: String,
    pub hint: Option<String>,
    pub rejection_message: Option<String>,
    pub designer_reward: Option<f64>,
    pub reward_levels: Option<u32>,
    pub attempts: u32,
    pub parent: Option<ParentEnvironment>,
    pub plays: Vec<PlayDto>,
    /// Members' review marks, oldest first.
    #[serde(default)]
    pub reviews: Vec<ReviewDto>,
    /// The viewer may mark it (editors and owners).
    #[serde(default)]
    pub can_review: bool,
}

impl EnvironmentDetail {
    /// The environment page: the API's record of environment `d` in run `run_id` (called
    /// `run_name`), with its parent's code for the diff (the API lists the parent without it)
    /// and whether the viewer may review; times to the whole second.
    pub fn of(
        d: EnvRecordDetail,
        run_id: i64,
        run_name: String,
        parent_code: Option<String>,
        can_review: bool,
    ) -> Self {
        EnvironmentDetail {
            summary: EnvironmentSummary::of(&d.summary, run_id, Vec::new()),
            run_name,
            code: d.code,
            hint: d.hint,
            rejection_message: d.rejection_message,
            designer_reward: d.summary.designer_reward,
            reward_levels: d.summary.reward_levels.and_then(|v| u32::try_from(v).ok()),
            attempts: u32::try_from(d.attempts).unwrap_or(0),
            parent: d
                .parent
                .zip(parent_code)
                .map(|(p, code)| ParentEnvironment {
                    env_id: p.env_id,
                    code,
                }),
            plays: d.plays.into_iter().map(PlayDto::from).collect(),
            reviews: d
                .reviews
                .into_iter()
                .map(|r| ReviewDto {
                    updated_at: whole_seconds(&r.updated_at),
                    ..r
                })
                .collect(),
            can_review,
        }
    }
}

/// One member's review mark on an environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewDto {
    pub reviewer: String,
    /// `good`, `broken` or `reward_hackable`.
    pub verdict: String,
    pub comment: String,
    pub updated_at: String,
}

/// A page of a longer list. Lists are paged by keyset cursors (stable while rows are added):
/// `next_cursor` goes into the next page's `cursor` parameter and is absent on the last page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

/// One benchmark score of a run's checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkRow {
    pub run_id: i64,
    pub run_name: String,
    pub checkpoint_step: Option<u64>,
    pub suite: String,
    pub task: String,
    pub score: f64,
    pub n: u32,
    pub stderr: Option<f64>,
    pub samples: u32,
}

impl BenchmarkRow {
    /// Run `run_id`'s benchmark result as the comparison tables show it.
    pub fn of(run_id: i64, run_name: &str, b: BenchmarkRecord) -> Self {
        BenchmarkRow {
            run_id,
            run_name: run_name.to_owned(),
            checkpoint_step: b.checkpoint_step.and_then(|s| u64::try_from(s).ok()),
            suite: b.suite,
            task: b.task,
            score: b.score,
            n: u32::try_from(b.n).unwrap_or(0),
            stderr: b.stderr,
            samples: u32::try_from(b.samples).unwrap_or(1),
        }
    }
}

/// An evaluation of a checkpoint (a `spade eval` job) and where its job is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluationDto {
    pub id: i64,
    pub checkpoint_step: u64,
    pub suite: String,
    /// Replies per question and their temperature.
    #[serde(default = "one_sample")]
    pub samples: i32,
    #[serde(default)]
    pub temperature: f64,
    /// `manual` or `auto`.
    pub trigger: String,
    /// The job's state: queued, claimed, running, cancelling, succeeded, failed, cancelled.
    pub state: String,
    pub message: Option<String>,
    pub created_at: String,
    pub finished_at: Option<String>,
}

fn one_sample() -> i32 {
    1
}

/// The run page's row of an evaluation: the API's record with times to the whole second.
impl From<EvaluationRecord> for EvaluationDto {
    fn from(e: EvaluationRecord) -> Self {
        EvaluationDto {
            id: e.id,
            checkpoint_step: u64::try_from(e.checkpoint_step).unwrap_or(0),
            suite: e.suite,
            samples: e.samples,
            temperature: e.temperature,
            trigger: e.trigger,
            state: e.state,
            message: e.message,
            created_at: whole_seconds(&e.created_at),
            finished_at: e.finished_at.as_deref().map(whole_seconds),
        }
    }
}

/// An RFC 3339 time as the pages show it, to the whole second: the API's records keep the
/// fraction (`2026-12-04T10:00:00.123456Z` -> `2026-12-04T10:00:00Z`).
pub fn whole_seconds(t: &str) -> String {
    match t.find('.') {
        Some(dot) => {
            let rest = &t[dot + 1..];
            let zone = rest
                .find(|c: char| !c.is_ascii_digit())
                .map_or("", |i| &rest[i..]);
            format!("{}{zone}", &t[..dot])
        }
        None => t.to_owned(),
    }
}

/// An evaluation as the JSON API returns it, with the state of its job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluationRecord {
    pub id: i64,
    pub run_id: i64,
    pub job_id: i64,
    pub checkpoint_step: i64,
    pub suite: String,
    pub item_limit: Option<i32>,
    pub max_new_tokens: i32,
    /// Replies per question (Avg@k for k > 1).
    pub samples: i32,
    /// Sampling temperature (0 is greedy).
    pub temperature: f64,
    /// `manual` or `auto`.
    pub trigger: String,
    /// The job's state: queued, claimed, running, cancelling, succeeded, failed, cancelled.
    pub state: String,
    /// Why the job ended (exit status, the executor's reason), when it did.
    pub message: Option<String>,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
}

/// A checkpoint a run's worker reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRecord {
    pub step: i64,
    pub path: String,
    pub bytes: i64,
    pub created_at: String,
}

/// One benchmark score of a run as the JSON API returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkRecord {
    pub id: i64,
    pub checkpoint_step: Option<i64>,
    pub suite: String,
    pub task: String,
    pub score: f64,
    pub n: i32,
    /// Standard error of `score` (null below two questions, and for older results).
    pub stderr: Option<f64>,
    /// Samples per question (`score` is Avg@k for k > 1).
    pub samples: i32,
    pub created_at: String,
}

/// A share link as the JSON API returns it to the run's members (never the token).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareRecord {
    pub id: i64,
    pub run_id: i64,
    pub created_by: Option<i64>,
    pub created_at: String,
    pub revoked_at: Option<String>,
    /// What the link was made for (may be empty).
    pub label: String,
    /// After this the link reads as unknown; `None` = until revoked.
    pub expires_at: Option<String>,
    /// Whether `expires_at` has passed, as the server saw it.
    #[serde(default)]
    pub expired: bool,
}

/// A share link just made: the only time its token is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedShare {
    #[serde(flatten)]
    pub link: ShareRecord,
    /// Shown once; only its hash is stored.
    pub token: String,
    /// Where the shared run is read.
    pub path: String,
}

/// A run's held-out results, its evaluations and what can be evaluated.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BenchmarksDto {
    pub rows: Vec<BenchmarkRow>,
    pub evaluations: Vec<EvaluationDto>,
    /// Steps of the run's checkpoints (0 = the model it started from).
    pub checkpoints: Vec<u64>,
    /// Whether the viewer may queue evaluations (editor or owner).
    pub can_evaluate: bool,
}

/// A team the user belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TeamDto {
    pub id: i64,
    pub name: String,
    /// The viewer's role: owner, editor or viewer.
    pub role: String,
}

/// A member of a team, with their role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberDto {
    pub user_id: i64,
    pub email: String,
    pub display_name: String,
    /// owner, editor or viewer.
    pub role: String,
}

/// A project of a team (a folder of runs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectDto {
    pub id: i64,
    pub name: String,
}

/// A team as the JSON API returns it: the caller's role in it and when it was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TeamRecord {
    pub id: i64,
    pub name: String,
    /// The caller's role: owner, editor or viewer.
    pub role: String,
    pub created_at: String,
}

impl From<TeamRecord> for TeamDto {
    fn from(t: TeamRecord) -> Self {
        TeamDto {
            id: t.id,
            name: t.name,
            role: t.role,
        }
    }
}

/// A project as the JSON API returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectRecord {
    pub id: i64,
    pub team_id: i64,
    pub name: String,
    pub created_at: String,
}

impl From<ProjectRecord> for ProjectDto {
    fn from(p: ProjectRecord) -> Self {
        ProjectDto {
            id: p.id,
            name: p.name,
        }
    }
}

/// A team as the teams page shows it: the viewer's role, its members and projects, and (for
/// owners) its open invitations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TeamDetail {
    pub team: TeamDto,
    pub members: Vec<MemberDto>,
    pub projects: Vec<ProjectDto>,
    /// Pending invitations; empty unless the viewer is an owner.
    #[serde(default)]
    pub invitations: Vec<InvitationRecord>,
    /// The invitation this viewer made just now, with its link (shown once).
    #[serde(default)]
    pub new_invitation: Option<NewInvitation>,
    /// API tokens: all of the team's for an owner, the viewer's own for anyone else.
    #[serde(default)]
    pub tokens: Vec<ApiTokenRecord>,
    /// The token this viewer made just now (shown once).
    #[serde(default)]
    pub new_token: Option<CreatedApiToken>,
}

/// An API token as the team page and `GET /teams/{id}/tokens` show it (never the token).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiTokenRecord {
    pub id: i64,
    pub team_id: i64,
    /// The member it acts as.
    pub user_id: i64,
    pub user_email: String,
    pub name: String,
    /// viewer or editor: the most it may do, and never more than its member may.
    pub role: String,
    pub created_at: String,
    /// After this it is refused; `None` = until revoked.
    pub expires_at: Option<String>,
    pub last_used_at: Option<String>,
    pub revoked_at: Option<String>,
    /// Whether `expires_at` has passed, as the server saw it.
    #[serde(default)]
    pub expired: bool,
}

/// A token made just now: the record and the token itself, which is shown here and never again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedApiToken {
    #[serde(flatten)]
    pub record: ApiTokenRecord,
    /// Send it as `Authorization: Bearer <token>`.
    pub token: String,
}

/// The cookie that carries a token the token form made just now to the page it redirects to,
/// as `ID:TOKEN` (HttpOnly, a minute, the teams page only).
pub fn new_token_cookie(team_id: i64) -> String {
    format!("spade_new_token_{team_id}")
}

/// An open invitation into a team, as its owners see it (the API and the teams page). It names
/// an email, never an account: whether the email has one is not told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvitationRecord {
    pub id: i64,
    pub team_id: i64,
    pub email: String,
    /// The role the invited person gets on accepting: owner, editor or viewer.
    pub role: String,
    pub created_at: String,
    pub expires_at: String,
    /// The code that answers it, in the answer that created it and never again (only its hash
    /// is stored). The invited person needs it to accept or decline: the owner sends them the
    /// link [`invitation_path`] makes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

/// The page an invited person opens to answer invitation `id` with its `code` (the teams page,
/// which fills the code into that invitation's form).
pub fn invitation_path(id: i64, code: &str) -> String {
    format!("/teams?invitation={id}&code={code}#invitation-{id}")
}

/// The cookie that carries a just-created invitation's `ID:CODE` from the invite form's
/// redirect to the teams page, where its link is shown once (one per team).
pub fn new_invitation_cookie(team_id: i64) -> String {
    format!("spade_new_invitation_{team_id}")
}

/// An invitation created just now, with the link its owner sends (shown once).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewInvitation {
    pub id: i64,
    pub email: String,
    /// Absolute when the server knows its public address, else a path.
    pub link: String,
}

/// An open invitation to the signed-in user (the API's `GET /invitations` and the teams page).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncomingInvitation {
    pub id: i64,
    pub team_id: i64,
    pub team_name: String,
    pub role: String,
    /// The display name of the owner who invited, if their account still exists.
    pub invited_by: Option<String>,
    pub created_at: String,
    pub expires_at: String,
}

/// The roles a member can have, lowest first (the API's `role` values).
pub const ROLES: [&str; 3] = ["viewer", "editor", "owner"];

/// A read-only share link of a run (its token is shown once, at creation, and never stored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareDto {
    pub id: i64,
    pub created_at: String,
    /// When it was revoked; a revoked link answers 404.
    pub revoked_at: Option<String>,
    /// What the link was made for (may be empty).
    #[serde(default)]
    pub label: String,
    /// When it stops working (404 after that); `None` = until revoked.
    #[serde(default)]
    pub expires_at: Option<String>,
    /// Whether `expires_at` has passed, as the server saw it.
    #[serde(default)]
    pub expired: bool,
}

/// The run page's row of a share link: the API's record with times to the whole second.
impl From<ShareRecord> for ShareDto {
    fn from(r: ShareRecord) -> Self {
        ShareDto {
            id: r.id,
            created_at: whole_seconds(&r.created_at),
            revoked_at: r.revoked_at.as_deref().map(whole_seconds),
            label: r.label,
            expires_at: r.expires_at.as_deref().map(whole_seconds),
            expired: r.expired,
        }
    }
}

/// The run page's sharing section (only for viewers who may change the run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharesDto {
    /// Scheme and host the links start with (`http://host:port`), from the request.
    pub origin: String,
    pub links: Vec<ShareDto>,
    /// The token of a link this viewer created just now, shown once. It reaches the page in a
    /// short-lived HttpOnly cookie ([`new_share_cookie`]), not in the address, so it stays out of
    /// the browser's history.
    #[serde(default)]
    pub new_token: Option<String>,
}

/// The cookie that carries a just-created share token from the form's redirect to the run page
/// (one per run, so two tabs do not swap links).
pub fn new_share_cookie(run_id: i64) -> String {
    format!("spade_new_share_{run_id}")
}

/// How a configuration field is edited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FieldKind {
    /// A whole number (`<input type=number step=1>`).
    Integer,
    /// A real number.
    Number,
    /// Free text; empty means "not set" for optional paths.
    Text { optional: bool },
    /// A checkbox.
    Bool,
    /// One of these values (a `<select>`).
    Choice(Vec<String>),
    /// Any of these values (checkboxes sharing the field's name).
    Multi(Vec<String>),
}

/// One field of the launch form, named by its configuration key path (`designer.plateau.low`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigField {
    pub path: String,
    /// The last part of the path, in words.
    pub label: String,
    /// What the setting does (from the configuration's documentation).
    pub help: String,
    pub kind: FieldKind,
    /// The value shown: as typed by the user, or the preset's. `true`/`false` for checkboxes,
    /// comma-separated for [`FieldKind::Multi`].
    pub value: String,
    /// The chosen preset's value, shown beside the field.
    pub default: String,
    /// Validation messages about this field (empty when it is fine).
    pub errors: Vec<String>,
}

/// A section of the configuration (`[designer]`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigSection {
    pub key: String,
    pub title: String,
    pub fields: Vec<ConfigField>,
}

// The launch form's engine lives in `spade::config::form` (no HTTP, no leptos); the page's
// types are these, converted on the server.
#[cfg(feature = "ssr")]
impl From<spade::config::form::FieldKind> for FieldKind {
    fn from(k: spade::config::form::FieldKind) -> Self {
        use spade::config::form::FieldKind as K;
        match k {
            K::Integer => FieldKind::Integer,
            K::Number => FieldKind::Number,
            K::Text { optional } => FieldKind::Text { optional },
            K::Bool => FieldKind::Bool,
            K::Choice(v) => FieldKind::Choice(v),
            K::Multi(v) => FieldKind::Multi(v),
        }
    }
}

#[cfg(feature = "ssr")]
impl From<spade::config::form::Field> for ConfigField {
    fn from(f: spade::config::form::Field) -> Self {
        ConfigField {
            path: f.path,
            label: f.label,
            help: f.help,
            kind: f.kind.into(),
            value: f.value,
            default: f.default,
            errors: f.errors,
        }
    }
}

#[cfg(feature = "ssr")]
impl From<spade::config::form::Section> for ConfigSection {
    fn from(s: spade::config::form::Section) -> Self {
        ConfigSection {
            key: s.key,
            title: s.title,
            fields: s.fields.into_iter().map(ConfigField::from).collect(),
        }
    }
}

/// A named starting point of the launch form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PresetDto {
    pub key: String,
    pub label: String,
    pub description: String,
}

/// A project the viewer may launch runs in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectOption {
    pub id: i64,
    pub team: String,
    pub name: String,
}

/// The launch form: what it offers, what is filled in and what was wrong with the last try.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchForm {
    /// Projects of teams where the viewer is an editor or owner.
    pub projects: Vec<ProjectOption>,
    pub project: Option<i64>,
    pub presets: Vec<PresetDto>,
    pub preset: String,
    pub name: String,
    pub executors: Vec<String>,
    pub executor: String,
    pub sections: Vec<ConfigSection>,
    /// The preset's configuration as TOML (the advanced form's starting text), or the text the
    /// user submitted.
    pub toml: String,
    /// Messages about the name, project or executor, keyed `name`, `project`, `executor`.
    pub field_errors: Vec<(String, String)>,
    /// Messages that belong to no single field (the server's answer, TOML syntax errors).
    pub errors: Vec<String>,
    /// Whether the last try was the TOML form (its errors are shown there).
    pub toml_submitted: bool,
}

/// The runs list's search by tag, configuration value and latest metric value (the API's
/// `tag`, `config`, `metric`, `metric_min`, `metric_max`), every field as typed, the numbers
/// checked by [`RunSearch::checked`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSearch {
    pub tag: Option<String>,
    /// `key=value`, the key dotted (`agent.temperature=0.6`).
    pub config: Option<String>,
    pub metric: Option<String>,
    pub metric_min: Option<String>,
    pub metric_max: Option<String>,
}

impl RunSearch {
    /// The search with what is wrong left out, and a message for each thing left out (the
    /// list is shown without it rather than as an error page).
    pub fn checked(self) -> (Self, Vec<String>) {
        let mut problems = Vec::new();
        let text = |v: Option<String>| {
            v.map(|t| t.trim().chars().take(200).collect::<String>())
                .filter(|t| !t.is_empty())
        };
        let mut out = RunSearch {
            tag: text(self.tag),
            config: text(self.config),
            metric: text(self.metric),
            metric_min: text(self.metric_min),
            metric_max: text(self.metric_max),
        };
        if let Some(c) = &out.config
            && c.split_once('=').is_none_or(|(k, _)| k.trim().is_empty())
        {
            problems.push(format!(
                "Configuration search must be key=value, e.g. agent.temperature=0.6; got \"{c}\"; ignored."
            ));
            out.config = None;
        }
        for (label, v) in [
            ("Metric at least", &mut out.metric_min),
            ("Metric at most", &mut out.metric_max),
        ] {
            if let Some(t) = v.as_deref()
                && !t.parse::<f64>().is_ok_and(f64::is_finite)
            {
                problems.push(format!("{label} must be a number, got \"{t}\"; ignored."));
                *v = None;
            }
        }
        let (lo, hi) = (out.min(), out.max());
        if let (Some(lo), Some(hi)) = (lo, hi)
            && lo > hi
        {
            problems.push(format!(
                "Metric at least ({lo}) is above metric at most ({hi}); no run could match, so both are ignored."
            ));
            out.metric_min = None;
            out.metric_max = None;
        }
        if out.metric.is_none() && (out.metric_min.is_some() || out.metric_max.is_some()) {
            problems.push("A metric range needs a metric name; ignored.".to_owned());
            out.metric_min = None;
            out.metric_max = None;
        }
        (out, problems)
    }

    pub fn min(&self) -> Option<f64> {
        self.metric_min.as_deref().and_then(|t| t.parse().ok())
    }

    pub fn max(&self) -> Option<f64> {
        self.metric_max.as_deref().and_then(|t| t.parse().ok())
    }

    pub fn is_empty(&self) -> bool {
        self == &RunSearch::default()
    }
}

/// A run the compare page's picker offers: any run of any of the viewer's teams.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunChoice {
    pub id: i64,
    pub team: String,
    pub project: String,
    pub name: String,
    pub status: RunStatus,
}

/// One live update of a run page, as `GET /api/v1/runs/{id}/events` sends it: the SSE event name
/// is [`RunEvent::name`] and the data this enum serialised (with its `type`). The server
/// serialises it and the hydrated page deserialises the same type, so the two cannot drift.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    Status {
        status: RunStatus,
    },
    Progress {
        step: u64,
        total_steps: u64,
        phase: String,
    },
    Metrics {
        step: u64,
        values: BTreeMap<String, f64>,
    },
    Environment {
        env_id: String,
        step: u64,
        skill: String,
        status: String,
    },
    Checkpoint {
        step: u64,
    },
    Log {
        level: String,
        line: String,
    },
    /// The whole log tail, replacing what the page shows: sent when a stream starts following
    /// the job's output (lines written between the page's render and the stream's start would
    /// otherwise be lost) and when the output moved on too far to append to.
    LogTail {
        lines: Vec<LogLine>,
    },
}

impl RunEvent {
    /// The SSE event name (the `type` tag).
    pub fn name(&self) -> &'static str {
        match self {
            RunEvent::Status { .. } => "status",
            RunEvent::Progress { .. } => "progress",
            RunEvent::Metrics { .. } => "metrics",
            RunEvent::Environment { .. } => "environment",
            RunEvent::Checkpoint { .. } => "checkpoint",
            RunEvent::Log { .. } => "log",
            RunEvent::LogTail { .. } => "log_tail",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(name: &str, sum: f64, max: f64, steps: i64) -> SeriesTotal {
        SeriesTotal {
            name: name.into(),
            sum,
            max,
            steps,
        }
    }

    #[test]
    fn a_run_search_keeps_what_it_can_use_and_names_the_rest() {
        let s = |config: &str, metric: &str, lo: &str, hi: &str| RunSearch {
            tag: Some("  sweep ".into()),
            config: Some(config.into()),
            metric: Some(metric.into()),
            metric_min: Some(lo.into()),
            metric_max: Some(hi.into()),
        };
        let (ok, problems) = s("agent.temperature=0.6", "regret_mean", "0.1", " 0.5").checked();
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(ok.tag.as_deref(), Some("sweep"));
        assert_eq!((ok.min(), ok.max()), (Some(0.1), Some(0.5)));
        let (bad, problems) = s("agent.temperature", "", "x", "").checked();
        assert_eq!(bad.config, None);
        assert_eq!(
            (bad.metric_min.as_deref(), bad.metric_max.as_deref()),
            (None, None)
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("key=value") && problems[1].contains("must be a number"));
        let (inverted, problems) = s("=1", "m", "2", "1").checked();
        assert_eq!(
            (inverted.min(), inverted.max(), inverted.config),
            (None, None, None)
        );
        assert!(problems.iter().any(|p| p.contains("above")), "{problems:?}");
        let (no_name, problems) = s("a=1", " ", "0.2", "").checked();
        assert_eq!(no_name.min(), None);
        assert!(problems.iter().any(|p| p.contains("needs a metric name")));
    }

    #[test]
    fn a_run_that_accepted_nothing_or_never_won_is_named_and_a_good_one_is_not() {
        // The demo that failed on a fresh machine: 8 steps, 72 rejected, 0 accepted.
        let failed = [
            total("accepted", 0.0, 0.0, 8),
            total("rejected", 72.0, 9.0, 8),
            total("rejections/no_code", 20.0, 4.0, 8),
            total("rejections/syntax_error", 52.0, 8.0, 8),
        ];
        let w = RunWarning::of(&failed).expect("a warning");
        assert_eq!(w.label, "no environment accepted");
        assert!(
            w.detail.starts_with(
                "No environment was accepted in 8 steps: all 72 environments the designer \
                 wrote were rejected (52 syntax_error, 20 no_code)"
            ),
            "{}",
            w.detail
        );
        let never_won = [
            total("accepted", 5.0, 2.0, 4),
            total("win_rate/Optimization", 0.0, 0.0, 4),
            total("win_rate/Logic", 0.0, 0.0, 3),
        ];
        let w = RunWarning::of(&never_won).expect("a warning");
        assert_eq!(w.label, "no win");
        assert!(w.detail.contains("in 4 steps"), "{}", w.detail);
        let both = [
            total("accepted", 0.0, 0.0, 1),
            total("win_rate/Logic", 0.0, 0.0, 1),
        ];
        assert_eq!(
            RunWarning::of(&both).map(|w| w.label),
            Some("no environment accepted, no win".into())
        );
        // A run that accepted something and won once, and one with no metrics yet.
        let fine = [
            total("accepted", 3.0, 2.0, 4),
            total("win_rate/Logic", 0.25, 0.25, 4),
            total("win_rate/Optimization", 0.0, 0.0, 4),
        ];
        assert_eq!(RunWarning::of(&fine), None);
        assert_eq!(RunWarning::of(&[]), None);
    }

    #[test]
    fn page_times_drop_the_fraction_and_keep_the_zone() {
        assert_eq!(
            whole_seconds("2026-12-04T10:00:00.123456Z"),
            "2026-12-04T10:00:00Z"
        );
        assert_eq!(
            whole_seconds("2026-12-04T10:00:00Z"),
            "2026-12-04T10:00:00Z"
        );
        assert_eq!(
            whole_seconds("2026-12-04T10:00:00.5+01:00"),
            "2026-12-04T10:00:00+01:00"
        );
    }

    /// The runs list, the run page and the signed-in user are views of the API's records:
    /// whole seconds, empty phase and message as none, never the admin flag.
    #[test]
    fn page_views_derive_from_the_api_records() {
        let record = RunRecord {
            id: 7,
            project_id: 2,
            name: "r".into(),
            config: serde_json::json!({"run": {"steps": 9}}),
            status: RunStatus::Running,
            executor: "ray".into(),
            seed: 3,
            code_version: "abc".into(),
            progress_step: 4,
            progress_total: 9,
            phase: Some(String::new()),
            status_message: Some("cancelled by ann".into()),
            created_by: Some(1),
            created_at: "2026-12-04T10:00:00.25Z".into(),
            updated_at: "2026-12-04T10:01:00Z".into(),
            started_at: None,
            finished_at: None,
            tags: vec!["baseline".into()],
            notes: "lr too high".into(),
        };
        let metrics = BTreeMap::from([("regret_mean".to_owned(), 0.5)]);
        let summary = RunSummary::of(&record, "p".into(), 9, metrics.clone());
        assert_eq!(
            (
                summary.id,
                summary.step,
                summary.total_steps,
                summary.status
            ),
            (7, 4, 9, RunStatus::Running)
        );
        assert_eq!(summary.created_at, "2026-12-04T10:00:00Z");
        assert_eq!(summary.key_metrics, metrics);
        let detail = RunDetail::of(record, summary.clone(), Vec::new(), true);
        assert_eq!(detail.summary, summary);
        assert_eq!((detail.executor.as_str(), detail.seed), ("ray", 3));
        assert_eq!(detail.phase, None);
        assert_eq!(detail.message.as_deref(), Some("cancelled by ann"));
        assert_eq!(
            (summary.tags.as_slice(), detail.notes.as_str()),
            (&["baseline".to_owned()][..], "lr too high")
        );
        let user = UserDto::from(UserRecord {
            id: 1,
            email: "ann@example.com".into(),
            display_name: "Ann".into(),
            is_admin: true,
            created_at: "2026-12-04T10:00:00Z".into(),
        });
        assert_eq!(
            (user.id, user.email.as_str(), user.display_name.as_str()),
            (1, "ann@example.com", "Ann")
        );
    }

    /// The environment page is a view of the API's record: whole-second review times, the
    /// parent with the code it was given, transcripts read from the stored JSON.
    #[test]
    fn the_environment_page_derives_from_the_api_record() {
        let summary = |env_id: &str| EnvRecord {
            id: 1,
            env_id: env_id.into(),
            step: 2,
            skill: "Optimization".into(),
            kind: EnvKind::Game,
            status: EnvStatus::Accepted,
            rejection_reason: None,
            parent_env_id: None,
            regret: Some(0.5),
            win_rate_hint: Some(1.0),
            win_rate_no_hint: Some(0.5),
            designer_reward: Some(0.25),
            reward_levels: Some(-1),
            title: "t".into(),
            code_skill: String::new(),
        };
        let record = EnvRecordDetail {
            summary: summary("e2"),
            rejection_message: None,
            code: "class E: pass".into(),
            hint: Some("h".into()),
            attempts: 3,
            created_at: "2026-12-04T10:00:00.5Z".into(),
            plays: vec![PlayRecord {
                id: 9,
                env_id: "e2".into(),
                step: 2,
                with_hint: true,
                episode_return: 1.0,
                won: true,
                turns: 1,
                transcript: serde_json::json!([{"role": "user", "content": "obs"}]),
            }],
            parent: Some(summary("e1")),
            reviews: vec![ReviewDto {
                reviewer: "ann".into(),
                verdict: "good".into(),
                comment: String::new(),
                updated_at: "2026-12-04T10:00:00.123Z".into(),
            }],
        };
        let page = EnvironmentDetail::of(record, 7, "run".into(), Some("old".into()), true);
        assert_eq!((page.summary.run_id, page.summary.step), (7, 2));
        assert_eq!((page.attempts, page.designer_reward), (3, Some(0.25)));
        // A negative level count cannot be shown as one.
        assert_eq!(page.reward_levels, None);
        assert_eq!(
            page.parent,
            Some(ParentEnvironment {
                env_id: "e1".into(),
                code: "old".into()
            })
        );
        assert_eq!(page.plays[0].transcript[0].content, "obs");
        assert_eq!(page.reviews[0].updated_at, "2026-12-04T10:00:00Z");
        assert!(page.can_review);
    }

    /// What the server writes is what the page reads: every event's `type` is its SSE name and
    /// it deserialises back to itself.
    #[test]
    fn run_events_round_trip_with_their_sse_names() {
        let all = [
            RunEvent::Status {
                status: RunStatus::Cancelling,
            },
            RunEvent::Progress {
                step: 3,
                total_steps: 10,
                phase: "play".into(),
            },
            RunEvent::Metrics {
                step: 2,
                values: BTreeMap::from([("loss".to_owned(), 0.5)]),
            },
            RunEvent::Environment {
                env_id: "s0-g0-a0".into(),
                step: 0,
                skill: "Optimization".into(),
                status: "accepted".into(),
            },
            RunEvent::Checkpoint { step: 4 },
            RunEvent::Log {
                level: "info".into(),
                line: "hello".into(),
            },
        ];
        for e in all {
            let text = serde_json::to_string(&e).unwrap_or_default();
            let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            assert_eq!(v["type"], e.name(), "{text}");
            assert_eq!(serde_json::from_str::<RunEvent>(&text).ok(), Some(e));
        }
    }
}

#[cfg(test)]
mod point_column_tests {
    use super::*;

    #[test]
    fn series_points_travel_as_columns_and_come_back_equal() {
        let m = MetricSeries {
            name: "loss".into(),
            points: vec![
                Point {
                    step: 1.0,
                    time_s: 0.5,
                    value: 2.25,
                },
                Point {
                    step: 2.0,
                    time_s: 1.5,
                    value: -0.125,
                },
            ],
        };
        let json = serde_json::to_string(&m).unwrap_or_default();
        assert_eq!(
            json,
            r#"{"name":"loss","points":{"step":[1.0,2.0],"time_s":[0.5,1.5],"value":[2.25,-0.125]}}"#
        );
        let back: Result<MetricSeries, _> = serde_json::from_str(&json);
        assert_eq!(back.ok(), Some(m));
        let ragged = r#"{"name":"x","points":{"step":[1.0],"time_s":[],"value":[1.0]}}"#;
        let err = serde_json::from_str::<MetricSeries>(ragged)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("one entry per point"), "{err}");
    }
}
