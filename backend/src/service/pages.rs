//! What each dashboard page shows, read in one call: the run page's bundle (its row, curves,
//! log tail, benchmarks, evaluations, checkpoints and share links), the runs list, the team's
//! benchmarks, the environment browser and an environment, the teams page, and the page a
//! share link opens. The pages render these; they read nothing themselves.

use super::{Caller, Ctx, ServiceResult, environments, shares};
use crate::config::SchedulerSettings;
use spade_app::data::{
    BenchmarksPageData, EnvListQuery, EnvironmentsData, RunData, RunsData, SharedRunData, TeamsData,
};
use spade_app::dto;
use spade_db::{Role, RunScope, TeamScope, artifacts, evaluations, runs, teams};
use std::sync::Arc;

/// Runs per page of the runs list.
const RUNS_PER_PAGE: i64 = 20;
/// Runs with results the team's benchmarks page compares (newest first).
const BENCHMARK_RUNS: i64 = 50;
/// Environments per page of the browser.
const ENVS_PER_PAGE: i64 = 50;
/// Environments listed on the shared page.
const SHARED_ENVS: i64 = 50;
/// Lines of log the run page shows at most.
const LOG_TAIL_LINES: i64 = 200;
/// Bytes of the end of the job output read for them.
const LOG_TAIL_BYTES: usize = 64 * 1024;

