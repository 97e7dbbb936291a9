//! API tokens for scripts: made, listed and revoked per team. A member with the editor role or
//! more makes one for themself, as a viewer or an editor (never above their own role; never
//! owner, so no token manages members or tokens); a viewer makes none. Owners see and revoke
//! every token of their team, other members their own. Only a person signed in with a session
//! manages tokens: a token cannot make or revoke tokens. The token is in the answer that made
//! it and never again (only its hash is stored); see `auth` for how a request presents one.

use super::artifacts::time;
use super::teams::{role_name, team_scope};
use super::{Caller, Ctx, ServiceError, ServiceResult, audit};
use crate::tokens;
use serde::Deserialize;
use spade_app::dto;
use spade_db::Role;
use spade_db::api_tokens::{self, ApiToken, NewToken};

/// The prefix of every API token, so a leaked one is recognisable (and scannable).
pub const PREFIX: &str = "spt_";
pub const NAME_MAX_CHARS: usize = 100;
pub const MAX_EXPIRY_DAYS: i32 = 365;

/// The body of `POST /teams/{id}/tokens`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTokenRequest {
    /// What the token is for ("nightly eval script"): 1 to [`NAME_MAX_CHARS`] characters.
    pub name: String,
    /// viewer (reads) or editor (also launches, cancels, tags, deletes runs); default viewer.
    #[serde(default = "viewer")]
    pub role: Role,
    /// Days until it stops working, 1 to [`MAX_EXPIRY_DAYS`]; absent = until revoked.
    #[serde(default)]
    pub expires_in_days: Option<i32>,
}

fn viewer() -> Role {
    Role::Viewer
}

impl CreateTokenRequest {
    fn checked(&self, mine: Role) -> Result<NewToken<'_>, ServiceError> {
        let name = self.name.trim();
        let n = name.chars().count();
        if n == 0 || n > NAME_MAX_CHARS {
            return Err(ServiceError::invalid(
                "name",
                format!("must have 1 to {NAME_MAX_CHARS} characters, got {n}"),
            ));
        }
        if name.chars().any(char::is_control) {
            return Err(ServiceError::invalid(
                "name",
                "no control characters (line breaks, tabs)",
            ));
        }
        if self.role == Role::Owner {
            return Err(ServiceError::invalid(
                "role",
                "expected viewer or editor: a token never manages members or tokens",
            ));
        }
        if self.role > mine {
            return Err(ServiceError::invalid(
                "role",
                format!(
                    "a token can do at most what you can: you are {} in this team",
                    role_name(mine)
                ),
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
        Ok(NewToken {
            name,
            role: self.role,
            expires_in_days: self.expires_in_days,
        })
    }
}

pub fn record(t: &ApiToken) -> dto::ApiTokenRecord {
    dto::ApiTokenRecord {
        id: t.id,
        team_id: t.team_id,
        user_id: t.user_id,
        user_email: t.user_email.clone(),
        name: t.name.clone(),
        role: role_name(t.role).to_owned(),
        created_at: time(&t.created_at),
        expires_at: t.expires_at.as_ref().map(time),
        last_used_at: t.last_used_at.as_ref().map(time),
        revoked_at: t.revoked_at.as_ref().map(time),
        expired: t.expires_at.is_some_and(|e| e <= chrono::Utc::now()),
    }
}

/// Makes a token for the caller in team `team_id` (editors and owners).
pub async fn create(
    ctx: &Ctx,
    caller: &Caller,
    team_id: i64,
    req: &CreateTokenRequest,
) -> ServiceResult<dto::CreatedApiToken> {
    caller.in_person("make API tokens")?;
    let scope = team_scope(ctx, caller, team_id, Role::Editor).await?;
    let new = req.checked(scope.role())?;
    let token = tokens::random_token(PREFIX);
    let made = api_tokens::create(&ctx.db, &scope, &tokens::hash_token(&token), &new).await?;
    let detail = serde_json::json!({
        "name": made.name,
        "role": role_name(made.role),
        "expires_at": made.expires_at,
    });
    let target = format!("api_token:{}", made.id);
    audit(ctx, caller, team_id, "api_token.create", target, detail).await?;
    Ok(dto::CreatedApiToken {
        record: record(&made),
        token,
    })
}

/// The tokens of team `team_id` the caller may see (owners all, others their own).
pub async fn list(
    ctx: &Ctx,
    caller: &Caller,
    team_id: i64,
) -> ServiceResult<Vec<dto::ApiTokenRecord>> {
    caller.in_person("list API tokens")?;
    let scope = team_scope(ctx, caller, team_id, Role::Viewer).await?;
    Ok(api_tokens::list(&ctx.db, &scope)
        .await?
        .iter()
        .map(record)
        .collect())
}

/// Revokes token `id` of team `team_id` (owners any, others their own): refused from the next
/// request on, streams included.
pub async fn revoke(
    ctx: &Ctx,
    caller: &Caller,
    team_id: i64,
    id: i64,
) -> ServiceResult<dto::ApiTokenRecord> {
    caller.in_person("revoke API tokens")?;
    let scope = team_scope(ctx, caller, team_id, Role::Viewer).await?;
    let t = api_tokens::revoke(&ctx.db, &scope, id).await?;
    // Open event streams of the token end now, not when they next check.
    ctx.events.access_changed();
    let detail = serde_json::json!({ "name": t.name, "user_id": t.user_id });
    let target = format!("api_token:{id}");
    audit(ctx, caller, team_id, "api_token.revoke", target, detail).await?;
    Ok(record(&t))
}

/// Whether `t` has the shape of an API token, so only such text is ever looked up.
pub fn looks_like_token(t: &str) -> bool {
    tokens::looks_like_random_token(PREFIX, t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(name: &str, role: Role, days: Option<i32>) -> CreateTokenRequest {
        CreateTokenRequest {
            name: name.into(),
            role,
            expires_in_days: days,
        }
    }

    #[test]
    fn requests_are_checked_field_by_field() {
        let field = |r: CreateTokenRequest, mine: Role| match r.checked(mine) {
            Err(ServiceError::Invalid { message, .. }) => message
                .split('`')
                .nth(1)
                .map(str::to_owned)
                .unwrap_or(message),
            other => panic!("expected an invalid field, got {other:?}"),
        };
        assert_eq!(field(req(" ", Role::Viewer, None), Role::Owner), "name");
        assert_eq!(field(req("a\nb", Role::Viewer, None), Role::Owner), "name");
        assert_eq!(
            field(req(&"x".repeat(101), Role::Viewer, None), Role::Owner),
            "name"
        );
        assert_eq!(field(req("ci", Role::Owner, None), Role::Owner), "role");
        assert_eq!(field(req("ci", Role::Editor, None), Role::Viewer), "role");
        assert_eq!(
            field(req("ci", Role::Viewer, Some(0)), Role::Owner),
            "expires_in_days"
        );
        assert_eq!(
            field(req("ci", Role::Viewer, Some(366)), Role::Owner),
            "expires_in_days"
        );
        let ok = req(" nightly eval ", Role::Editor, Some(30));
        let n = ok
            .checked(Role::Editor)
            .expect("an editor may make an editor token");
        assert_eq!(
            (n.name, n.role, n.expires_in_days),
            ("nightly eval", Role::Editor, Some(30))
        );
    }

    #[test]
    fn only_minted_tokens_pass_the_shape_check() {
        assert!(looks_like_token(&tokens::random_token(PREFIX)));
        assert!(!looks_like_token(&tokens::random_token("sps_")));
        assert!(!looks_like_token("spt_short"));
    }
}
