//! The teams page's invitation forms: an owner invites an email or revokes an open invitation;
//! the signed-in user accepts or declines one sent to their email. Each calls the service
//! function the API route calls, so roles, the "only the invited account" rule and the audit
//! entries are the API's.

use super::{MemberForm, back_to_teams, posted, role};
use crate::AppState;
use crate::service::teams::invitations as service;
use axum::extract::{Path, Request, State};
use axum::response::Response;
use spade_db::teams::invitations::Answer;

pub(super) async fn invite(
    State(state): State<AppState>,
    Path(team_id): Path<i64>,
    req: Request,
) -> Response {
    let result = async {
        let p = posted(&state, req).await?;
        let f: MemberForm = p.fields()?;
        let inv = service::invite(&state, &p.user, team_id, &f.email, role(&f.role)?).await?;
        // Says the same whether or not the email has an account, as the API does.
        Ok(format!(
            "Invitation sent to {} as {}; they join the team once they accept it.",
            inv.email, inv.role
        ))
    }
    .await;
    back_to_teams(result, Some(team_id))
}

pub(super) async fn revoke(
    State(state): State<AppState>,
    Path((team_id, id)): Path<(i64, i64)>,
    req: Request,
) -> Response {
    let result = async {
        let p = posted(&state, req).await?;
        service::revoke(&state, &p.user, team_id, id).await?;
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

async fn answer(state: AppState, id: i64, req: Request, answer: Answer) -> Response {
    let result = async {
        let p = posted(&state, req).await?;
        let team_id = service::answer(&state, &p.user, id, answer).await?;
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