/// The run page: `origin` prefixes share links; `new_token` is a share token created just now,
/// shown to editors once.
pub async fn run(
    ctx: &Ctx,
    caller: &Caller,
    run_id: i64,
    origin: &str,
    new_token: Option<&str>,
) -> ServiceResult<RunData> {
    let db = &ctx.db;
    let scope = super::member_scope(ctx, caller, run_id).await?;
    let r = runs::get(db, &scope).await?;
    let team = super::teams::member_team(ctx, caller, scope.team_id()).await?;
    let project = teams::projects(db, &team)
        .await?
        .into_iter()
        .find(|p| p.id == r.project_id)
        .map_or_else(|| format!("project {}", r.project_id), |p| p.name);
    let summary = super::runs::summary(db, &scope, &r, project).await?;
    let metrics = Arc::unwrap_or_clone(super::metrics::charts(ctx, &scope).await?);
    let log_tail = match job_output_tail(ctx, run_id).await {
        Some(lines) => lines,
        None => spade_db::logs::tail(db, &scope, LOG_TAIL_LINES)
            .await?
            .into_iter()
            .map(|l| dto::LogLine {
                level: l.level,
                line: l.line,
            })
            .collect(),
    };
    let mut run = dto::RunDetail::of(super::runs::record(&r), summary, log_tail, scope.can_edit());
    run.team_id = scope.team_id();
    if run.phase.is_none() && run.summary.status.is_active() {
        run.phase = warm_start_phase(&run.log_tail);
    }
    if run.summary.status == spade_db::RunStatus::Queued {
        run.queue = spade_db::jobs::queue_place(db, run_id, None)
            .await
            .map_err(|e| super::ServiceError::Internal(e.into()))?
            .map(|p| queue_text(p, ctx.scheduler.as_deref()));
    }
    let benchmarks = run_benchmarks(ctx, &scope, &r.name).await?;
    let shares = if scope.can_edit() {
        Some(dto::SharesDto {
            origin: origin.to_owned(),
            links: shares::list(db, &scope)
                .await?
                .into_iter()
                .map(dto::ShareDto::from)
                .collect(),
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

/// The viewer's teams, and the scope of the one a team page shows: `team`, else the viewer's
/// first (`None` when the viewer is in no team).
async fn chosen_team(
    ctx: &Ctx,
    caller: &Caller,
    team: Option<i64>,
) -> ServiceResult<(Vec<dto::TeamDto>, Option<TeamScope>)> {
    let mine = super::teams::teams_of(&ctx.db, caller).await?;
    let first = mine.first().map(|t| t.id);
    let dtos = mine.into_iter().map(dto::TeamDto::from).collect();
    let Some(team_id) = team.or(first) else {
        return Ok((dtos, None));
    };
    let scope = super::teams::member_team(ctx, caller, team_id).await?;
    Ok((dtos, Some(scope)))
}

/// What the runs list filters by; every field as the address gave it, checked by
/// [`super::runs::summaries`].
#[derive(Debug, Default, Clone)]
pub struct RunsQuery {
    pub team: Option<i64>,
    pub status: Option<String>,
    pub name: Option<String>,
    pub sort: Option<String>,
    pub cursor: Option<String>,
    /// Tag, configuration value and metric range, checked by the page.
    pub search: spade_app::dto::RunSearch,
}

/// The runs list of the chosen team.
pub async fn runs(ctx: &Ctx, caller: &Caller, q: &RunsQuery) -> ServiceResult<RunsData> {
    let (teams, chosen) = chosen_team(ctx, caller, q.team).await?;
    let Some(scope) = chosen else {
        return Ok(RunsData {
            teams,
            team: None,
            runs: dto::Page {
                items: Vec::new(),
                next_cursor: None,
            },
        });
    };
    let args = super::runs::ListArgs {
        status: q.status.as_deref(),
        q: q.name.as_deref(),
        sort: q.sort.as_deref(),
        cursor: q.cursor.as_deref(),
        limit: RUNS_PER_PAGE,
        tag: q.search.tag.as_deref(),
        config: q.search.config.as_deref(),
        metric: q.search.metric.as_deref(),
        metric_min: q.search.min(),
        metric_max: q.search.max(),
        ..Default::default()
    };
    let runs = super::runs::summaries(&ctx.db, &scope, args).await?;
    Ok(RunsData {
        teams,
        team: Some(scope.team_id()),
        runs,
    })
}

/// Runs of each team the compare picker offers.
const CHOICES_PER_TEAM: i64 = 100;

/// The compare page's picker: the newest runs of every team the caller is in, team by team,
/// with their projects' names.
pub async fn run_choices(ctx: &Ctx, caller: &Caller) -> ServiceResult<Vec<dto::RunChoice>> {
    let mut out = Vec::new();
    for team in super::teams::teams_of(&ctx.db, caller).await? {
        let scope = super::teams::member_team(ctx, caller, team.id).await?;
        let projects: std::collections::BTreeMap<i64, String> = teams::projects(&ctx.db, &scope)
            .await?
            .into_iter()
            .map(|p| (p.id, p.name))
            .collect();
        let args = super::runs::ListArgs {
            limit: CHOICES_PER_TEAM,
            ..Default::default()
        };
        for r in super::runs::page(&ctx.db, &scope, args).await?.items {
            out.push(dto::RunChoice {
                id: r.id,
                team: team.name.clone(),
                project: projects.get(&r.project_id).cloned().unwrap_or_default(),
                name: r.name,
                status: r.status,
            });
        }
    }
    Ok(out)
}

/// The chosen team's benchmark results, grouped by run (newest runs first).
pub async fn benchmarks(
    ctx: &Ctx,
    caller: &Caller,
    team: Option<i64>,
) -> ServiceResult<BenchmarksPageData> {
    let (teams, chosen) = chosen_team(ctx, caller, team).await?;
    let Some(scope) = chosen else {
        return Ok(BenchmarksPageData {
            teams,
            team: None,
            runs: Vec::new(),
        });
    };
    let rows = artifacts::team_benchmarks(&ctx.db, &scope, BENCHMARK_RUNS).await?;
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
                stderr: r.stderr,
                samples: u32::try_from(r.samples).unwrap_or(1),
            });
        }
    }
    Ok(BenchmarksPageData {
        teams,
        team: Some(scope.team_id()),
        runs,
    })
}

/// One page of a run's environment browser, with the API's filters, limits and cursors.
pub async fn environments(
    ctx: &Ctx,
    caller: &Caller,
    run_id: i64,
    q: &EnvListQuery,
) -> ServiceResult<EnvironmentsData> {
    let db = &ctx.db;
    let scope = super::member_scope(ctx, caller, run_id).await?;
    let run = runs::get(db, &scope).await?;
    let to_i64 = |v: Option<u64>| v.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
    let query = environments::EnvQuery {
        skill: q.skill.clone(),
        status: q
            .status
            .as_deref()
            .map(environments::parse_status)
            .transpose()?,
        step_min: to_i64(q.step_min),
        step_max: to_i64(q.step_max),
        regret_min: q.regret_min,
        regret_max: None,
        verdict: q.verdict.clone(),
        sort: q.sort.clone(),
        limit: Some(ENVS_PER_PAGE),
        cursor: q.cursor.clone(),
    };
    let envs = environments::summaries(db, &scope, query).await?;
    Ok(EnvironmentsData {
        run_name: run.name,
        skills: spade::skills::SKILLS
            .iter()
            .map(|s| s.name.to_owned())
            .collect(),
        envs,
    })
}

