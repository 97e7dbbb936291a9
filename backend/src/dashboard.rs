//! The dashboard's data source and its HTML forms. [`Dashboard`] implements
//! `spade_app::data::DashboardData`: it authenticates the request head with the same
//! extractor as the API (access cookie; GET, so no CSRF) and turns `spade-db` rows into the DTOs
//! the pages render. `forms` holds the POST routes of the pages' plain HTML forms (log in,
//! register, log out, cancel, resume, launch, teams, share links), which reuse the API's
//! handlers so the rules (rate limits, roles, audit, CSRF) are the same for both. `launch`
//! builds and checks the launch form; `shared` reads a run through a share link.

pub mod forms;
pub mod launch;
pub mod shared;

use crate::AppState;
use crate::auth::AuthUser;
use crate::service;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use spade_app::data::{
    Access, BenchmarksPageData, DashboardData, DataError, DataFuture, EnvListQuery,
    EnvironmentsData, RunData, RunsData, SharedRunData, TeamsData,
};
use spade_app::dto;
use spade_db::{DbError, Role, RunScope, TeamScope, artifacts, evaluations, runs, teams};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Runs per page of the runs list.
const RUNS_PER_PAGE: i64 = 20;
/// Runs with results the team's benchmarks page compares (newest first).
const BENCHMARK_RUNS: i64 = 50;
/// Environments per page of the browser.
const ENVS_PER_PAGE: i64 = 50;

/// The backend's [`DashboardData`].
#[derive(Debug, Clone)]
pub struct Dashboard {
    pub state: AppState,
}

/// A page's error from the API's: the same kinds (404, 403, 422), the message as the API words
/// it.
pub(crate) fn app_err(e: crate::error::AppError) -> DataError {
    use crate::error::AppError;
    match e {
        AppError::NotFound(what) => DataError::NotFound(what),
        AppError::Forbidden { message, .. } => DataError::Forbidden(message),
        AppError::Invalid { message, .. } | AppError::BadRequest { message, .. } => {
            DataError::Invalid(message)
        }
        other => {
            tracing::error!(error = %other, "dashboard: service error");
            DataError::Unavailable
        }
    }
}

pub(crate) fn db_err(e: DbError) -> DataError {
    match e {
        DbError::NotFound(what) => DataError::NotFound(what.to_owned()),
        other => {
            tracing::error!(error = %other, "dashboard: database error");
            DataError::Unavailable
        }
    }
}

impl Dashboard {
    /// The authenticated caller, or `None` (no cookie, expired, revoked).
    /// The last lines of the run's job output (the worker's stdout and stderr: warm-start
    /// epochs, every step), which say far more than the few lines a worker reports; `None`
    /// without a scheduler, a job or any output (then the reported lines are shown).
    async fn job_output_tail(&self, run_id: i64) -> Option<Vec<dto::LogLine>> {
        let settings = self.state.scheduler.as_deref()?;
        let text = crate::scheduling::run_logs(&self.state.db, settings, run_id, LOG_TAIL_BYTES)
            .await
            .map_err(|e| tracing::warn!(run_id, error = %e, "job output unreadable"))
            .ok()??;
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        if lines.is_empty() {
            return None;
        }
        // The first line may be cut mid-way by the byte window.
        let cut = usize::from(text.len() >= LOG_TAIL_BYTES);
        let start = lines.len().saturating_sub(LOG_TAIL_LINES as usize).max(cut);
        Some(
            lines[start..]
                .iter()
                .map(|l| dto::LogLine {
                    level: "out".into(),
                    line: (*l).to_owned(),
                })
                .collect(),
        )
    }

    async fn auth(&self, req: &Parts) -> Option<AuthUser> {
        let mut parts = req.clone();
        AuthUser::from_request_parts(&mut parts, &self.state)
            .await
            .ok()
    }

    async fn member(&self, auth: &AuthUser, run_id: i64) -> Result<RunScope, DataError> {
        RunScope::for_member(&self.state.db, auth.user.id, run_id)
            .await
            .map_err(db_err)
    }

    async fn summary(
        &self,
        scope: &RunScope,
        r: &runs::Run,
        project: String,
    ) -> Result<dto::RunSummary, DataError> {
        crate::service::runs::summary(&self.state.db, scope, r, project)
            .await
            .map_err(app_err)
    }

