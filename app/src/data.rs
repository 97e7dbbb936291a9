//! Where pages get their data: server functions (GET, so a hydrated page can call them without
//! a CSRF token; they change nothing). Their server half asks a [`DashboardData`] that the
//! backend provides as Leptos context: the backend alone knows sessions, JWT and SQL, the app
//! only knows the DTOs it renders. Every loader answers [`Access::LoginRequired`] when the
//! request carries no valid session, so pages show a log-in prompt instead of an error.
//!
//! The trait and helpers are compiled in every build (they are small and dead code in wasm):
//! the `#[server]` macro emits bodies whenever leptos runs in ssr mode, which the unit tests
//! enable to render HTML without the app's own `ssr` feature.

use crate::dto::{
    BenchmarksDto, EnvironmentDetail, EnvironmentSummary, LaunchForm, MetricSeries, Page,
    RunDetail, RunSummary, SharesDto, TeamDetail, TeamDto, Viewer,
};
use leptos::prelude::*;
use leptos::server_fn::codec::GetUrl;
use serde::{Deserialize, Serialize};

/// A loader's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Access<T> {
    Granted(T),
    /// No valid session: the page shows a log-in link.
    LoginRequired,
}

/// The runs list of one team.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunsData {
    pub teams: Vec<TeamDto>,
    /// The team shown (the requested one, or the viewer's first).
    pub team: Option<i64>,
    pub runs: Page<RunSummary>,
}

/// The run page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunData {
    pub run: RunDetail,
    pub metrics: Vec<MetricSeries>,
    /// Held-out results and evaluations of the run's checkpoints.
    #[serde(default)]
    pub benchmarks: BenchmarksDto,
    /// Share links, for viewers who may change the run (`None` for the others).
    pub shares: Option<SharesDto>,
}

/// The team's benchmarks page: the suite aggregates of its runs with results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchmarksPageData {
    pub teams: Vec<TeamDto>,
    /// The team shown (the requested one, or the viewer's first).
    pub team: Option<i64>,
    /// Runs with results, newest first: (run id, run name, its aggregate rows).
    pub runs: Vec<(i64, String, BenchmarksDto)>,
}

/// The teams page: the viewer's teams with members and projects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeamsData {
    /// The viewer's user id (their own row gets no "remove" button).
    pub viewer_id: i64,
    pub teams: Vec<TeamDetail>,
    /// Invitations to the viewer that wait for an answer (Accept / Decline).
    #[serde(default)]
    pub invitations: Vec<crate::dto::IncomingInvitation>,
}

/// The account page: the signed-in person and their live login sessions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccountData {
    pub user: crate::dto::UserRecord,
    pub sessions: Vec<crate::dto::SessionRecord>,
    #[serde(default)]
    pub views: Vec<crate::dto::ChartViewRecord>,
}

/// The read-only page of a shared run: no session, no actions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedRunData {
    pub run: RunDetail,
    pub metrics: Vec<MetricSeries>,
    /// The newest environments (one page).
    pub environments: Vec<EnvironmentSummary>,
}

/// The environment list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvironmentsData {
    pub run_name: String,
    pub skills: Vec<String>,
    pub envs: Page<EnvironmentSummary>,
}

/// What the environment list's server half receives (already parsed by the page).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EnvListQuery {
    pub skill: Option<String>,
    /// `accepted` or `rejected`.
    pub status: Option<String>,
    /// Stored step indices, from 0 (the page's "Step from 1" is index 0).
    pub step_min: Option<u64>,
    pub step_max: Option<u64>,
    pub regret_min: Option<f64>,
    /// `good`, `broken`, `reward_hackable` or `unreviewed`.
    pub verdict: Option<String>,
    /// The order: `step` (default), `regret`, `win_rate_no_hint`, `win_rate_hint`,
    /// `designer_reward`.
    #[serde(default)]
    pub sort: Option<String>,
    pub cursor: Option<String>,
}

/// Error of a data source, shown to the user as is (never a cause chain or SQL).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DataError {
    /// The thing does not exist or the viewer may not see it (the same answer, on purpose).
    #[error("{0} not found")]
    NotFound(String),
    /// The viewer may see the thing but not do this with it (a viewer's change to a run of
    /// their team); the message says what is missing.
    #[error("{0}")]
    Forbidden(String),
    /// A request value is wrong; the message names the field.
    #[error("{0}")]
    Invalid(String),
    /// The database or another dependency failed; details are in the server log.
    #[error("the server could not load this page; try again shortly")]
    Unavailable,
}

