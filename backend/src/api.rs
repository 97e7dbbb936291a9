//! The REST API under `/api/v1`. One table ([`endpoints`]) lists every route with its method,
//! summary and authentication; the router and the OpenAPI document are both built from it, so
//! the document cannot drift from what is served.

pub mod account_api;
pub mod artifacts;
pub mod environments;
pub mod evaluations;
pub mod events;
pub mod ingest;
pub mod logs;
pub mod metrics;
pub mod pool_zip;
pub mod runs;
pub mod shares;
pub mod teams;

use crate::AppState;
use crate::auth::account;
use crate::auth::routes as auth_routes;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, patch, post, put};

/// How a route authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// No credentials.
    Public,
    /// A user: access cookie (+ CSRF for changes) or bearer token.
    User,
    /// A run's worker token (bearer).
    RunToken,
    /// A share-link token in the path.
    ShareLink,
}

/// One route of the API.
#[derive(Debug)]
pub struct Endpoint {
    pub method: &'static str,
    /// Path below `/api/v1`, in axum's (= OpenAPI's) `{param}` syntax.
    pub path: &'static str,
    pub summary: &'static str,
    pub tag: &'static str,
    pub auth: Auth,
    pub handler: MethodRouter<AppState>,
}

fn ep(
    method: &'static str,
    path: &'static str,
    tag: &'static str,
    auth: Auth,
    summary: &'static str,
    handler: MethodRouter<AppState>,
) -> Endpoint {
    Endpoint {
        method,
        path,
        summary,
        tag,
        auth,
        handler,
    }
}

