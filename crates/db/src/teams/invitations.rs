//! Team invitations: the only way into a team. An owner invites an email with a role; the
//! account holding that email accepts (becoming a member) or declines; an owner may revoke it
//! while it is pending. Invitations are stored by email and nothing here looks up whether an
//! account with that email exists when inviting, so inviting cannot tell an owner which emails
//! are registered. An invitation is decided once: accept, decline and revoke all move it out of
//! `pending` under a row lock, so two accepts at the same moment make one membership.
//!
//! Answering also needs the invitation's code: inviting stores the SHA-256 of a random code the
//! caller hands to the owner once (for the link they send), and an answer presents its hash.
//! The studio sends no mail, so an account's email proves nothing: without the code, whoever
//! registered an invited email first could have joined the team.

use crate::{DbError, Role, TeamScope};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

/// Where an invitation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, sqlx::Type)]
#[sqlx(type_name = "invitation_status", rename_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum InvitationStatus {
    Pending,
    Accepted,
    Declined,
    Revoked,
}

impl InvitationStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Accepted => "accepted",
            Self::Declined => "declined",
            Self::Revoked => "revoked",
        }
    }
}

/// An invitation as the team's owners see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Invitation {
    pub id: i64,
    pub team_id: i64,
    pub email: String,
    pub role: Role,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// A pending invitation as the invited account sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Incoming {
    pub id: i64,
    pub team_id: i64,
    pub team_name: String,
    pub role: Role,
    /// The display name of the owner who invited (None once their account is gone).
    pub invited_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// What [`invite`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invited {
    /// A pending invitation for the email (a new one, or the open one with its role changed).
    Pending(Invitation),
    /// The email is already a member's (owners see members' emails, so saying so leaks nothing).
    AlreadyMember,
    /// The caller is no longer an owner of the team.
    NotOwner,
}

/// Invites `email` (lower-cased by the caller) into the scoped team with `role`, answerable with
/// the code whose SHA-256 is `code_hash`. Inviting an email that already has an open invitation
/// changes its role, replaces its code and restarts its expiry.
pub async fn invite(
    pool: &PgPool,
    scope: &TeamScope,
    email: &str,
    role: Role,
    code_hash: &[u8],
) -> Result<Invited, DbError> {
    let mut tx = pool.begin().await?;
    if !super::still_owner(&mut tx, scope).await? {
        return Ok(Invited::NotOwner);
    }
    let member = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM memberships m JOIN users u ON u.id = m.user_id
                          WHERE m.team_id = $1 AND lower(u.email) = $2) AS "yes!""#,
        scope.team_id,
        email
    )
    .fetch_one(&mut *tx)
    .await?;
    if member {
        return Ok(Invited::AlreadyMember);
    }
    let row = sqlx::query_as!(
        Invitation,
        r#"INSERT INTO team_invitations (team_id, email, role, invited_by, code_hash)
           VALUES ($1, $2, $3, $4, $5)
           ON CONFLICT (team_id, email) WHERE status = 'pending'
           DO UPDATE SET role = EXCLUDED.role, invited_by = EXCLUDED.invited_by,
                         code_hash = EXCLUDED.code_hash,
                         created_at = now(), expires_at = now() + interval '14 days'
           RETURNING id, team_id, email, role AS "role: Role", created_at, expires_at"#,
        scope.team_id,
        email,
        role as Role,
        scope.user_id,
        code_hash
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Invited::Pending(row))
}