/// One environment's page.
pub async fn environment(
    ctx: &Ctx,
    caller: &Caller,
    run_id: i64,
    env_id: &str,
) -> ServiceResult<dto::EnvironmentDetail> {
    let scope = super::member_scope(ctx, caller, run_id).await?;
    let run = runs::get(&ctx.db, &scope).await?;
    environments::page_detail(&ctx.db, &scope, env_id, run.name).await
}

/// The teams page: every team of the caller with its members, projects, API tokens (owners all,
/// others their own) and (owners only) open invitations, and the invitations addressed to the
/// caller. The page adds the link of an
/// invitation made just now, which only its request knows.
pub async fn teams(ctx: &Ctx, caller: &Caller) -> ServiceResult<TeamsData> {
    let db = &ctx.db;
    let mut out = Vec::new();
    for t in super::teams::teams_of(db, caller).await? {
        let scope = super::teams::member_team(ctx, caller, t.id).await?;
        let members = super::teams::members(db, &scope).await?;
        let projects = super::teams::projects(db, &scope)
            .await?
            .into_iter()
            .map(dto::ProjectDto::from)
            .collect();
        // Open invitations name emails that are not members: owners only.
        let invitations = if scope.role() == Role::Owner {
            super::teams::invitations::of_team(ctx, caller, t.id).await?
        } else {
            Vec::new()
        };
        let tokens = super::api_tokens::list(ctx, caller, t.id).await?;
        out.push(dto::TeamDetail {
            team: t.into(),
            members,
            projects,
            invitations,
            new_invitation: None,
            tokens,
            new_token: None,
        });
    }
    Ok(TeamsData {
        viewer_id: caller.user_id,
        teams: out,
        invitations: super::teams::invitations::mine(ctx, caller).await?,
    })
}

/// The page a share link opens: the run, its curves and its first page of environments,
/// through the link's read-only scope. No log (the team's working output), no project name
/// and no review marks: they are the team's, not part of what a link shares.
pub async fn shared(ctx: &Ctx, token: &str) -> ServiceResult<SharedRunData> {
    let db = &ctx.db;
    let scope = shares::resolve(db, token).await?;
    let r = runs::get(db, &scope).await?;
    let summary = super::runs::summary(db, &scope, &r, String::new()).await?;
    let metrics = Arc::unwrap_or_clone(super::metrics::charts(ctx, &scope).await?);
    let query = environments::EnvQuery {
        limit: Some(SHARED_ENVS),
        ..environments::EnvQuery::default()
    };
    let envs = environments::page(db, &scope, query).await?.items;
    Ok(SharedRunData {
        run: dto::RunDetail::of(super::runs::record(&r), summary, Vec::new(), false),
        metrics,
        environments: envs
            .iter()
            .map(|e| dto::EnvironmentSummary::of(&environments::record(e), r.id, Vec::new()))
            .collect(),
    })
}

/// The last lines of the run's job output (the worker's stdout and stderr: warm-start epochs,
/// every step), which say far more than the few lines a worker reports; `None` without a
/// scheduler, a job or any output (then the reported lines are shown).
/// The run's log as a file to download: the end of its job's output (up to `max_bytes`, the
/// first line whole), or, when no job output can be read, the log lines its worker reported.
pub async fn log_file(
    ctx: &Ctx,
    caller: &Caller,
    run_id: i64,
    max_bytes: usize,
) -> ServiceResult<String> {
    let scope = super::member_scope(ctx, caller, run_id).await?;
    if let Some(settings) = ctx.scheduler.as_deref() {
        let output = crate::scheduling::run_logs(&ctx.db, settings, run_id, max_bytes)
            .await
            .map_err(|e| tracing::warn!(run_id, error = %e, "job output unreadable"))
            .ok()
            .flatten()
            .filter(|t| !t.trim().is_empty());
        if let Some(text) = output {
            // A window that starts mid-line drops that partial line.
            let start = if text.len() >= max_bytes {
                text.find('\n').map_or(0, |i| i + 1)
            } else {
                0
            };
            return Ok(text[start..].to_owned());
        }
    }
    let lines = spade_db::logs::tail(&ctx.db, &scope, i64::MAX).await?;
    Ok(lines
        .iter()
        .map(|l| format!("{:5} {}\n", l.level, l.line))
        .collect())
}

/// The last lines of a run's job output, for a live page that follows it
/// (`crate::api::events`): what [`run`] renders as the log, `None` where the run has no job
/// output to read (its log is then the worker's reported lines).
pub async fn output_tail(ctx: &Ctx, scope: &RunScope) -> Option<Vec<dto::LogLine>> {
    job_output_tail(ctx, scope.run_id()).await
}

