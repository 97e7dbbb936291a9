//! The dashboard's data source and its HTML forms. [`Dashboard`] implements
//! `spade_app::data::DashboardData`: it authenticates the request head with the same
//! extractor as the API (access cookie; GET, so no CSRF) and asks `service::pages` for what each
//! page shows, reading nothing itself; a service refusal becomes the page's error of the same
//! kind. `forms` holds the POST routes of the pages' plain HTML forms (log in, register, log
//! out, cancel, resume, launch, teams, share links), which reuse the service so the rules (rate
//! limits, roles, audit, CSRF) are the same for both. `launch` builds and checks the launch form.

pub mod forms;
pub mod launch;

use crate::AppState;
use crate::auth::AuthUser;
use crate::service::{self, ServiceError, pages};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use spade_app::data::{
    Access, AccountData, BenchmarksPageData, DashboardData, DataError, DataFuture, EnvListQuery,
    EnvironmentsData, RunData, RunsData, SharedRunData, TeamsData,
};
use spade_app::dto;
use spade_db::DbError;

/// The backend's [`DashboardData`].
#[derive(Debug, Clone)]
pub struct Dashboard {
    pub state: AppState,
}

/// A page's error from the service's: the same kinds (404, 403, 422), the message as the API
/// words it; a database failure is "unavailable" (its cause is logged, never shown).
pub(crate) fn service_err(e: ServiceError) -> DataError {
    match e {
        ServiceError::NotFound(what) => DataError::NotFound(what),
        ServiceError::Db(DbError::NotFound(what)) => DataError::NotFound(what.to_owned()),
        ServiceError::Db(DbError::ReadOnly) => {
            DataError::Forbidden(ServiceError::read_only().to_string())
        }
        ServiceError::Forbidden { message, .. } => DataError::Forbidden(message),
        ServiceError::Invalid { message, .. } | ServiceError::BadRequest { message, .. } => {
            DataError::Invalid(message)
        }
        other => {
            tracing::error!(error = %other, "dashboard: service error");
            DataError::Unavailable
        }
    }
}

/// A page's answer: login first without a session, else what `page` read for the caller.
async fn for_caller<T, F>(d: &Dashboard, req: &Parts, page: F) -> Result<Access<T>, DataError>
where
    F: AsyncFnOnce(&AuthUser) -> service::ServiceResult<T>,
{
    match d.auth(req).await {
        None => Ok(Access::LoginRequired),
        Some((auth, _)) => page(&auth).await.map(Access::Granted).map_err(service_err),
    }
}

impl Dashboard {
    /// The signed-in caller, or `None` (no cookie, expired, revoked). Pages are for people with
    /// a session: an API token sees none of them.
    async fn auth(&self, req: &Parts) -> Option<(AuthUser, i64)> {
        let mut parts = req.clone();
        let a = AuthUser::from_request_parts(&mut parts, &self.state)
            .await
            .ok()?;
        let sid = a.session_id()?;
        Some((a, sid))
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

/// The token of team `team_id` the token form made just now (its `ID:TOKEN` cookie), if it is
/// still live: shown once, on the page the form redirects to.
fn new_token(
    req: &Parts,
    team_id: i64,
    listed: &[dto::ApiTokenRecord],
) -> Option<dto::CreatedApiToken> {
    let value = crate::auth::cookie(&req.headers, &dto::new_token_cookie(team_id))?;
    let (id, token) = value.split_once(':')?;
    let id: i64 = id.parse().ok()?;
    if !service::api_tokens::looks_like_token(token) {
        return None;
    }
    let record = listed
        .iter()
        .find(|t| t.id == id && t.revoked_at.is_none())?;
    Some(dto::CreatedApiToken {
        record: record.clone(),
        token: token.to_owned(),
    })
}

impl DashboardData for Dashboard {
    fn viewer<'a>(&'a self, req: &'a Parts) -> DataFuture<'a, Option<dto::Viewer>> {
        Box::pin(async move {
            Ok(self.auth(req).await.map(|(a, sid)| dto::Viewer {
                csrf: self.state.auth.signer.csrf_token(sid),
                user: crate::auth::routes::account(&a.user).into(),
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
        search: spade_app::dto::RunSearch,
    ) -> DataFuture<'a, Access<RunsData>> {
        let q = pages::RunsQuery {
            team,
            status,
            name,
            sort,
            cursor,
            search,
        };
        Box::pin(async move {
            for_caller(self, req, async |a| {
                pages::runs(&self.state.ctx, &a.caller(), &q).await
            })
            .await
        })
    }

    fn run<'a>(&'a self, req: &'a Parts, run_id: i64) -> DataFuture<'a, Access<RunData>> {
        Box::pin(async move {
            // Links people copy name the configured address: a request's `Host` header is
            // whatever the client put there.
            let origin = self.state.public_url.clone().unwrap_or_default();
            let cookie = dto::new_share_cookie(run_id);
            let new_token = crate::auth::cookie(&req.headers, &cookie)
                .filter(|t| crate::tokens::looks_like_share_token(t));
            for_caller(self, req, async |a| {
                pages::run(&self.state.ctx, &a.caller(), run_id, &origin, new_token).await
            })
            .await
        })
    }

    fn benchmarks<'a>(
        &'a self,
        req: &'a Parts,
        team: Option<i64>,
    ) -> DataFuture<'a, Access<BenchmarksPageData>> {
        Box::pin(async move {
            for_caller(self, req, async |a| {
                pages::benchmarks(&self.state.ctx, &a.caller(), team).await
            })
            .await
        })
    }

    fn environments<'a>(
        &'a self,
        req: &'a Parts,
        run_id: i64,
        q: EnvListQuery,
    ) -> DataFuture<'a, Access<EnvironmentsData>> {
        Box::pin(async move {
            for_caller(self, req, async |a| {
                pages::environments(&self.state.ctx, &a.caller(), run_id, &q).await
            })
            .await
        })
    }

    fn environment<'a>(
        &'a self,
        req: &'a Parts,
        run_id: i64,
        env_id: String,
    ) -> DataFuture<'a, Access<dto::EnvironmentDetail>> {
        Box::pin(async move {
            for_caller(self, req, async |a| {
                pages::environment(&self.state.ctx, &a.caller(), run_id, &env_id).await
            })
            .await
        })
    }

