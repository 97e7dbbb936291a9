//! The account page's forms: the display name, the password (which signs out every other
//! session) and ending a login session. Each calls the `auth::account` function the API route
//! calls, so the checks, the login throttle and the audit entries are the API's. Ending the
//! session this browser uses is logging out here: it goes to the login page.

use super::{encode_query, posted};
use crate::AppState;
use crate::auth::account;
use crate::auth::routes::ClientIp;
use crate::error::AppError;
use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NameForm {
    display_name: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PasswordForm {
    current_password: String,
    new_password: String,
    confirm_password: String,
}

pub(super) fn back_to_account(result: Result<String, AppError>, anchor: &str) -> Response {
    let to = match result {
        Ok(notice) => format!("/account?notice={}#{anchor}", encode_query(&notice)),
        Err(e) => format!("/account?error={}#{anchor}", encode_query(&e.to_string())),
    };
    Redirect::to(&to).into_response()
}

pub(super) async fn rename(State(state): State<AppState>, req: Request) -> Response {
    let result = async {
        let p = posted(&state, req).await?;
        let f: NameForm = p.fields()?;
        let user = account::rename(&state, &p.user, &f.display_name).await?;
        Ok(format!("Your name is now \"{}\".", user.display_name))
    }
    .await;
    back_to_account(result, "name")
}

pub(super) async fn password(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    req: Request,
) -> Response {
    let result = async {
        let p = posted(&state, req).await?;
        let f: PasswordForm = p.fields()?;
        if f.new_password != f.confirm_password {
            return Err(AppError::invalid(
                "confirm_password",
                "does not match the new password",
            ));
        }
        let ended =
            account::change_password(&state, &p.user, &ip, f.current_password, f.new_password)
                .await?;
        Ok(match ended {
            0 => "Password changed.".to_owned(),
            1 => "Password changed; your 1 other session is signed out.".to_owned(),
            n => format!("Password changed; your {n} other sessions are signed out."),
        })
    }
    .await;
    back_to_account(result, "password")
}

pub(super) async fn end_session(
    State(state): State<AppState>,
    Path(id): Path<i64>,
    req: Request,
) -> Response {
    let result = async {
        let p = posted(&state, req).await?;
        account::end_session(&state, &p.user, id).await?;
        Ok::<_, AppError>(p.user.session_id() == Some(id))
    }
    .await;
    match result {
        Ok(true) => Redirect::to("/login").into_response(),
        Ok(false) => back_to_account(Ok("Session ended: it is signed out.".into()), "sessions"),
        Err(e) => back_to_account(Err(e), "sessions"),
    }
}