/// The scoped team's open invitations (pending, not expired), newest first.
pub async fn pending_of_team(pool: &PgPool, scope: &TeamScope) -> Result<Vec<Invitation>, DbError> {
    let rows = sqlx::query_as!(
        Invitation,
        r#"SELECT id, team_id, email, role AS "role: Role", created_at, expires_at
           FROM team_invitations
           WHERE team_id = $1 AND status = 'pending' AND expires_at > now()
           ORDER BY created_at DESC, id DESC"#,
        scope.team_id
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// Revokes the scoped team's pending invitation `id`; `NotFound("invitation")` for one of
/// another team or one already decided.
pub async fn revoke(pool: &PgPool, scope: &TeamScope, id: i64) -> Result<(), DbError> {
    let done = sqlx::query!(
        "UPDATE team_invitations SET status = 'revoked', decided_at = now(), decided_by = $3
         WHERE id = $1 AND team_id = $2 AND status = 'pending'",
        id,
        scope.team_id,
        scope.user_id
    )
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Err(DbError::NotFound("invitation"));
    }
    Ok(())
}

/// The open invitations of the account `user_id` (those to its email), newest first.
pub async fn pending_for_user(pool: &PgPool, user_id: i64) -> Result<Vec<Incoming>, DbError> {
    let rows = sqlx::query_as!(
        Incoming,
        r#"SELECT i.id, i.team_id, t.name AS team_name, i.role AS "role: Role",
                  inviter.display_name AS "invited_by?", i.created_at, i.expires_at
           FROM users u
           JOIN team_invitations i ON i.email = lower(u.email)
           JOIN teams t ON t.id = i.team_id
           LEFT JOIN users inviter ON inviter.id = i.invited_by
           WHERE u.id = $1 AND i.status = 'pending' AND i.expires_at > now()
           ORDER BY i.created_at DESC, i.id DESC"#,
        user_id
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// The answer of the invited account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Accept,
    Decline,
}

/// What an accepted or declined invitation was for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    pub team_id: i64,
    pub role: Role,
}

/// What [`answer`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted or declined.
    Done(Answered),
    /// The presented code is not this invitation's (or it has none: it was made before codes,
    /// and an owner must invite again). Nothing changed.
    WrongCode,
}

/// Accepts or declines invitation `id` for the account `user_id`. Only the account whose email
/// was invited can answer: anyone else's invitation is `NotFound("invitation")`, exactly like
/// a missing one. An invitation already decided (accepted, declined, revoked) or expired is
/// `State`. The invitation row is locked first, so of two answers at once the second sees the
/// first's decision. Accepting adds the membership with the invited role; someone who became a
/// member meanwhile keeps their role (an invitation never demotes, so it cannot unseat an owner).
/// Both answers need the invitation's code (`code_hash`, its SHA-256): a squatter on the email
/// can neither join nor decline in the invited person's place.
pub async fn answer(
    pool: &PgPool,
    user_id: i64,
    id: i64,
    answer: Answer,
    code_hash: &[u8],
) -> Result<Outcome, DbError> {
    let mut tx = pool.begin().await?;
    let row = sqlx::query!(
        r#"SELECT i.team_id, i.role AS "role: Role", i.status AS "status: InvitationStatus",
                  i.expires_at <= now() AS "expired!", i.code_hash
           FROM team_invitations i JOIN users u ON i.email = lower(u.email)
           WHERE i.id = $1 AND u.id = $2
           FOR UPDATE OF i"#,
        id,
        user_id
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or(DbError::NotFound("invitation"))?;
    if row.status != InvitationStatus::Pending {
        return Err(DbError::State {
            what: "invitation",
            state: row.status.as_str().to_owned(),
            hint: "it can be answered only once, while pending",
        });
    }
    if row.expired {
        return Err(DbError::State {
            what: "invitation",
            state: "expired".to_owned(),
            hint: "ask an owner of the team to invite you again",
        });
    }
    // Digests of 256-bit random codes: comparing them in variable time reveals nothing usable.
    if row.code_hash.as_deref() != Some(code_hash) {
        return Ok(Outcome::WrongCode);
    }
    let status = match answer {
        Answer::Accept => {
            sqlx::query!(
                "INSERT INTO memberships (team_id, user_id, role) VALUES ($1, $2, $3)
                 ON CONFLICT (team_id, user_id) DO NOTHING",
                row.team_id,
                user_id,
                row.role as Role
            )
            .execute(&mut *tx)
            .await?;
            InvitationStatus::Accepted
        }
        Answer::Decline => InvitationStatus::Declined,
    };
    sqlx::query!(
        "UPDATE team_invitations SET status = $2, decided_at = now(), decided_by = $3 WHERE id = $1",
        id,
        status as InvitationStatus,
        user_id
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Outcome::Done(Answered {
        team_id: row.team_id,
        role: row.role,
    }))
}