pub use source::{DashboardData, DataFuture, SharedData};

mod source {
    use super::*;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;

    /// A boxed, sendable future (the trait is used as a trait object).
    pub type DataFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, DataError>> + Send + 'a>>;

    /// What the backend implements. Each method gets the request's head, from which the
    /// backend authenticates the viewer; `Ok(None)` / [`Access::LoginRequired`] when there is
    /// no valid session.
    pub trait DashboardData: Send + Sync + 'static {
        fn viewer<'a>(&'a self, req: &'a http::request::Parts) -> DataFuture<'a, Option<Viewer>>;
        /// `name`: only runs whose name contains it, ignoring case; `sort`: `newest`
        /// (default), `oldest` or `name`.
        /// `search`: by tag, configuration value and latest metric value, already checked
        /// ([`crate::dto::RunSearch::checked`]).
        #[allow(clippy::too_many_arguments)]
        fn runs<'a>(
            &'a self,
            req: &'a http::request::Parts,
            team: Option<i64>,
            status: Option<String>,
            name: Option<String>,
            sort: Option<String>,
            cursor: Option<String>,
            search: crate::dto::RunSearch,
        ) -> DataFuture<'a, Access<RunsData>>;
        fn run<'a>(
            &'a self,
            req: &'a http::request::Parts,
            run_id: i64,
        ) -> DataFuture<'a, Access<RunData>>;
        fn environments<'a>(
            &'a self,
            req: &'a http::request::Parts,
            run_id: i64,
            q: EnvListQuery,
        ) -> DataFuture<'a, Access<EnvironmentsData>>;
        fn environment<'a>(
            &'a self,
            req: &'a http::request::Parts,
            run_id: i64,
            env_id: String,
        ) -> DataFuture<'a, Access<EnvironmentDetail>>;
        fn benchmarks<'a>(
            &'a self,
            req: &'a http::request::Parts,
            team: Option<i64>,
        ) -> DataFuture<'a, Access<BenchmarksPageData>>;
        /// The launch form for `preset` (default: the tiny CPU demo) and `project`. After a
        /// refused submission the backend answers with what was submitted and its messages.
        fn launch<'a>(
            &'a self,
            req: &'a http::request::Parts,
            preset: Option<String>,
            project: Option<i64>,
            // "Run again with changes": start from this run's configuration.
            from: Option<i64>,
        ) -> DataFuture<'a, Access<LaunchForm>>;
        fn teams<'a>(&'a self, req: &'a http::request::Parts) -> DataFuture<'a, Access<TeamsData>>;
        /// The signed-in person's saved chart views.
        fn chart_views<'a>(
            &'a self,
            req: &'a http::request::Parts,
        ) -> DataFuture<'a, Access<Vec<crate::dto::ChartViewRecord>>>;
        /// The signed-in person's account and live sessions.
        fn account<'a>(
            &'a self,
            req: &'a http::request::Parts,
        ) -> DataFuture<'a, Access<AccountData>>;
        /// The newest runs of each of the viewer's teams, for the compare page's picker.
        fn run_choices<'a>(
            &'a self,
            req: &'a http::request::Parts,
        ) -> DataFuture<'a, Access<Vec<crate::dto::RunChoice>>>;
        /// A run through a share link; no session needed. Unknown or revoked links are
        /// [`DataError::NotFound`].
        fn shared<'a>(
            &'a self,
            req: &'a http::request::Parts,
            token: String,
        ) -> DataFuture<'a, SharedRunData>;
    }

    /// The context value the backend provides.
    pub type SharedData = Arc<dyn DashboardData>;
}

/// The data source and the request head from context (server only).
#[cfg_attr(feature = "hydrate", allow(dead_code))]
fn context() -> Result<(SharedData, http::request::Parts), ServerFnError> {
    let data = use_context::<SharedData>().ok_or_else(|| {
        ServerFnError::new("the dashboard has no data source (server misconfigured)")
    })?;
    let parts = use_context::<http::request::Parts>()
        .ok_or_else(|| ServerFnError::new("no request in context"))?;
    Ok((data, parts))
}

