//! The teams page's invitation forms: an owner invites an email or revokes an open invitation;
//! the signed-in user accepts or declines one sent to their email, with the code of its link
//! (filled in when they open the link). Each calls the service
//! function the API route calls, so roles, the "only the invited account" rule and the audit
//! entries are the API's.

use super::{MemberForm, back_to_teams, posted, role, show_once};
use crate::AppState;
use crate::service::teams::invitations as service;
use axum::extract::{Path, Request, State};
use axum::response::Response;
use serde::Deserialize;
use spade_db::teams::invitations::Answer;

pub(super) async fn invite(
    State(state): State<AppState>,
    Path(team_id): Path<i64>,
    req: Request,
) -> Response {
    let headers = req.headers().clone();
    let result = async {
        let p = posted(&state, req).await?;
        let f: MemberForm = p.fields()?;
        let inv = service::invite(
            &state.ctx,
            &p.user.caller(),
            team_id,
            &f.email,
            role(&f.role)?,
        )
        .await?;
        // Says the same whether or not the email has an account, as the API does.
        let notice = format!(
            "Invitation sent to {} as {}; send them the link below: they join the team once they \
             accept it there.",
            inv.email, inv.role
        );
        Ok((notice, inv.id, inv.code.unwrap_or_default()))
    }
    .await;
    match result {
        Ok((notice, id, code)) => {
            let mut resp = back_to_teams(Ok(notice), Some(team_id));
            show_once(
                &mut resp,
                &state,
                &headers,
                &spade_app::dto::new_invitation_cookie(team_id),
                &format!("{id}:{code}"),
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
        service::revoke(&state.ctx, &p.user.caller(), team_id, id).await?;
        Ok("Invitation revoked.".to_owned())
    }
    .await;
    back_to_teams(result, Some(team_id))
}

pub(super) async fn accept(
    State(state): State<AppState>,
    Path(id): Path<i64>,
    req: Request,
) -> Response {
    answer(state, id, req, Answer::Accept).await
}

pub(super) async fn decline(
    State(state): State<AppState>,
    Path(id): Path<i64>,
    req: Request,
) -> Response {
    answer(state, id, req, Answer::Decline).await
}

/// The invitation forms' answer: the code from the invitation's link.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct CodeForm {
    code: String,
}

async fn answer(state: AppState, id: i64, req: Request, answer: Answer) -> Response {
    let result = async {
        let p = posted(&state, req).await?;
        let f: CodeForm = p.fields()?;
        let team_id = service::answer(&state.ctx, &p.user.caller(), id, answer, &f.code).await?;
        let notice = match answer {
            Answer::Accept => "Invitation accepted; you are now a member of the team.",
            Answer::Decline => "Invitation declined.",
        };
        Ok((notice.to_owned(), team_id))
    }
    .await;
    match result {
        // Only an accepted invitation has a team on the page to scroll to.
        Ok((notice, team_id)) => {
            back_to_teams(Ok(notice), (answer == Answer::Accept).then_some(team_id))
        }
        Err(e) => back_to_teams(Err(e), None),
    }
}
