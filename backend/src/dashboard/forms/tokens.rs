//! The teams page's API token forms: a member (editor or owner) makes a token for themself, and
//! revokes one (owners any of the team's). Each calls the service function the API route calls,
//! so roles, limits and audit entries are the API's. The new token reaches the page it redirects
//! to in a short-lived HttpOnly cookie (`dto::new_token_cookie`), never in the URL, and is shown
//! there once.

use super::{back_to_teams, form_number, posted, role, show_once};
use crate::AppState;
use crate::error::AppError;
use crate::service::api_tokens::{self as service, CreateTokenRequest};
use axum::extract::{Path, Request, State};
use axum::response::Response;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TokenForm {
    name: String,
    role: String,
    expires_in_days: String,
}

pub(super) async fn create(
    State(state): State<AppState>,
    Path(team_id): Path<i64>,
    req: Request,
) -> Response {
    let headers = req.headers().clone();
    let result = async {
        let p = posted(&state, req).await?;
        let f: TokenForm = p.fields()?;
        let body = CreateTokenRequest {
            name: f.name,
            role: role(&f.role)?,
            expires_in_days: form_number::<i32>("expires_in_days", &f.expires_in_days)?,
        };
        let made = service::create(&state.ctx, &p.user.caller(), team_id, &body).await?;
        Ok::<_, AppError>(made)
    }
    .await;
    match result {
        Ok(made) => {
            let notice = format!(
                "API token \"{}\" made ({}). Copy it now: it is shown only on this page.",
                made.record.name, made.record.role
            );
            let mut resp = back_to_teams(Ok(notice), Some(team_id));
            show_once(
                &mut resp,
                &state,
                &headers,
                &spade_app::dto::new_token_cookie(team_id),
                &format!("{}:{}", made.record.id, made.token),
            );
            resp
        }
        Err(e) => back_to_teams(Err(e), Some(team_id)),
    }
}

pub(super) async fn revoke(
    State(state): State<AppState>,
    Path((team_id, id)): Path<(i64, i64)>,
    req: Request,
) -> Response {
    let result = async {
        let p = posted(&state, req).await?;
        let t = service::revoke(&state.ctx, &p.user.caller(), team_id, id).await?;
        Ok(format!(
            "API token \"{}\" revoked: it is refused from now on.",
            t.name
        ))
    }
    .await;
    back_to_teams(result, Some(team_id))
}