    /// `new_token`: a share token created just now (from its cookie), shown to editors once.
    async fn run_data(
        &self,
        auth: &AuthUser,
        run_id: i64,
        origin: &str,
        new_token: Option<&str>,
    ) -> Result<RunData, DataError> {
        let db = &self.state.db;
        let scope = self.member(auth, run_id).await?;
        let r = runs::get(db, &scope).await.map_err(db_err)?;
        let team = TeamScope::for_member(db, auth.user.id, scope.team_id())
            .await
            .map_err(db_err)?;
        let project = teams::projects(db, &team)
            .await
            .map_err(db_err)?
            .into_iter()
            .find(|p| p.id == r.project_id)
            .map_or_else(|| format!("project {}", r.project_id), |p| p.name);
        let summary = self.summary(&scope, &r, project).await?;
        let metrics = Arc::unwrap_or_clone(self.metric_series(&scope).await?);
        let log_tail = match self.job_output_tail(run_id).await {
            Some(lines) => lines,
            None => spade_db::logs::tail(db, &scope, LOG_TAIL_LINES)
                .await
                .map_err(db_err)?
                .into_iter()
                .map(|l| dto::LogLine {
                    level: l.level,
                    line: l.line,
                })
                .collect(),
        };
        let mut run = run_detail(&r, summary, log_tail, scope.can_edit());
        if run.phase.is_none() && run.summary.status.is_active() {
            run.phase = warm_start_phase(&run.log_tail);
        }
        let benchmarks = run_benchmarks(db, &scope, &r.name).await?;
        let shares = if scope.can_edit() {
            let links = spade_db::shares::list(db, &scope)
                .await
                .map_err(db_err)?
                .into_iter()
                .map(|l| dto::ShareDto {
                    id: l.id,
                    created_at: rfc3339(&l.created_at),
                    revoked_at: l.revoked_at.as_ref().map(rfc3339),
                    label: l.label,
                    expires_at: l.expires_at.as_ref().map(rfc3339),
                    expired: l.expires_at.is_some_and(|t| t <= chrono::Utc::now()),
                })
                .collect();
            Some(dto::SharesDto {
                origin: origin.to_owned(),
                links,
                new_token: new_token.map(str::to_owned),
            })
        } else {
            None
        };
        Ok(RunData {
            run,
            metrics,
            benchmarks,
            shares,
        })
    }

    /// The viewer's teams, and the scope of the one a team page shows: `team`, else the
    /// viewer's first (`None` when the viewer is in no team).
    async fn chosen_team(
        &self,
        auth: &AuthUser,
        team: Option<i64>,
    ) -> Result<(Vec<dto::TeamDto>, Option<TeamScope>), DataError> {
        let db = &self.state.db;
        let mine = service::teams::teams_of(db, auth.user.id)
            .await
            .map_err(app_err)?;
        let first = mine.first().map(|t| t.id);
        let dtos = mine.into_iter().map(dto::TeamDto::from).collect();
        let Some(team_id) = team.or(first) else {
            return Ok((dtos, None));
        };
        let scope = TeamScope::for_member(db, auth.user.id, team_id)
            .await
            .map_err(db_err)?;
        Ok((dtos, Some(scope)))
    }

    /// Every metric of a run, each downsampled for a chart (cached per run).
    async fn metric_series(
        &self,
        scope: &RunScope,
    ) -> Result<Arc<Vec<dto::MetricSeries>>, DataError> {
        service::metrics::charts(&self.state, scope)
            .await
            .map_err(app_err)
    }

    /// The invitation of team `team_id` the invite form made just now (its `ID:CODE` cookie),
    /// if it is still open: its link, shown once.
    fn new_invitation(
        &self,
        req: &Parts,
        team_id: i64,
        open: &[dto::InvitationRecord],
    ) -> Option<dto::NewInvitation> {
        let value = crate::auth::cookie(&req.headers, &dto::new_invitation_cookie(team_id))?;
        let (id, code) = value.split_once(':')?;
        let id: i64 = id.parse().ok()?;
        if !service::teams::invitations::looks_like_code(code) {
            return None;
        }
        let inv = open.iter().find(|i| i.id == id)?;
        let origin = self.state.public_url.clone().unwrap_or_default();
        Some(dto::NewInvitation {
            id,
            email: inv.email.clone(),
            link: format!("{origin}{}", dto::invitation_path(id, code)),
        })
    }
}

