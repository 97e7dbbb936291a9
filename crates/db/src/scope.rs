//! Proof of access. A [`TeamScope`] or [`RunScope`] can only be made inside this crate, by a
//! query that checked a membership (users), a share link (anonymous readers) or a run token
//! (workers). Every function that touches a team's or a run's rows takes one, so "every query is
//! scoped by membership" holds by construction rather than by each handler remembering it.

use crate::{DbError, Role};
use sqlx::PgPool;

/// How the holder of a scope got it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A member of the run's team, with this role.
    Member(Role),
    /// Anyone holding a live share link: read-only.
    ShareLink,
    /// The run's worker, holding its run token: may ingest, nothing else.
    Worker,
}

/// What an API token limits its member to: one team, at most one role (see `api_tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub team_id: i64,
    pub role: Role,
}

/// Access to one team, held by one of its members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TeamScope {
    pub(crate) team_id: i64,
    pub(crate) user_id: i64,
    pub(crate) role: Role,
}

impl TeamScope {
    pub fn team_id(&self) -> i64 {
        self.team_id
    }
    pub fn user_id(&self) -> i64 {
        self.user_id
    }
    pub fn role(&self) -> Role {
        self.role
    }

    /// This scope as an API token limited to `limit` may hold it: `NotFound("team")` for any other
    /// team (as if the caller were not in it), and the lower of the two roles.
    pub fn limited(self, limit: Option<Limit>) -> Result<Self, DbError> {
        match limit {
            None => Ok(self),
            Some(l) if l.team_id == self.team_id => Ok(Self {
                role: self.role.min(l.role),
                ..self
            }),
            Some(_) => Err(DbError::NotFound("team")),
        }
    }

    /// The membership of `user_id` in `team_id`; `NotFound("team")` when there is none, so a
    /// team the user does not belong to looks exactly like one that does not exist.
    pub async fn for_member(pool: &PgPool, user_id: i64, team_id: i64) -> Result<Self, DbError> {
        let role = sqlx::query_scalar!(
            r#"SELECT role AS "role: Role" FROM memberships WHERE team_id = $1 AND user_id = $2"#,
            team_id,
            user_id
        )
        .fetch_optional(pool)
        .await?
        .ok_or(DbError::NotFound("team"))?;
        Ok(Self {
            team_id,
            user_id,
            role,
        })
    }

    /// The team of `project_id`, if `user_id` is a member of it.
    pub async fn for_project(
        pool: &PgPool,
        user_id: i64,
        project_id: i64,
    ) -> Result<Self, DbError> {
        let row = sqlx::query!(
            r#"SELECT m.team_id, m.role AS "role: Role"
               FROM projects p JOIN memberships m ON m.team_id = p.team_id
               WHERE p.id = $1 AND m.user_id = $2"#,
            project_id,
            user_id
        )
        .fetch_optional(pool)
        .await?
        .ok_or(DbError::NotFound("project"))?;
        Ok(Self {
            team_id: row.team_id,
            user_id,
            role: row.role,
        })
    }
}

/// Access to one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunScope {
    pub(crate) run_id: i64,
    pub(crate) team_id: i64,
    pub(crate) access: Access,
}

impl RunScope {
    pub fn run_id(&self) -> i64 {
        self.run_id
    }
    pub fn team_id(&self) -> i64 {
        self.team_id
    }
    pub fn access(&self) -> Access {
        self.access
    }
    /// Whether the holder may change the run (members with role editor or owner).
    pub fn can_edit(&self) -> bool {
        matches!(self.access, Access::Member(r) if r.can_edit())
    }

    /// This scope as an API token limited to `limit` may hold it: `NotFound("run")` for a run of
    /// any other team, and the lower of the two roles. Only member scopes are limited.
    pub fn limited(self, limit: Option<Limit>) -> Result<Self, DbError> {
        match (limit, self.access) {
            (None, _) => Ok(self),
            (Some(l), Access::Member(role)) if l.team_id == self.team_id => Ok(Self {
                access: Access::Member(role.min(l.role)),
                ..self
            }),
            _ => Err(DbError::NotFound("run")),
        }
    }

    /// `user_id`'s access to `run_id` through a team membership; `NotFound("run")` otherwise.
    pub async fn for_member(pool: &PgPool, user_id: i64, run_id: i64) -> Result<Self, DbError> {
        let row = sqlx::query!(
            r#"SELECT p.team_id, m.role AS "role: Role"
               FROM runs r
               JOIN projects p ON p.id = r.project_id
               JOIN memberships m ON m.team_id = p.team_id AND m.user_id = $2
               WHERE r.id = $1"#,
            run_id,
            user_id
        )
        .fetch_optional(pool)
        .await?
        .ok_or(DbError::NotFound("run"))?;
        Ok(Self {
            run_id,
            team_id: row.team_id,
            access: Access::Member(row.role),
        })
    }

    /// Read-only access through a share link, by the SHA-256 of its token; revoked links give
    /// `NotFound("share link")`.
    pub async fn for_share_link(pool: &PgPool, token_hash: &[u8]) -> Result<Self, DbError> {
        let row = sqlx::query!(
            r#"SELECT s.run_id, p.team_id
               FROM share_links s
               JOIN runs r ON r.id = s.run_id
               JOIN projects p ON p.id = r.project_id
               WHERE s.token_hash = $1 AND s.revoked_at IS NULL
                 AND (s.expires_at IS NULL OR s.expires_at > now())"#,
            token_hash
        )
        .fetch_optional(pool)
        .await?
        .ok_or(DbError::NotFound("share link"))?;
        Ok(Self {
            run_id: row.run_id,
            team_id: row.team_id,
            access: Access::ShareLink,
        })
    }

    /// The server's own access to `run_id` on behalf of its ended training job, to store the
    /// reports its worker spooled but could not send (the backend's `spool` module): what the
    /// worker could have stored with its token, nothing more. Only the scheduler's end-of-job
    /// path calls it; no request can.
    pub async fn for_ended_job(pool: &PgPool, run_id: i64) -> Result<Self, DbError> {
        let team_id = sqlx::query_scalar!(
            "SELECT p.team_id FROM runs r JOIN projects p ON p.id = r.project_id WHERE r.id = $1",
            run_id
        )
        .fetch_optional(pool)
        .await?
        .ok_or(DbError::NotFound("run"))?;
        Ok(Self {
            run_id,
            team_id,
            access: Access::Worker,
        })
    }

    /// A worker's access to `run_id`. `verify` receives the stored hash of the run token and
    /// says whether the presented token matches it (the backend compares in constant time); a
    /// run without a token, or a mismatch, gives `NotFound("run")`.
    pub async fn for_worker(
        pool: &PgPool,
        run_id: i64,
        verify: impl FnOnce(&[u8]) -> bool,
    ) -> Result<Self, DbError> {
        let row = sqlx::query!(
            "SELECT p.team_id, r.run_token_hash
             FROM runs r JOIN projects p ON p.id = r.project_id WHERE r.id = $1",
            run_id
        )
        .fetch_optional(pool)
        .await?
        .ok_or(DbError::NotFound("run"))?;
        match row.run_token_hash {
            Some(hash) if verify(&hash) => Ok(Self {
                run_id,
                team_id: row.team_id,
                access: Access::Worker,
            }),
            _ => Err(DbError::NotFound("run")),
        }
    }
}
