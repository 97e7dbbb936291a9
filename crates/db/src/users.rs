//! Accounts and login sessions. Passwords arrive here already hashed (argon2, in the backend);
//! refresh tokens arrive as their SHA-256, so a copy of the database yields no usable secret.

use crate::DbError;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

/// A user as the API shows it (never the password hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct User {
    pub id: i64,
    pub email: String,
    pub display_name: String,
    pub is_admin: bool,
    pub created_at: DateTime<Utc>,
}

/// What login needs: the user and its stored password hash.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub user: User,
    pub password_hash: String,
}

/// Outcome of [`register`] when registration is closed to all but the first user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registration {
    /// Anyone may register.
    Open,
    /// Only the first user (who becomes admin) may register.
    FirstUserOnly,
}

/// Creates a user. The first user ever becomes admin. Both decisions ("is this the first?") and
/// the insert happen under one transaction-scoped advisory lock, so two concurrent first
/// registrations cannot both become admin. Returns `Ok(None)` when `mode` is
/// [`Registration::FirstUserOnly`] and users already exist.
pub async fn register(
    pool: &PgPool,
    email: &str,
    display_name: &str,
    password_hash: &str,
    mode: Registration,
) -> Result<Option<User>, DbError> {
    let mut tx = pool.begin().await?;
    // Any constant works as the key; this one spells "users" in ASCII.
    sqlx::query!("SELECT pg_advisory_xact_lock(504447201907)")
        .execute(&mut *tx)
        .await?;
    let first = sqlx::query_scalar!(r#"SELECT NOT EXISTS (SELECT 1 FROM users) AS "first!""#)
        .fetch_one(&mut *tx)
        .await?;
    if !first && mode == Registration::FirstUserOnly {
        return Ok(None);
    }
    let user = sqlx::query_as!(
        User,
        "INSERT INTO users (email, display_name, password_hash, is_admin)
         VALUES ($1, $2, $3, $4)
         RETURNING id, email, display_name, is_admin, created_at",
        email,
        display_name,
        password_hash,
        first
    )
    .fetch_one(&mut *tx)
    .await
    .map_err(|e| DbError::unique(e, "user with this email"))?;
    tx.commit().await?;
    Ok(Some(user))
}

/// The user with this (already lowercased) email and its password hash.
pub async fn credentials(pool: &PgPool, email: &str) -> Result<Option<Credentials>, DbError> {
    let row = sqlx::query!(
        "SELECT id, email, display_name, is_admin, created_at, password_hash
         FROM users WHERE lower(email) = lower($1)",
        email
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| Credentials {
        user: User {
            id: r.id,
            email: r.email,
            display_name: r.display_name,
            is_admin: r.is_admin,
            created_at: r.created_at,
        },
        password_hash: r.password_hash,
    }))
}

/// Opens a login session with the hash of its first refresh token.
pub async fn create_session(
    pool: &PgPool,
    user_id: i64,
    refresh_token_hash: &[u8],
    expires_at: DateTime<Utc>,
    user_agent: Option<&str>,
) -> Result<i64, DbError> {
    let id = sqlx::query_scalar!(
        "INSERT INTO sessions (user_id, refresh_token_hash, expires_at, user_agent)
         VALUES ($1, $2, $3, $4) RETURNING id",
        user_id,
        refresh_token_hash,
        expires_at,
        user_agent
    )
    .fetch_one(pool)
    .await?;
    Ok(id)
}

/// The user behind a live (unrevoked, unexpired) session, as every authenticated request checks
/// it: an access token whose session was revoked stops working at once.
pub async fn session_user(
    pool: &PgPool,
    session_id: i64,
    user_id: i64,
) -> Result<Option<User>, DbError> {
    let user = sqlx::query_as!(
        User,
        "SELECT u.id, u.email, u.display_name, u.is_admin, u.created_at
         FROM sessions s JOIN users u ON u.id = s.user_id
         WHERE s.id = $1 AND s.user_id = $2 AND s.revoked_at IS NULL AND s.expires_at > now()",
        session_id,
        user_id
    )
    .fetch_optional(pool)
    .await?;
    Ok(user)
}

