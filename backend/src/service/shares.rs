//! Share links: the one place a link's token becomes a read-only run scope ([`resolve`], used by
//! the API's `/shared/{token}` routes, the pool download and the shared page), the links of a
//! run, and creating and revoking them (editors; audited). Only a token's hash is stored.

use super::artifacts::time;
use super::{Caller, Ctx, ServiceError, ServiceResult, audit, editor_scope};
use crate::tokens;
use serde::Deserialize;
use spade_app::dto;
use spade_db::shares::{self, NewShare, ShareLink};
use spade_db::{Pool, RunScope};

/// The read-only scope share link `token` grants; an unknown, revoked or expired link is
/// "share link not found" (the three look the same).
pub async fn resolve(db: &Pool, token: &str) -> ServiceResult<RunScope> {
    Ok(RunScope::for_share_link(db, &tokens::hash_token(token)).await?)
}

/// Run `scope`'s share links, newest first, revoked and expired ones included.
pub async fn list(db: &Pool, scope: &RunScope) -> ServiceResult<Vec<dto::ShareRecord>> {
    Ok(shares::list(db, scope).await?.iter().map(share).collect())
}

/// The API's view of a stored link.
pub fn share(l: &ShareLink) -> dto::ShareRecord {
    dto::ShareRecord {
        id: l.id,
        run_id: l.run_id,
        created_by: l.created_by,
        created_at: time(&l.created_at),
        revoked_at: l.revoked_at.as_ref().map(time),
        label: l.label.clone(),
        expires_at: l.expires_at.as_ref().map(time),
        expired: l.expires_at.is_some_and(|t| t <= chrono::Utc::now()),
    }
}

/// The body of `POST /runs/{id}/shares`; `{}` makes an unlabelled link that lives until revoked.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CreateShareRequest {
    /// What the link is for (at most [`LABEL_MAX_CHARS`] characters, no control characters).
    pub label: String,
    /// Days until the link stops working, 1 to [`MAX_EXPIRY_DAYS`]; absent = until revoked.
    pub expires_in_days: Option<i32>,
}

pub const LABEL_MAX_CHARS: usize = 100;
pub const MAX_EXPIRY_DAYS: i32 = 365;

impl CreateShareRequest {
    /// The request as the database takes it, or an error naming the field at fault.
    fn checked(&self) -> Result<NewShare<'_>, ServiceError> {
        let label = self.label.trim();
        if label.chars().count() > LABEL_MAX_CHARS {
            return Err(ServiceError::invalid(
                "label",
                format!(
                    "at most {LABEL_MAX_CHARS} characters, got {}",
                    label.chars().count()
                ),
            ));
        }
        if label.chars().any(char::is_control) {
            return Err(ServiceError::invalid(
                "label",
                "no control characters (line breaks, tabs)",
            ));
        }
        if let Some(d) = self.expires_in_days
            && !(1..=MAX_EXPIRY_DAYS).contains(&d)
        {
            return Err(ServiceError::invalid(
                "expires_in_days",
                format!("expected 1 to {MAX_EXPIRY_DAYS} days, or no value for no expiry, got {d}"),
            ));
        }
        Ok(NewShare {
            label,
            expires_in_days: self.expires_in_days,
        })
    }
}

/// Creates a read-only share link of run `run_id` (editors). The token is in the answer once;
/// only its hash is stored.
pub async fn create_share(
    ctx: &Ctx,
    caller: &Caller,
    run_id: i64,
    req: &CreateShareRequest,
) -> ServiceResult<dto::CreatedShare> {
    let scope = editor_scope(ctx, caller, run_id).await?;
    let new = req.checked()?;
    let token = tokens::random_token("sps_");
    let link = shares::create(
        &ctx.db,
        &scope,
        caller.user_id,
        &tokens::hash_token(&token),
        &new,
    )
    .await?;
    let detail = serde_json::json!({
        "run_id": run_id,
        "label": link.label,
        "expires_at": link.expires_at,
    });
    let target = format!("share:{}", link.id);
    audit(ctx, caller, scope.team_id(), "share.create", target, detail).await?;
    let path = format!("/api/v1/shared/{token}");
    Ok(dto::CreatedShare {
        link: share(&link),
        token,
        path,
    })
}

/// Revokes share link `share_id` of run `run_id` (editors).
pub async fn revoke_share(
    ctx: &Ctx,
    caller: &Caller,
    run_id: i64,
    share_id: i64,
) -> ServiceResult<dto::ShareRecord> {
    let scope = editor_scope(ctx, caller, run_id).await?;
    let link = shares::revoke(&ctx.db, &scope, share_id).await?;
    let detail = serde_json::json!({ "run_id": run_id });
    let target = format!("share:{share_id}");
    audit(ctx, caller, scope.team_id(), "share.revoke", target, detail).await?;
    Ok(share(&link))
}