/// A run's row as its page shows it.
pub(crate) fn run_detail(
    r: &runs::Run,
    summary: dto::RunSummary,
    log_tail: Vec<dto::LogLine>,
    can_control: bool,
) -> dto::RunDetail {
    dto::RunDetail {
        summary,
        config: r.config.clone(),
        executor: r.executor.clone(),
        seed: r.seed,
        code_version: r.code_version.clone(),
        phase: r.phase.clone().filter(|p| !p.is_empty()),
        message: r.status_message.clone().filter(|m| !m.is_empty()),
        log_tail,
        can_control,
    }
}

/// Lines of log the run page shows at most.
const LOG_TAIL_LINES: i64 = 200;
/// Bytes of the end of the job output read for them.
const LOG_TAIL_BYTES: usize = 64 * 1024;

fn rfc3339(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The phase of a run whose worker has reported none yet, from its output: the tiny model's
/// warm start (minutes of SFT before the first step) prints `warm start: ...` lines, with
/// `epoch N/M` as it trains. `None` when the output says nothing of a warm start.
pub(crate) fn warm_start_phase(lines: &[dto::LogLine]) -> Option<String> {
    let mut seen = false;
    let mut epoch = None;
    for l in lines {
        let Some(rest) = l.line.trim_start().strip_prefix("warm start") else {
            continue;
        };
        seen = true;
        if let Some(e) = rest
            .split("epoch ")
            .nth(1)
            .and_then(|t| t.split_whitespace().next())
        {
            epoch = Some(e.to_owned());
        }
    }
    seen.then(|| match epoch {
        Some(e) => format!("warm start (epoch {e})"),
        None => "warm start".to_owned(),
    })
}

impl DashboardData for Dashboard {
    fn viewer<'a>(&'a self, req: &'a Parts) -> DataFuture<'a, Option<dto::Viewer>> {
        Box::pin(async move {
            Ok(self.auth(req).await.map(|a| dto::Viewer {
                csrf: self.state.auth.signer.csrf_token(a.session_id),
                user: dto::UserDto {
                    id: a.user.id,
                    email: a.user.email.clone(),
                    display_name: a.user.display_name.clone(),
                },
            }))
        })
    }

    fn runs<'a>(
        &'a self,
        req: &'a Parts,
        team: Option<i64>,
        status: Option<String>,
        name: Option<String>,
        sort: Option<String>,
        cursor: Option<String>,
    ) -> DataFuture<'a, Access<RunsData>> {
        Box::pin(async move {
            let Some(auth) = self.auth(req).await else {
                return Ok(Access::LoginRequired);
            };
            let db = &self.state.db;
            let (teams_dto, chosen) = self.chosen_team(&auth, team).await?;
            let Some(scope) = chosen else {
                let runs = dto::Page {
                    items: Vec::new(),
                    next_cursor: None,
                };
                return Ok(Access::Granted(RunsData {
                    teams: teams_dto,
                    team: None,
                    runs,
                }));
            };
            let team_id = scope.team_id();
            let args = crate::service::runs::ListArgs {
                status: status.as_deref(),
                q: name.as_deref(),
                sort: sort.as_deref(),
                cursor: cursor.as_deref(),
                limit: RUNS_PER_PAGE,
                ..Default::default()
            };
            let runs = crate::service::runs::summaries(db, &scope, args)
                .await
                .map_err(app_err)?;
            Ok(Access::Granted(RunsData {
                teams: teams_dto,
                team: Some(team_id),
                runs,
            }))
        })
    }

    fn run<'a>(&'a self, req: &'a Parts, run_id: i64) -> DataFuture<'a, Access<RunData>> {
        Box::pin(async move {
            match self.auth(req).await {
                None => Ok(Access::LoginRequired),
                Some(auth) => {
                    // Links people copy name the configured address: a request's `Host` header
                    // is whatever the client put there.
                    let origin = self.state.public_url.clone().unwrap_or_default();
                    let cookie = dto::new_share_cookie(run_id);
                    let new_token = crate::auth::cookie(&req.headers, &cookie)
                        .filter(|t| crate::auth::tokens::looks_like_share_token(t));
                    Ok(Access::Granted(
                        self.run_data(&auth, run_id, &origin, new_token).await?,
                    ))
                }
            }
        })
    }

    fn benchmarks<'a>(
        &'a self,
        req: &'a Parts,
        team: Option<i64>,
    ) -> DataFuture<'a, Access<BenchmarksPageData>> {
        Box::pin(async move {
            let Some(auth) = self.auth(req).await else {
                return Ok(Access::LoginRequired);
            };
            let db = &self.state.db;
            let (teams_dto, chosen) = self.chosen_team(&auth, team).await?;
            let Some(scope) = chosen else {
                return Ok(Access::Granted(BenchmarksPageData {
                    teams: teams_dto,
                    team: None,
                    runs: Vec::new(),
                }));
            };
            let team_id = scope.team_id();
            let rows = artifacts::team_benchmarks(db, &scope, BENCHMARK_RUNS)
                .await
                .map_err(db_err)?;
            let mut runs: Vec<(i64, String, dto::BenchmarksDto)> = Vec::new();
            for r in rows {
                if runs.last().is_none_or(|(id, _, _)| *id != r.run_id) {
                    runs.push((r.run_id, r.run_name.clone(), dto::BenchmarksDto::default()));
                }
                if let Some((_, _, b)) = runs.last_mut() {
                    b.rows.push(dto::BenchmarkRow {
                        run_id: r.run_id,
                        run_name: r.run_name,
                        checkpoint_step: r.checkpoint_step.and_then(|s| u64::try_from(s).ok()),
                        suite: r.suite,
                        task: "all".into(),
                        score: r.score,
                        n: u32::try_from(r.n).unwrap_or(0),
                    });
                }
            }
            Ok(Access::Granted(BenchmarksPageData {
                teams: teams_dto,
                team: Some(team_id),
                runs,
            }))
        })
    }

    fn environments<'a>(
        &'a self,
        req: &'a Parts,
        run_id: i64,
        q: EnvListQuery,
    ) -> DataFuture<'a, Access<EnvironmentsData>> {
        Box::pin(async move {
            let Some(auth) = self.auth(req).await else {
                return Ok(Access::LoginRequired);
            };
            let db = &self.state.db;
            let scope = self.member(&auth, run_id).await?;
            let run = runs::get(db, &scope).await.map_err(db_err)?;
            // The API's query and checks: one place for the filters, limits and cursors.
            let to_i64 = |v: Option<u64>| v.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
            let query = service::environments::EnvQuery {
                skill: q.skill.clone(),
                status: q
                    .status
                    .as_deref()
                    .map(service::environments::parse_status)
                    .transpose()
                    .map_err(app_err)?,
                step_min: to_i64(q.step_min),
                step_max: to_i64(q.step_max),
                regret_min: q.regret_min,
                regret_max: None,
                verdict: q.verdict.clone(),
                sort: q.sort.clone(),
                limit: Some(ENVS_PER_PAGE),
                cursor: q.cursor.clone(),
            };
            let envs = service::environments::summaries(db, &scope, query)
                .await
                .map_err(app_err)?;
            Ok(Access::Granted(EnvironmentsData {
                run_name: run.name,
                skills: spade::skills::SKILLS
                    .iter()
                    .map(|s| s.name.to_owned())
                    .collect(),
                envs,
            }))
        })
    }

    fn environment<'a>(
        &'a self,
        req: &'a Parts,
        run_id: i64,
        env_id: String,
    ) -> DataFuture<'a, Access<dto::EnvironmentDetail>> {
        Box::pin(async move {
            let Some(auth) = self.auth(req).await else {
                return Ok(Access::LoginRequired);
            };
            let db = &self.state.db;
            let scope = self.member(&auth, run_id).await?;
            let run = runs::get(db, &scope).await.map_err(db_err)?;
            let detail = service::environments::page_detail(db, &scope, &env_id, run.name)
                .await
                .map_err(app_err)?;
            Ok(Access::Granted(detail))
        })
    }

    fn launch<'a>(
        &'a self,
        req: &'a Parts,
        preset: Option<String>,
        project: Option<i64>,
    ) -> DataFuture<'a, Access<dto::LaunchForm>> {
        Box::pin(async move {
            let Some(auth) = self.auth(req).await else {
                return Ok(Access::LoginRequired);
            };
            // A refused submission renders the page again with what was typed.
            if let Some(draft) = req.extensions.get::<launch::LaunchDraft>() {
                return Ok(Access::Granted(draft.0.clone()));
            }
            let form = launch::fresh_form(&self.state, &auth, preset.as_deref(), project)
                .await
                .map_err(db_err)?;
            Ok(Access::Granted(form))
        })
    }

    fn teams<'a>(&'a self, req: &'a Parts) -> DataFuture<'a, Access<TeamsData>> {
        Box::pin(async move {
            let Some(auth) = self.auth(req).await else {
                return Ok(Access::LoginRequired);
            };
            let db = &self.state.db;
            let mut out = Vec::new();
            for t in service::teams::teams_of(db, auth.user.id)
                .await
                .map_err(app_err)?
            {
                let scope = TeamScope::for_member(db, auth.user.id, t.id)
                    .await
                    .map_err(db_err)?;
                let members = service::teams::members(db, &scope).await.map_err(app_err)?;
                let projects = service::teams::projects(db, &scope)
                    .await
                    .map_err(app_err)?
                    .into_iter()
                    .map(dto::ProjectDto::from)
                    .collect();
                // Open invitations name emails that are not members: owners only.
                let invitations = if scope.role() == Role::Owner {
                    service::teams::invitations::of_team(&self.state, &auth, t.id)
                        .await
                        .map_err(app_err)?
                } else {
                    Vec::new()
                };
                let new_invitation = self.new_invitation(req, t.id, &invitations);
                out.push(dto::TeamDetail {
                    team: t.into(),
                    members,
                    projects,
                    invitations,
                    new_invitation,
                });
            }
            let invitations = service::teams::invitations::mine(&self.state, &auth)
                .await
                .map_err(app_err)?;
            Ok(Access::Granted(TeamsData {
                viewer_id: auth.user.id,
                teams: out,
                invitations,
            }))
        })
    }

    fn shared<'a>(&'a self, _req: &'a Parts, token: String) -> DataFuture<'a, SharedRunData> {
        Box::pin(async move { shared::shared_run(self, &token).await })
    }
}