/// What presenting a refresh token did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refresh {
    /// The token was current: it is replaced by the new hash. Carries (session id, user id).
    Rotated { session_id: i64, user_id: i64 },
    /// The token had been rotated away already: someone replayed it, so the whole session
    /// (every token of its family, the current one included) has been revoked. Carries
    /// (session id, user id).
    Reused { session_id: i64, user_id: i64 },
    /// The token was rotated away less than the race grace ago: two tabs of one
    /// browser refreshed at once with the same cookie and the other won. Not a replay: the
    /// session stays, and the caller gets a new access token but no refresh token (the winner's
    /// is the session's). Carries (session id, user id).
    Raced { session_id: i64, user_id: i64 },
    /// The token is unknown or belongs to a revoked or expired session (e.g. after logout):
    /// refused.
    Refused,
}

/// Seconds after a rotation during which a browser's rotated-away token counts as a race between
/// its tabs, not a replay ([`Refresh::Raced`]): the other tab's request left before the winner's
/// answer set the new cookie, so the window is one request long; 10 s covers a slow one, and a
/// copied token presented later is still caught (OAuth 2.0 Security BCP 4.14.2 allows such a
/// window).
pub const REFRESH_RACE_GRACE_S: f64 = 10.0;

/// Rotates a refresh token: the presented hash must be the current one of a live session. The
/// old hash is kept as retired, so presenting it again is recognised as reuse and revokes the
/// session (see [`Refresh::Reused`]). One transaction: the current hash is locked while it is
/// replaced, so two concurrent rotations of one token cannot both succeed.
///
/// `race_grace_s`: how long after its rotation a token counts as [`Refresh::Raced`] rather than
/// reused ([`REFRESH_RACE_GRACE_S`] for browsers, whose tabs share one cookie; 0 for API clients,
/// which hold their token alone).
pub async fn rotate_refresh(
    pool: &PgPool,
    presented_hash: &[u8],
    new_hash: &[u8],
    expires_at: DateTime<Utc>,
    race_grace_s: f64,
) -> Result<Refresh, DbError> {
    let mut tx = pool.begin().await?;
    let row = sqlx::query!(
        "UPDATE sessions SET refresh_token_hash = $2, expires_at = $3
         WHERE refresh_token_hash = $1 AND revoked_at IS NULL AND expires_at > now()
         RETURNING id, user_id",
        presented_hash,
        new_hash,
        expires_at
    )
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(r) = row {
        sqlx::query!(
            "INSERT INTO retired_refresh_tokens (refresh_token_hash, session_id) VALUES ($1, $2)
             ON CONFLICT DO NOTHING",
            presented_hash,
            r.id
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        return Ok(Refresh::Rotated {
            session_id: r.id,
            user_id: r.user_id,
        });
    }
    // A token retired moments ago by the same session's latest rotation is a race between tabs;
    // any older retired token, or one presented after the grace, is a replay.
    let raced = sqlx::query!(
        r#"SELECT s.id, s.user_id
           FROM retired_refresh_tokens r JOIN sessions s ON s.id = r.session_id
           WHERE r.refresh_token_hash = $1 AND s.revoked_at IS NULL AND s.expires_at > now()
             AND r.retired_at > now() - make_interval(secs => $2)
             AND r.retired_at = (SELECT max(retired_at) FROM retired_refresh_tokens
                                 WHERE session_id = s.id)"#,
        presented_hash,
        race_grace_s
    )
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(r) = raced {
        tx.commit().await?;
        return Ok(Refresh::Raced {
            session_id: r.id,
            user_id: r.user_id,
        });
    }
    let reused = sqlx::query!(
        "UPDATE sessions s SET revoked_at = now()
         FROM retired_refresh_tokens r
         WHERE r.refresh_token_hash = $1 AND s.id = r.session_id AND s.revoked_at IS NULL
         RETURNING s.id, s.user_id",
        presented_hash
    )
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(match reused {
        Some(r) => Refresh::Reused {
            session_id: r.id,
            user_id: r.user_id,
        },
        None => Refresh::Refused,
    })
}

/// Revokes one session of one user (logout). Returns whether a live session was revoked.
pub async fn revoke_session(pool: &PgPool, session_id: i64, user_id: i64) -> Result<bool, DbError> {
    let done = sqlx::query!(
        "UPDATE sessions SET revoked_at = now()
         WHERE id = $1 AND user_id = $2 AND revoked_at IS NULL",
        session_id,
        user_id
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Revokes the session a refresh token belongs to (logout with only the refresh cookie).
pub async fn revoke_by_refresh(pool: &PgPool, refresh_hash: &[u8]) -> Result<bool, DbError> {
    let done = sqlx::query!(
        "UPDATE sessions SET revoked_at = now()
         WHERE refresh_token_hash = $1 AND revoked_at IS NULL",
        refresh_hash
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The live session a refresh token belongs to, as (session id, user id): its current token, or
/// one its latest rotation retired less than `race_grace_s` seconds ago (the tab that lost a
/// refresh race may be looked up after the winner committed; [`rotate_refresh`] then answers
/// [`Refresh::Raced`] with the same grace).
pub async fn session_by_refresh(
    pool: &PgPool,
    refresh_hash: &[u8],
    race_grace_s: f64,
) -> Result<Option<(i64, i64)>, DbError> {
    let row = sqlx::query!(
        r#"SELECT id AS "id!", user_id AS "user_id!" FROM sessions
           WHERE refresh_token_hash = $1 AND revoked_at IS NULL AND expires_at > now()
           UNION ALL
           SELECT s.id, s.user_id
           FROM retired_refresh_tokens r JOIN sessions s ON s.id = r.session_id
           WHERE r.refresh_token_hash = $1 AND s.revoked_at IS NULL AND s.expires_at > now()
             AND r.retired_at > now() - make_interval(secs => $2)
             AND r.retired_at = (SELECT max(retired_at) FROM retired_refresh_tokens
                                 WHERE session_id = s.id)
           LIMIT 1"#,
        refresh_hash,
        race_grace_s
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| (r.id, r.user_id)))
}

/// A user by id.
pub async fn get(pool: &PgPool, user_id: i64) -> Result<User, DbError> {
    sqlx::query_as!(
        User,
        "SELECT id, email, display_name, is_admin, created_at FROM users WHERE id = $1",
        user_id
    )
    .fetch_optional(pool)
    .await?
    .ok_or(DbError::NotFound("user"))
}

/// A live login session of a user, as their account page lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionInfo {
    pub id: i64,
    pub created_at: DateTime<Utc>,
    /// When it last refreshed its access token (every 15 minutes while a page is open), or
    /// began.
    pub last_active_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub user_agent: Option<String>,
}

/// The live (unrevoked, unexpired) sessions of `user_id`, most recently active first.
pub async fn sessions_of(pool: &PgPool, user_id: i64) -> Result<Vec<SessionInfo>, DbError> {
    let rows = sqlx::query_as!(
        SessionInfo,
        r#"SELECT s.id, s.created_at, s.expires_at, s.user_agent,
                  coalesce((SELECT max(r.retired_at) FROM retired_refresh_tokens r
                            WHERE r.session_id = s.id), s.created_at) AS "last_active_at!"
           FROM sessions s
           WHERE s.user_id = $1 AND s.revoked_at IS NULL AND s.expires_at > now()
           ORDER BY 5 DESC, s.id DESC"#,
        user_id
    )
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// Sets the display name of `user_id` (already checked: 1 to 100 characters).
pub async fn set_display_name(pool: &PgPool, user_id: i64, name: &str) -> Result<User, DbError> {
    sqlx::query_as!(
        User,
        "UPDATE users SET display_name = $2 WHERE id = $1
         RETURNING id, email, display_name, is_admin, created_at",
        user_id,
        name
    )
    .fetch_optional(pool)
    .await?
    .ok_or(DbError::NotFound("user"))
}

/// Replaces the password hash of `user_id`, but only if it is still `expected` (the hash the
/// caller verified the current password against: of two changes racing, one wins and the other
/// finds it changed), and ends every other live session of the user in the same transaction, so
/// whoever knew the old password is signed out everywhere but here. Returns how many sessions
/// ended, or `None` when the hash had changed meanwhile.
pub async fn set_password(
    pool: &PgPool,
    user_id: i64,
    expected: &str,
    new_hash: &str,
    keep_session: i64,
) -> Result<Option<u64>, DbError> {
    let mut tx = pool.begin().await?;
    let changed = sqlx::query!(
        "UPDATE users SET password_hash = $3 WHERE id = $1 AND password_hash = $2",
        user_id,
        expected,
        new_hash
    )
    .execute(&mut *tx)
    .await?;
    if changed.rows_affected() != 1 {
        return Ok(None);
    }
    let ended = sqlx::query!(
        "UPDATE sessions SET revoked_at = now()
         WHERE user_id = $1 AND id <> $2 AND revoked_at IS NULL",
        user_id,
        keep_session
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(ended.rows_affected()))
}