/// The server-function error of a data error. The HTTP status of the `/ui/*` answer follows the
/// kind (404 for a run the viewer cannot see, as the API answers, 422 for a bad value, 503 when
/// the database is down, 403 for what the viewer's role does not allow), not a blanket 500.
#[cfg_attr(feature = "hydrate", allow(dead_code))]
fn to_sfn(e: DataError) -> ServerFnError {
    #[cfg(feature = "ssr")]
    if let Some(opts) = use_context::<leptos_axum::ResponseOptions>() {
        opts.set_status(match &e {
            DataError::NotFound(_) => http::StatusCode::NOT_FOUND,
            DataError::Forbidden(_) => http::StatusCode::FORBIDDEN,
            DataError::Invalid(_) => http::StatusCode::UNPROCESSABLE_ENTITY,
            DataError::Unavailable => http::StatusCode::SERVICE_UNAVAILABLE,
        });
    }
    ServerFnError::new(e.to_string())
}

/// The viewer resource of the top bar (loaded once per page render).
pub type ViewerResource = Resource<Result<Option<Viewer>, ServerFnError>>;

/// The signed-in viewer, if any.
#[server(prefix = "/ui", endpoint = "viewer", input = GetUrl)]
pub async fn load_viewer() -> Result<Option<Viewer>, ServerFnError> {
    let (data, parts) = context()?;
    data.viewer(&parts).await.map_err(to_sfn)
}

/// One page of a team's runs. One argument per query parameter: the server function's GET
/// address is the page's own query string.
#[allow(clippy::too_many_arguments)]
#[server(prefix = "/ui", endpoint = "runs", input = GetUrl)]
pub async fn load_runs(
    team: Option<i64>,
    status: Option<String>,
    name: Option<String>,
    #[server(default)] sort: Option<String>,
    cursor: Option<String>,
    #[server(default)] tag: Option<String>,
    #[server(default)] config: Option<String>,
    #[server(default)] metric: Option<String>,
    #[server(default)] metric_min: Option<String>,
    #[server(default)] metric_max: Option<String>,
) -> Result<Access<RunsData>, ServerFnError> {
    let (data, parts) = context()?;
    // Checked again: a server function is an address anyone can call.
    let (search, _) = crate::dto::RunSearch {
        tag,
        config,
        metric,
        metric_min,
        metric_max,
    }
    .checked();
    data.runs(&parts, team, status, name, sort, cursor, search)
        .await
        .map_err(to_sfn)
}

/// Clears the show-once cookie `name` with this answer (its secret is on the page now).
#[cfg(feature = "ssr")]
fn clear_cookie(opts: &leptos_axum::ResponseOptions, name: &str) {
    if let Ok(v) = http::HeaderValue::from_str(&format!(
        "{name}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"
    )) {
        opts.append_header(http::header::SET_COOKIE, v);
    }
}

/// A run with its metrics.
#[server(prefix = "/ui", endpoint = "run", input = GetUrl)]
pub async fn load_run(run_id: i64) -> Result<Access<RunData>, ServerFnError> {
    let (data, parts) = context()?;
    #[cfg(feature = "ssr")]
    let opts = use_context::<leptos_axum::ResponseOptions>();
    let out = data.run(&parts, run_id).await.map_err(to_sfn)?;
    // A new share token is shown once: the cookie that brought it goes with this answer.
    #[cfg(feature = "ssr")]
    if let (Some(opts), Access::Granted(d)) = (opts, &out)
        && d.shares.as_ref().is_some_and(|s| s.new_token.is_some())
    {
        clear_cookie(&opts, &crate::dto::new_share_cookie(run_id));
    }
    Ok(out)
}

/// The compare page's picker: the newest runs of each of the viewer's teams.
#[server(prefix = "/ui", endpoint = "run_choices", input = GetUrl)]
pub async fn load_run_choices() -> Result<Access<Vec<crate::dto::RunChoice>>, ServerFnError> {
    let (data, parts) = context()?;
    data.run_choices(&parts).await.map_err(to_sfn)
}

