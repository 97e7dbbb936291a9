//! The bearer tokens of jobs: a training worker's run token (minted by the scheduler at each
//! launch, or by an editor for a worker started by hand) and an evaluation job's token, which
//! can post that evaluation's results and nothing else. Each new token replaces the previous
//! one; only its hash is stored ([`crate::tokens::hash_token`]).

use crate::tokens;
use spade_db::{DbError, Pool, RunScope, evaluations, runs};

/// A run token for a run the scheduler is launching.
pub async fn for_launch(db: &Pool, run_id: i64) -> Result<String, DbError> {
    let token = tokens::random_token("spr_");
    runs::set_token_hash_for_launch(db, run_id, &tokens::hash_token(&token)).await?;
    Ok(token)
}

/// A run token an editor asked for (`POST /runs/{id}/token`); `scope` must allow changes.
pub async fn for_worker_by_hand(db: &Pool, scope: &RunScope) -> Result<String, DbError> {
    let token = tokens::random_token("spr_");
    runs::set_token_hash(db, scope, &tokens::hash_token(&token)).await?;
    Ok(token)
}

/// The token of evaluation job `job_id`, for its launch.
pub async fn for_evaluation(db: &Pool, job_id: i64) -> Result<String, DbError> {
    let token = tokens::random_token("spe_");
    evaluations::set_token_hash_for_launch(db, job_id, &tokens::hash_token(&token)).await?;
    Ok(token)
}