    fn launch<'a>(
        &'a self,
        req: &'a Parts,
        preset: Option<String>,
        project: Option<i64>,
        from: Option<i64>,
    ) -> DataFuture<'a, Access<dto::LaunchForm>> {
        Box::pin(async move {
            for_caller(self, req, async |a| {
                // A refused submission renders the page again with what was typed.
                if let Some(draft) = req.extensions.get::<launch::LaunchDraft>() {
                    return Ok(draft.0.clone());
                }
                launch::fresh_form(
                    &self.state.ctx,
                    &a.caller(),
                    preset.as_deref(),
                    project,
                    from,
                )
                .await
            })
            .await
        })
    }

    fn run_choices<'a>(&'a self, req: &'a Parts) -> DataFuture<'a, Access<Vec<dto::RunChoice>>> {
        Box::pin(async move {
            for_caller(self, req, async |a| {
                pages::run_choices(&self.state.ctx, &a.caller()).await
            })
            .await
        })
    }

    fn teams<'a>(&'a self, req: &'a Parts) -> DataFuture<'a, Access<TeamsData>> {
        Box::pin(async move {
            for_caller(self, req, async |a| {
                let mut data = pages::teams(&self.state.ctx, &a.caller()).await?;
                for t in &mut data.teams {
                    t.new_invitation = self.new_invitation(req, t.team.id, &t.invitations);
                    t.new_token = new_token(req, t.team.id, &t.tokens);
                }
                Ok(data)
            })
            .await
        })
    }

    fn chart_views<'a>(
        &'a self,
        req: &'a Parts,
    ) -> DataFuture<'a, Access<Vec<dto::ChartViewRecord>>> {
        Box::pin(async move {
            for_caller(self, req, async |a| {
                service::chart_views::list(&self.state.ctx, &a.caller()).await
            })
            .await
        })
    }

    fn account<'a>(&'a self, req: &'a Parts) -> DataFuture<'a, Access<AccountData>> {
        Box::pin(async move {
            match self.auth(req).await {
                None => Ok(Access::LoginRequired),
                Some((a, _)) => {
                    let sessions = crate::auth::account::sessions(&self.state, &a)
                        .await
                        .map_err(|e| {
                            tracing::error!(error = %e, "dashboard: account sessions");
                            DataError::Unavailable
                        })?;
                    let views = service::chart_views::list(&self.state.ctx, &a.caller())
                        .await
                        .map_err(service_err)?;
                    Ok(Access::Granted(AccountData {
                        user: crate::auth::routes::account(&a.user),
                        sessions,
                        views,
                    }))
                }
            }
        })
    }

    fn shared<'a>(&'a self, _req: &'a Parts, token: String) -> DataFuture<'a, SharedRunData> {
        Box::pin(async move {
            pages::shared(&self.state.ctx, &token)
                .await
                .map_err(service_err)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page keeps the service's kind of refusal, so it is answered 404, 403 or 422 as the API
    /// would, never the 503 of a failure.
    #[test]
    fn page_errors_keep_the_services_kinds() {
        assert_eq!(
            service_err(ServiceError::NotFound("run".into())),
            DataError::NotFound("run".into())
        );
        assert_eq!(
            service_err(ServiceError::Db(DbError::NotFound("run"))),
            DataError::NotFound("run".into())
        );
        assert_eq!(
            service_err(ServiceError::Forbidden {
                code: "role",
                message: "editors only".into()
            }),
            DataError::Forbidden("editors only".into())
        );
        assert!(matches!(
            service_err(ServiceError::invalid("limit", "too big")),
            DataError::Invalid(_)
        ));
    }
}