/// Several runs with their metrics, for the compare page.
#[server(prefix = "/ui", endpoint = "compare", input = GetUrl)]
pub async fn load_compare(run_ids: String) -> Result<Access<Vec<RunData>>, ServerFnError> {
    let (data, parts) = context()?;
    let mut out = Vec::new();
    for id in run_ids.split(',').filter(|s| !s.trim().is_empty()).take(8) {
        let id: i64 = id.trim().parse().map_err(|_| {
            ServerFnError::new(format!("run ids must be whole numbers, got {id:?}"))
        })?;
        match data.run(&parts, id).await.map_err(to_sfn)? {
            Access::Granted(r) => out.push(r),
            Access::LoginRequired => return Ok(Access::LoginRequired),
        }
    }
    Ok(Access::Granted(out))
}

/// The suite aggregates of a team's runs.
#[server(prefix = "/ui", endpoint = "benchmarks", input = GetUrl)]
pub async fn load_benchmarks(
    team: Option<i64>,
) -> Result<Access<BenchmarksPageData>, ServerFnError> {
    let (data, parts) = context()?;
    data.benchmarks(&parts, team).await.map_err(to_sfn)
}

/// One page of a run's environments.
#[server(prefix = "/ui", endpoint = "environments", input = GetUrl)]
pub async fn load_environments(
    run_id: i64,
    // With every filter empty the URL encoding has no `q` at all; without the default, in-app
    // navigation to an unfiltered list failed with "missing field q".
    #[server(default)] q: EnvListQuery,
) -> Result<Access<EnvironmentsData>, ServerFnError> {
    let (data, parts) = context()?;
    data.environments(&parts, run_id, q).await.map_err(to_sfn)
}

/// One environment.
#[server(prefix = "/ui", endpoint = "environment", input = GetUrl)]
pub async fn load_environment(
    run_id: i64,
    env_id: String,
) -> Result<Access<EnvironmentDetail>, ServerFnError> {
    let (data, parts) = context()?;
    data.environment(&parts, run_id, env_id)
        .await
        .map_err(to_sfn)
}

/// The launch form.
#[server(prefix = "/ui", endpoint = "launch", input = GetUrl)]
pub async fn load_launch(
    preset: Option<String>,
    project: Option<i64>,
    #[server(default)] from: Option<i64>,
) -> Result<Access<LaunchForm>, ServerFnError> {
    let (data, parts) = context()?;
    data.launch(&parts, preset, project, from)
        .await
        .map_err(to_sfn)
}

/// The viewer's teams.
#[server(prefix = "/ui", endpoint = "teams", input = GetUrl)]
pub async fn load_teams() -> Result<Access<TeamsData>, ServerFnError> {
    let (data, parts) = context()?;
    #[cfg(feature = "ssr")]
    let opts = use_context::<leptos_axum::ResponseOptions>();
    let out = data.teams(&parts).await.map_err(to_sfn)?;
    // A new invitation's link is shown once: the cookie that brought it goes with this answer.
    #[cfg(feature = "ssr")]
    if let (Some(opts), Access::Granted(d)) = (opts, &out) {
        for t in d.teams.iter().filter(|t| t.new_invitation.is_some()) {
            clear_cookie(&opts, &crate::dto::new_invitation_cookie(t.team.id));
        }
        // So is a new API token.
        for t in d.teams.iter().filter(|t| t.new_token.is_some()) {
            clear_cookie(&opts, &crate::dto::new_token_cookie(t.team.id));
        }
    }
    Ok(out)
}

/// The viewer's saved chart views (run and compare pages).
#[server(prefix = "/ui", endpoint = "chart_views", input = GetUrl)]
pub async fn load_chart_views() -> Result<Access<Vec<crate::dto::ChartViewRecord>>, ServerFnError> {
    let (data, parts) = context()?;
    data.chart_views(&parts).await.map_err(to_sfn)
}

/// The account page.
#[server(prefix = "/ui", endpoint = "account", input = GetUrl)]
pub async fn load_account() -> Result<Access<AccountData>, ServerFnError> {
    let (data, parts) = context()?;
    data.account(&parts).await.map_err(to_sfn)
}

/// A shared run (no log-in).
#[server(prefix = "/ui", endpoint = "shared", input = GetUrl)]
pub async fn load_shared(token: String) -> Result<SharedRunData, ServerFnError> {
    let (data, parts) = context()?;
    data.shared(&parts, token).await.map_err(to_sfn)
}
