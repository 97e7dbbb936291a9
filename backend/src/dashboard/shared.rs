//! The page a share link opens: the run, its curves and its first page of environments, read
//! through the link's read-only `RunScope` (the same one the API's `/shared/{token}` routes
//! use). No session is consulted; an unknown or revoked link is "not found". The log tail is
//! left out: it is the team's working output, not part of what a link shares.

use super::{Dashboard, app_err, db_err};
use crate::auth::tokens;
use crate::service::environments::{self, EnvQuery};
use spade_app::data::{DataError, SharedRunData};
use spade_db::{DbError, RunScope, runs};

/// Environments listed on the shared page.
const SHARED_ENVS: i64 = 50;

pub(super) async fn shared_run(d: &Dashboard, token: &str) -> Result<SharedRunData, DataError> {
    let db = &d.state.db;
    let scope = match RunScope::for_share_link(db, &tokens::hash_token(token)).await {
        Ok(s) => s,
        Err(DbError::NotFound(_)) => return Err(DataError::NotFound("share link".into())),
        Err(e) => return Err(db_err(e)),
    };
    let r = runs::get(db, &scope).await.map_err(db_err)?;
    // The project's name is the team's business; a link shows the run alone.
    let summary = d.summary(&scope, &r, String::new()).await?;
    let metrics = std::sync::Arc::unwrap_or_clone(d.metric_series(&scope).await?);
    let query = EnvQuery {
        limit: Some(SHARED_ENVS),
        ..EnvQuery::default()
    };
    // Without the review marks: they are the team's, not part of what a link shares.
    let envs = environments::page(db, &scope, query)
        .await
        .map_err(app_err)?
        .items;
    // A shared page has no log and no actions.
    let run = super::run_detail(&r, summary, Vec::new(), false);
    Ok(SharedRunData {
        run,
        metrics,
        environments: envs
            .iter()
            .map(|e| environments::summary(e, r.id))
            .collect(),
    })
}