/// Every route of `/api/v1` except the health check and the OpenAPI document itself.
pub fn endpoints() -> Vec<Endpoint> {
    use Auth::*;
    vec![
        ep(
            "post",
            "/auth/register",
            "auth",
            Public,
            "Create an account (the first one is admin; closable by configuration)",
            post(auth_routes::register),
        ),
        ep(
            "post",
            "/auth/login",
            "auth",
            Public,
            "Log in: cookies for browsers, tokens in the body with api_client=true (5 failures per minute per IP and email)",
            post(auth_routes::login),
        ),
        ep(
            "post",
            "/auth/refresh",
            "auth",
            Public,
            "Rotate the refresh token and get a new access token",
            post(auth_routes::refresh),
        ),
        ep(
            "post",
            "/auth/logout",
            "auth",
            User,
            "End the session (revokes its access and refresh tokens)",
            post(auth_routes::logout),
        ),
        ep(
            "get",
            "/auth/me",
            "auth",
            User,
            "The caller",
            get(auth_routes::me),
        ),
        ep(
            "patch",
            "/auth/me",
            "auth",
            User,
            "Change the caller's display name (`{\"display_name\"}`, 1-100 characters; a session, not an API token)",
            patch(account::patch_me),
        ),
        ep(
            "post",
            "/auth/password",
            "auth",
            User,
            "Change the caller's password (`{\"current_password\", \"new_password\"}`; throttled like a login); every other session ends",
            post(account::post_password),
        ),
        ep(
            "get",
            "/auth/sessions",
            "auth",
            User,
            "The caller's live login sessions, the current one marked",
            get(account::get_sessions),
        ),
        ep(
            "delete",
            "/auth/sessions/{session_id}",
            "auth",
            User,
            "End one of the caller's sessions (another user's is a 404)",
            delete(account::delete_session),
        ),
        ep(
            "get",
            "/chart-views",
            "auth",
            User,
            "The caller's saved chart views (smoothing, x axis, log scale, chart filter), by name",
            get(account_api::chart_views),
        ),
        ep(
            "post",
            "/chart-views",
            "auth",
            User,
            "Save a chart view (`{\"name\", \"smoothing\"?, \"x_axis\"?: step|time, \"log_y\"?, \"find\"?}`); a name already used is replaced",
            post(account_api::save_chart_view),
        ),
        ep(
            "delete",
            "/chart-views/{view_id}",
            "auth",
            User,
            "Delete one of the caller's chart views",
            delete(account_api::delete_chart_view),
        ),
        ep(
            "get",
            "/teams",
            "teams",
            User,
            "Teams the caller belongs to",
            get(teams::list),
        ),
        ep(
            "post",
            "/teams",
            "teams",
            User,
            "Create a team (the caller becomes owner)",
            post(teams::create),
        ),
        ep(
            "get",
            "/teams/{team_id}/members",
            "teams",
            User,
            "Members of a team",
            get(teams::members),
        ),
        ep(
            "put",
            "/teams/{team_id}/members",
            "teams",
            User,
            "Change a member's role by email (owner; joining a team is by invitation)",
            put(teams::set_member_role),
        ),
        ep(
            "get",
            "/teams/{team_id}/invitations",
            "teams",
            User,
            "Open invitations of a team (owner)",
            get(teams::invitations),
        ),
        ep(
            "post",
            "/teams/{team_id}/invitations",
            "teams",
            User,
            "Invite an email with a role (owner); the same answer whether or not it has an account",
            post(teams::invite),
        ),
        ep(
            "delete",
            "/teams/{team_id}/invitations/{invitation_id}",
            "teams",
            User,
            "Revoke an open invitation (owner)",
            delete(teams::revoke_invitation),
        ),
        ep(
            "get",
            "/invitations",
            "teams",
            User,
            "The caller's open invitations",
            get(teams::my_invitations),
        ),
        ep(
            "post",
            "/invitations/{invitation_id}/accept",
            "teams",
            User,
            "Accept an invitation to the caller's email with its code (`{\"code\"}` from the owner's link): join the team with its role",
            post(teams::accept_invitation),
        ),
        ep(
            "post",
            "/invitations/{invitation_id}/decline",
            "teams",
            User,
            "Decline an invitation to the caller's email, with its code (`{\"code\"}`)",
            post(teams::decline_invitation),
        ),
        ep(
            "get",
            "/teams/{team_id}/tokens",
            "teams",
            User,
            "API tokens of the team: every one for an owner, the caller's own otherwise (never the token itself)",
            get(teams::tokens),
        ),
        ep(
            "post",
            "/teams/{team_id}/tokens",
            "teams",
            User,
            "Make an API token for the caller in this team (editor or owner; `{\"name\", \"role\": viewer|editor, \"expires_in_days\"?}`); the answer holds the token, once",
            post(teams::create_token),
        ),
        ep(
            "delete",
            "/teams/{team_id}/tokens/{token_id}",
            "teams",
            User,
            "Revoke an API token (an owner any of the team's, others their own): refused from the next request on",
            delete(teams::revoke_token),
        ),
        ep(
            "delete",
            "/teams/{team_id}/members/{user_id}",
            "teams",
            User,
            "Remove a member (owner; never the last owner)",
            delete(teams::remove_member),
        ),
        ep(
            "get",
            "/teams/{team_id}/projects",
            "teams",
            User,
            "Projects of a team",
            get(teams::projects),
        ),
        ep(
            "post",
            "/teams/{team_id}/projects",
            "teams",
            User,
            "Create a project (editor)",
            post(teams::create_project),
        ),
        ep(
            "get",
            "/teams/{team_id}/runs",
            "runs",
            User,
            "Runs of a team, across its projects (filters: project_id, status, q (name contains), tag, config (key=value, e.g. agent.temperature=0.6), metric with metric_min / metric_max (its latest value); sort: newest (default), oldest, name; cursor pagination in that order)",
            get(runs::list),
        ),
        ep(
            "post",
            "/projects/{project_id}/runs",
            "runs",
            User,
            "Create a run from a validated configuration (TOML text or JSON; editor)",
            post(runs::create),
        ),
        ep(
            "get",
            "/runs/{run_id}",
            "runs",
            User,
            "One run",
            get(runs::get),
        ),
        ep(
            "patch",
            "/runs/{run_id}",
            "runs",
            User,
            "Rename a run or set its tags or notes: {name?, tags?, notes?} (editor)",
            patch(runs::update),
        ),
        ep(
            "delete",
            "/runs/{run_id}",
            "runs",
            User,
            "Delete a run that has no live job (editor)",
            delete(runs::delete),
        ),
        ep(
            "post",
            "/runs/{run_id}/cancel",
            "runs",
            User,
            "Cancel: queued runs stop at once, running ones go to cancelling (editor)",
            post(runs::cancel),
        ),
        ep(
            "post",
            "/runs/{run_id}/resume",
            "runs",
            User,
            "Queue a cancelled or failed run again (editor)",
            post(runs::resume),
        ),
        ep(
            "post",
            "/runs/{run_id}/token",
            "runs",
            User,
            "Issue a new worker token for the run, shown once (editor)",
            post(runs::issue_token),
        ),
        ep(
            "get",
            "/runs/{run_id}/events",
            "runs",
            User,
            "Server-sent events: status, progress, metrics, environments",
            get(events::run_events),
        ),
        ep(
            "get",
            "/runs/{run_id}/environments",
            "environments",
            User,
            "Environments, each with a title from its docstring (filters: skill, status, step_min/max, regret_min/max, verdict (good, broken, reward_hackable, unreviewed); sort: step (default), regret, win_rate_no_hint, win_rate_hint, designer_reward; cursor pagination in that order)",
            get(environments::list),
        ),
        ep(
            "get",
            "/runs/{run_id}/environments.jsonl",
            "environments",
            User,
            "Export: every environment the filters keep (those of the list, win_rate_min/max on the no-hint win rate, curated=true) as pool JSONL lines with code inline, streamed in bounded memory",
            get(environments::export_jsonl),
        ),
        ep(
            "get",
            "/runs/{run_id}/pool.zip",
            "environments",
            User,
            "Export: the environments the filters of environments.jsonl keep as a zip of the pool directory `spade env export` writes (one .py each, pool.jsonl, README.md), streamed",
            get(pool_zip::member_zip),
        ),
        ep(
            "get",
            "/runs/{run_id}/environments/{env_id}",
            "environments",
            User,
            "One environment with code, hint, sample plays, parent and review marks",
            get(environments::get),
        ),
        ep(
            "post",
            "/runs/{run_id}/environments/{env_id}/review",
            "environments",
            User,
            "Mark an environment good, broken or reward_hackable with a comment (editor or owner; replaces the caller's mark)",
            post(environments::review),
        ),
        ep(
            "get",
            "/runs/{run_id}/metrics",
            "metrics",
            User,
            "Metric names with point counts and step ranges",
            get(metrics::names),
        ),
        ep(
            "get",
            "/runs/{run_id}/metrics/{name}",
            "metrics",
            User,
            "One metric, downsampled on the server to at most `points` points (LTTB)",
            get(metrics::series),
        ),
        ep(
            "get",
            "/runs/{run_id}/metrics.csv",
            "metrics",
            User,
            "CSV export of metrics (all, or `names=a,b`)",
            get(metrics::export_csv),
        ),
        ep(
            "get",
            "/compare/metrics.csv",
            "metrics",
            User,
            "CSV export of several runs' metrics (`runs=1,2`, optional `names=a,b`), as the compare view shows them",
            get(metrics::compare_csv),
        ),
        ep(
            "get",
            "/runs/{run_id}/logs",
            "runs",
            User,
            "The end of the run's job output (`bytes`, default 64 KiB), read through its executor",
            get(logs::job_logs),
        ),
        ep(
            "get",
            "/runs/{run_id}/log.txt",
            "runs",
            User,
            "The run's log as a file: the last MiB of its job output, or the lines its worker reported; grep=TEXT keeps the lines that contain it",
            get(logs::log_file),
        ),
        ep(
            "get",
            "/runs/{run_id}/checkpoints",
            "artifacts",
            User,
            "Checkpoints",
            get(artifacts::checkpoints),
        ),
        ep(
            "get",
            "/runs/{run_id}/checkpoints/{step}/download",
            "artifacts",
            User,
            "A checkpoint's files as a zip (stored, streamed; regular files only)",
            get(artifacts::checkpoint_zip),
        ),
        ep(
            "get",
            "/runs/{run_id}/benchmarks",
            "artifacts",
            User,
            "Benchmark results",
            get(artifacts::benchmarks),
        ),
        ep(
            "get",
            "/benchmarks.csv",
            "artifacts",
            User,
            "The paper's table of several runs as CSV (`runs=1,2`, `rows=newest|checkpoints`): suite means with standard errors, then the games and tool-use averages",
            get(artifacts::benchmarks_csv),
        ),
        ep(
            "get",
            "/runs/{run_id}/evaluations",
            "artifacts",
            User,
            "Evaluations of the run's checkpoints with their jobs' states, newest first",
            get(evaluations::list),
        ),
        ep(
            "post",
            "/runs/{run_id}/evaluations",
            "artifacts",
            User,
            "Queue an evaluation: {checkpoint_step, suite, limit?, max_new_tokens?, samples?, temperature?} (editors)",
            post(evaluations::create),
        ),
        ep(
            "get",
            "/runs/{run_id}/shares",
            "shares",
            User,
            "Share links of a run",
            get(shares::list),
        ),
        ep(
            "post",
            "/runs/{run_id}/shares",
            "shares",
            User,
            "Create a read-only share link: {label?, expires_in_days?}; the token is shown once (editor)",
            post(shares::create),
        ),
        ep(
            "delete",
            "/runs/{run_id}/shares/{share_id}",
            "shares",
            User,
            "Revoke a share link (editor)",
            delete(shares::revoke),
        ),
        ep(
            "get",
            "/shared/{token}",
            "shares",
            ShareLink,
            "A shared run, without login",
            get(shares::shared_run),
        ),
        ep(
            "get",
            "/shared/{token}/environments",
            "shares",
            ShareLink,
            "Environments of a shared run (same filters as for members)",
            get(shares::shared_environments),
        ),
        ep(
            "get",
            "/shared/{token}/pool.zip",
            "shares",
            ShareLink,
            "The pool zip of a shared run (same filters as for members)",
            get(pool_zip::shared_zip),
        ),
        ep(
            "get",
            "/shared/{token}/metrics/{name}",
            "shares",
            ShareLink,
            "One metric of a shared run, downsampled",
            get(shares::shared_series),
        ),
        ep(
            "post",
            spade::report::routes::INGEST,
            "ingest",
            RunToken,
            "Worker: a batch of at most 500 envelopes (idempotent keys); replies with acknowledged keys and cancel_requested",
            post(ingest::ingest),
        ),
        ep(
            "get",
            spade::report::routes::INGEST_CONFIG,
            "ingest",
            RunToken,
            "Worker: the run configuration as TOML",
            get(ingest::config),
        ),
        ep(
            "post",
            spade::report::routes::EVALUATION_RESULTS,
            "ingest",
            RunToken,
            "Evaluation job (its own token): replaces the evaluation's results with {messages: [benchmark_result, ...]}",
            post(evaluations::results),
        ),
    ]
}

/// A download: `body` as `content_type`, saved by the browser as `file`.
pub(crate) fn attachment(
    content_type: &str,
    file: &str,
    body: impl Into<axum::body::Body>,
) -> Response {
    use axum::http::header;
    (
        [
            (header::CONTENT_TYPE, content_type.to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{file}\""),
            ),
        ],
        body.into(),
    )
        .into_response()
}