async fn job_output_tail(ctx: &Ctx, run_id: i64) -> Option<Vec<dto::LogLine>> {
    let settings = ctx.scheduler.as_deref()?;
    let text = crate::scheduling::run_logs(&ctx.db, settings, run_id, LOG_TAIL_BYTES)
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

/// The phase of a run whose worker has reported none yet, from its output: the tiny model's
/// warm start (minutes of SFT before the first step) prints `warm start: ...` lines, with
/// `epoch N/M` as it trains. `None` when the output says nothing of a warm start.
pub fn warm_start_phase(lines: &[dto::LogLine]) -> Option<String> {
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
            .map(|t| {
                t.chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '/')
                    .collect::<String>()
            })
            .filter(|e| !e.is_empty())
        {
            epoch = Some(e);
        }
    }
    seen.then(|| match epoch {
        Some(e) => format!("warm start (epoch {e})"),
        None => "warm start".to_owned(),
    })
}

/// A run's benchmark rows, evaluations and checkpoint steps for its page and the compare view.
async fn run_benchmarks(
    ctx: &Ctx,
    scope: &RunScope,
    run_name: &str,
) -> ServiceResult<dto::BenchmarksDto> {
    let db = &ctx.db;
    let rows = artifacts::benchmark_results(db, scope)
        .await?
        .iter()
        .map(|b| dto::BenchmarkRow::of(scope.run_id(), run_name, super::artifacts::benchmark(b)))
        .collect();
    let mut evaluations = vec![];
    for e in evaluations::list(db, scope).await? {
        let mut dto = dto::EvaluationDto::from(super::artifacts::evaluation(&e));
        // A queued evaluation says what it waits for where a finished one says why it ended.
        if e.state == spade_db::jobs::JobState::Queued {
            dto.message = spade_db::jobs::queue_place(db, scope.run_id(), Some(e.job_id))
                .await
                .map_err(|e| super::ServiceError::Internal(e.into()))?
                .map(|p| queue_text(p, ctx.scheduler.as_deref()));
        }
        evaluations.push(dto);
    }
    let checkpoints = artifacts::checkpoints(db, scope)
        .await?
        .into_iter()
        .map(|c| u64::try_from(c.step).unwrap_or(0))
        .collect();
    Ok(dto::BenchmarksDto {
        rows,
        evaluations,
        checkpoints,
        can_evaluate: scope.can_edit(),
    })
}

/// What a queued run waits for, in words: its place in line and the executor's slots (counts
/// only: the jobs ahead may be other teams').
fn queue_text(p: spade_db::jobs::QueuePlace, settings: Option<&SchedulerSettings>) -> String {
    use crate::config::ExecutorSetting;
    let ahead = match p.ahead {
        0 => "first in line".to_owned(),
        1 => "1 job queued ahead of it".to_owned(),
        n => format!("{n} jobs queued ahead of it"),
    };
    let running = match p.busy {
        1 => "1 job is running".to_owned(),
        n => format!("{n} jobs are running"),
    };
    let executor = match p.executor {
        spade_db::jobs::JobExecutor::Local => "local",
        spade_db::jobs::JobExecutor::Ray => "Ray",
    };
    match settings {
        Some(s) if s.executor == ExecutorSetting::Off => format!(
            "Queued for the {executor} executor, {ahead}. This server runs no jobs \
             (--executor off): another server's scheduler starts it."
        ),
        Some(s) if p.executor == spade_db::jobs::JobExecutor::Local => {
            let slots = if s.gpus_per_job > 0 {
                format!(
                    "{} GPUs lent, {} GPUs per job",
                    s.lent_gpus().len(),
                    s.gpus_per_job
                )
            } else {
                format!(
                    "{} CPU slot{}",
                    s.cpu_slots,
                    if s.cpu_slots == 1 { "" } else { "s" }
                )
            };
            format!(
                "Waiting for a free slot, {ahead}: {running} on this server, which has {slots} \
                 (--cpu-slots, --gpu-slots). It starts when one frees up."
            )
        }
        Some(s) => format!(
            "Waiting for the Ray cluster, {ahead}: {running} there, at most {} at a time \
             (--ray-max-jobs).",
            s.ray_max_jobs
        ),
        None => format!("Queued for the {executor} executor, {ahead}; {running}."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                "warm start: epoch 2/20, loss 2.700 (18 s)",
            ]))
            .as_deref(),
            Some("warm start (epoch 2/20)")
        );
    }
}