/// A run's benchmark rows, evaluations and checkpoint steps for its page and the compare view.
async fn run_benchmarks(
    db: &spade_db::Pool,
    scope: &RunScope,
    run_name: &str,
) -> Result<dto::BenchmarksDto, DataError> {
    let to_u64 = |v: i64| u64::try_from(v).unwrap_or(0);
    let rows = artifacts::benchmark_results(db, scope)
        .await
        .map_err(db_err)?
        .into_iter()
        .map(|b| dto::BenchmarkRow {
            run_id: scope.run_id(),
            run_name: run_name.to_owned(),
            checkpoint_step: b.checkpoint_step.map(to_u64),
            suite: b.suite,
            task: b.task,
            score: b.score,
            n: u32::try_from(b.n).unwrap_or(0),
        })
        .collect();
    let evaluations = evaluations::list(db, scope)
        .await
        .map_err(db_err)?
        .into_iter()
        .map(|e| dto::EvaluationDto {
            id: e.id,
            checkpoint_step: to_u64(e.checkpoint_step),
            suite: e.suite,
            trigger: e.trigger,
            state: serde_json::to_value(e.state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            message: e.message,
            created_at: rfc3339(&e.created_at),
            finished_at: e.finished_at.as_ref().map(rfc3339),
        })
        .collect();
    let checkpoints = artifacts::checkpoints(db, scope)
        .await
        .map_err(db_err)?
        .into_iter()
        .map(|c| to_u64(c.step))
        .collect();
    Ok(dto::BenchmarksDto {
        rows,
        evaluations,
        checkpoints,
        can_evaluate: scope.can_edit(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page keeps the API's kind of refusal, so it is answered 404, 403 or 422 as the API
    /// would, never the 503 of a failure.
    #[test]
    fn page_errors_keep_the_apis_kinds() {
        use crate::error::AppError;
        assert_eq!(
            app_err(AppError::NotFound("run".into())),
            DataError::NotFound("run".into())
        );
        assert_eq!(
            app_err(AppError::Forbidden {
                code: "role",
                message: "editors only".into()
            }),
            DataError::Forbidden("editors only".into())
        );
        assert!(matches!(
            app_err(AppError::invalid("limit", "too big")),
            DataError::Invalid(_)
        ));
    }

    fn out(lines: &[&str]) -> Vec<dto::LogLine> {
        lines
            .iter()
            .map(|l| dto::LogLine {
                level: "out".into(),
                line: (*l).to_owned(),
            })
            .collect()
    }

    #[test]
    fn the_warm_start_is_a_phase_with_its_epoch() {
        assert_eq!(warm_start_phase(&out(&["loading corpus"])), None);
        assert_eq!(
            warm_start_phase(&out(&[
                "warm start: 30 designer, 30 hint, 120 agent sequences, 90000 tokens, 20 epochs"
            ]))
            .as_deref(),
            Some("warm start")
        );
        assert_eq!(
            warm_start_phase(&out(&[
                "warm start: 30 designer, 30 hint, 120 agent sequences, 90000 tokens, 20 epochs",
                "warm start: epoch 1/20 loss 3.100 (9 s)",
                "warm start: epoch 2/20 loss 2.700 (18 s)",
            ]))
            .as_deref(),
            Some("warm start (epoch 2/20)")
        );
    }
}

/// The charts last drawn for each of the most recently viewed runs, with the series revisions
/// they were drawn from ([`Dashboard::metric_series`]). Bounded: past [`ChartCache::RUNS`] runs
/// the one viewed longest ago is dropped.
#[derive(Debug, Default)]
pub struct ChartCache {
    inner: Mutex<ChartCacheInner>,
}

#[derive(Debug, Default)]
struct ChartCacheInner {
    clock: u64,
    runs: HashMap<i64, CachedCharts>,
}

#[derive(Debug)]
struct CachedCharts {
    used: u64,
    fingerprint: Vec<(String, i64)>,
    series: Arc<Vec<dto::MetricSeries>>,
}

impl ChartCache {
    /// Runs whose charts are kept (each a few hundred KB at most).
    pub const RUNS: usize = 64;

    fn lock(&self) -> std::sync::MutexGuard<'_, ChartCacheInner> {
        // Every update leaves the map whole, so a poisoned lock is still usable.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The charts of `run` if they were drawn from exactly these series revisions.
    pub fn get(
        &self,
        run: i64,
        fingerprint: &[(String, i64)],
    ) -> Option<Arc<Vec<dto::MetricSeries>>> {
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        let hit = inner
            .runs
            .get_mut(&run)
            .filter(|c| c.fingerprint == fingerprint)?;
        hit.used = now;
        Some(Arc::clone(&hit.series))
    }

    pub fn put(
        &self,
        run: i64,
        fingerprint: Vec<(String, i64)>,
        series: Arc<Vec<dto::MetricSeries>>,
    ) {
        let mut inner = self.lock();
        inner.clock += 1;
        let used = inner.clock;
        if inner.runs.len() >= Self::RUNS
            && !inner.runs.contains_key(&run)
            && let Some(oldest) = inner
                .runs
                .iter()
                .min_by_key(|(_, c)| c.used)
                .map(|(id, _)| *id)
        {
            inner.runs.remove(&oldest);
        }
        inner.runs.insert(
            run,
            CachedCharts {
                used,
                fingerprint,
                series,
            },
        );
    }
}

#[cfg(test)]
mod chart_cache_tests {
    use super::*;

    fn charts(name: &str) -> Arc<Vec<dto::MetricSeries>> {
        Arc::new(vec![dto::MetricSeries {
            name: name.into(),
            points: Vec::new(),
        }])
    }

    #[test]
    fn a_changed_revision_misses_and_the_least_recently_viewed_run_goes_first() {
        let c = ChartCache::default();
        let fp = |r: i64| vec![("loss".to_owned(), r)];
        c.put(1, fp(3), charts("a"));
        assert!(c.get(1, &fp(3)).is_some());
        assert!(c.get(1, &fp(4)).is_none(), "a new revision is drawn again");
        assert!(
            c.get(2, &fp(3)).is_none(),
            "another run's charts are not this run's"
        );
        for run in 2..=ChartCache::RUNS as i64 {
            c.put(run, fp(0), charts("b"));
        }
        // Run 1 is viewed again, so run 2 is now the one viewed longest ago.
        assert!(c.get(1, &fp(3)).is_some());
        c.put(1_000, fp(0), charts("c"));
        assert!(c.get(2, &fp(0)).is_none());
        assert!(c.get(1, &fp(3)).is_some());
        assert!(c.get(1_000, &fp(0)).is_some());
    }
}
