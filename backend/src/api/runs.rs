//! Runs: create from a validated configuration, list, get, cancel, resume, delete, and worker
//! tokens. The configuration is `spade::config::RunConfig`, given either as TOML text
//! (`config_toml`) or as JSON (`config`); what is stored is its JSON with every default filled
//! in, so a run can be repeated from the row alone.

use super::{AppState, editor_scope, limit, member_scope};
use crate::auth::{AuthUser, tokens};
use crate::error::{ApiJson, ApiPath, ApiQuery, ApiResult, AppError};
use crate::service;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use spade::config::{ConfigError, RunConfig};
use spade_app::dto::{Page, RunRecord};
use spade_db::runs::{self, NewRun};
use spade_db::{TeamScope, audit};

/// Executors a run may ask for.
pub const EXECUTORS: [&str; 2] = ["local", "ray"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRun {
    pub name: String,
    /// The configuration as TOML text (what `spade worker` reads).
    pub config_toml: Option<String>,
    /// The configuration as JSON (the same keys as the TOML).
    pub config: Option<serde_json::Value>,
    /// `local` (default) or `ray`.
    #[serde(default = "default_executor")]
    pub executor: String,
}

fn default_executor() -> String {
    "local".into()
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    pub project_id: Option<i64>,
    /// A run status (`queued`, `running`, ...).
    pub status: Option<String>,
    /// Runs whose name contains this, ignoring case.
    pub q: Option<String>,
    /// `newest` (default), `oldest` or `name`.
    pub sort: Option<String>,
    pub limit: Option<i64>,
    /// The `next_cursor` of the previous page in the same order.
    pub cursor: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct TokenReply {
    /// Pass to `spade worker --token`; shown once, only its hash is stored.
    pub token: String,
}

/// Parses and validates a run configuration given as TOML or JSON; errors name the key path.
pub fn parse_config(req: &CreateRun) -> Result<RunConfig, AppError> {
    let cfg = match (&req.config_toml, &req.config) {
        (Some(text), None) => RunConfig::from_toml_str(text).map_err(|e| match e {
            ConfigError::Invalid(_) => AppError::Invalid {
                code: "invalid_config",
                message: e.to_string(),
            },
            other => AppError::invalid("config_toml", other),
        })?,
        (None, Some(json)) => {
            let cfg: RunConfig = serde_path_to_error::deserialize(json)
                .map_err(|e| AppError::invalid(&format!("config.{}", e.path()), e.inner()))?;
            let issues = cfg.validate();
            if !issues.is_empty() {
                return Err(AppError::Invalid {
                    code: "invalid_config",
                    message: ConfigError::Invalid(issues).to_string(),
                });
            }
            cfg
        }
        _ => {
            return Err(AppError::invalid(
                "config",
                "give exactly one of `config_toml` (TOML text) and `config` (JSON)",
            ));
        }
    };
    Ok(cfg)
}

pub async fn create(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(project_id): ApiPath<i64>,
    ApiJson(req): ApiJson<CreateRun>,
) -> ApiResult<(StatusCode, Json<RunRecord>)> {
    let scope = TeamScope::for_project(&state.db, auth.user.id, project_id).await?;
    if !scope.role().can_edit() {
        return Err(AppError::read_only());
    }
    let name = req.name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(AppError::invalid("name", "must have 1 to 200 characters"));
    }
    if !EXECUTORS.contains(&req.executor.as_str()) {
        return Err(AppError::invalid(
            "executor",
            format!("expected one of {EXECUTORS:?}"),
        ));
    }
    let mut cfg = parse_config(&req)?;
    state.paths.check_config(&mut cfg)?;
    let seed = i64::try_from(cfg.run.seed)
        .map_err(|_| AppError::invalid("config.run.seed", "must be at most 2^63 - 1"))?;
    let run = runs::create(
        &state.db,
        &scope,
        &NewRun {
            project_id,
            name,
            config: &cfg.to_json(),
            executor: &req.executor,
            seed,
            code_version: env!("CARGO_PKG_VERSION"),
        },
    )
    .await?;
    record(&state, &auth, scope.team_id(), "run.create", run.id).await?;
    Ok((StatusCode::CREATED, Json(service::runs::record(&run))))
}

pub async fn list(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(team_id): ApiPath<i64>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<Json<Page<RunRecord>>> {
    let scope = TeamScope::for_member(&state.db, auth.user.id, team_id).await?;
    let args = service::runs::ListArgs {
        project_id: q.project_id,
        status: q.status.as_deref(),
        q: q.q.as_deref(),
        sort: q.sort.as_deref(),
        cursor: q.cursor.as_deref(),
        limit: limit(q.limit)?,
    };
    Ok(Json(service::runs::records(&state.db, &scope, args).await?))
}

pub async fn get(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<Json<RunRecord>> {
    let scope = member_scope(&state, &auth, run_id).await?;
    Ok(Json(service::runs::record(
        &runs::get(&state.db, &scope).await?,
    )))
}

pub async fn cancel(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<Json<RunRecord>> {
    let scope = editor_scope(&state, &auth, run_id).await?;
    let run = runs::cancel(&state.db, &scope).await?;
    state
        .events
        .publish(run_id, crate::events::status_event(run.status));
    record(&state, &auth, scope.team_id(), "run.cancel", run_id).await?;
    Ok(Json(service::runs::record(&run)))
}

pub async fn resume(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<Json<RunRecord>> {
    let scope = editor_scope(&state, &auth, run_id).await?;
    let run = runs::resume(&state.db, &scope).await?;
    state
        .events
        .publish(run_id, crate::events::status_event(run.status));
    record(&state, &auth, scope.team_id(), "run.resume", run_id).await?;
    Ok(Json(service::runs::record(&run)))
}

pub async fn delete(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<StatusCode> {
    let scope = editor_scope(&state, &auth, run_id).await?;
    runs::delete(&state.db, &scope).await?;
    record(&state, &auth, scope.team_id(), "run.delete", run_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Issues a new worker token (the previous one stops working), for starting a worker by hand.
pub async fn issue_token(
    State(state): State<AppState>,
    auth: AuthUser,
    ApiPath(run_id): ApiPath<i64>,
) -> ApiResult<Json<TokenReply>> {
    let scope = editor_scope(&state, &auth, run_id).await?;
    let token = tokens::random_token("spr_");
    runs::set_token_hash(&state.db, &scope, &tokens::hash_token(&token)).await?;
    record(&state, &auth, scope.team_id(), "run.token", run_id).await?;
    Ok(Json(TokenReply { token }))
}

async fn record(
    state: &AppState,
    auth: &AuthUser,
    team_id: i64,
    action: &str,
    run_id: i64,
) -> ApiResult<()> {
    audit::record(
        &state.db,
        &audit::Entry {
            actor_id: Some(auth.user.id),
            team_id: Some(team_id),
            action,
            target: format!("run:{run_id}"),
            detail: serde_json::json!({}),
        },
    )
    .await?;
    Ok(())
}
