//! POST routes of the dashboard's HTML forms, so logging in, registering, logging out,
//! cancelling and resuming work without JavaScript. Each one calls the API handler that does
//! the same thing (same validation, rate limit, roles, audit) and answers with a 303 redirect:
//! to the next page on success, back to the form with `?error=...` on failure. Forms that act
//! on a session carry the CSRF token as a `csrf` field; it is moved into the header the API
//! checks, so the form route is exactly as protected as the API.

use crate::AppState;
use crate::api;
use crate::auth::routes::{self as auth_routes, ClientIp, LoginRequest, RegisterRequest};
use crate::auth::{AuthUser, CSRF_HEADER};
use crate::error::{ApiJson, ApiPath, AppError};
use axum::Form;
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, header, request::Parts};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{Router, post};
use serde::Deserialize;
use spade_app::pages::encode_query;

/// The form routes, merged into the app's router.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/login", post(login))
        .route("/register", post(register))
        .route("/logout", post(logout))
        .route("/runs/{run_id}/cancel", post(cancel))
        .route("/runs/{run_id}/resume", post(resume))
        .route("/runs/{run_id}/evaluate", post(evaluate))
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    email: String,
    password: String,
    #[serde(default)]
    next: String,
}

#[derive(Debug, Deserialize)]
pub struct RegisterForm {
    email: String,
    display_name: String,
    password: String,
}

#[derive(Debug, Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// `next` if it is a path on this site, else the runs list (no open redirects).
fn local_path(next: &str) -> &str {
    if next.starts_with('/') && !next.starts_with("//") && !next.contains('\\') {
        next
    } else {
        "/runs"
    }
}

/// A 303 to `to` that carries the `Set-Cookie` headers of `from`.
fn redirect_with_cookies(to: &str, from: &Response) -> Response {
    let mut resp = Redirect::to(to).into_response();
    for v in from.headers().get_all(header::SET_COOKIE) {
        resp.headers_mut().append(header::SET_COOKIE, v.clone());
    }
    resp
}

async fn login(
    State(state): State<AppState>,
    ip: ClientIp,
    headers: HeaderMap,
    Form(f): Form<LoginForm>,
) -> Response {
    let next = local_path(&f.next).to_owned();
    let req = LoginRequest {
        email: f.email.clone(),
        password: f.password,
        api_client: false,
    };
    match auth_routes::login(State(state), ip, headers, ApiJson(req)).await {
        Ok(resp) if resp.status().is_success() => redirect_with_cookies(&next, &resp),
        Ok(resp) => back_to_login(
            &format!("log in failed ({})", resp.status()),
            &f.email,
            &next,
        ),
        Err(e) => back_to_login(&e.to_string(), &f.email, &next),
    }
}

fn back_to_login(error: &str, email: &str, next: &str) -> Response {
    Redirect::to(&format!(
        "/login?error={}&email={}&next={}",
        encode_query(error),
        encode_query(email),
        encode_query(next)
    ))
    .into_response()
}

async fn register(
    State(state): State<AppState>,
    ip: ClientIp,
    headers: HeaderMap,
    Form(f): Form<RegisterForm>,
) -> Response {
    let back = |error: &str| {
        Redirect::to(&format!(
            "/register?error={}&email={}&display_name={}",
            encode_query(error),
            encode_query(&f.email),
            encode_query(&f.display_name)
        ))
        .into_response()
    };
    let req = RegisterRequest {
        email: f.email.clone(),
        display_name: f.display_name.clone(),
        password: f.password.clone(),
    };
    if let Err(e) = auth_routes::register(State(state.clone()), ApiJson(req)).await {
        return back(&e.to_string());
    }
    // Registered: log the new account in, as people expect.
    let req = LoginRequest {
        email: f.email.clone(),
        password: f.password,
        api_client: false,
    };
    match auth_routes::login(State(state), ip, headers, ApiJson(req)).await {
        Ok(resp) if resp.status().is_success() => redirect_with_cookies("/runs", &resp),
        _ => back_to_login("account created; log in", &f.email, "/runs"),
    }
}

/// Authenticates a form POST: the `csrf` field becomes the CSRF header, then the API's
/// extractor decides (session live, token matches).
async fn form_user(state: &AppState, req: Request) -> Result<(AuthUser, Parts), AppError> {
    let (mut parts, body) = req.into_parts();
    let Form(f) = Form::<CsrfForm>::from_request(Request::from_parts(parts.clone(), body), state)
        .await
        .map_err(|_| AppError::invalid("csrf", "the form must carry its csrf field"))?;
    if let Ok(v) = HeaderValue::from_str(&f.csrf) {
        parts.headers.insert(CSRF_HEADER, v);
    }
    let user = AuthUser::from_request_parts(&mut parts, state).await?;
    Ok((user, parts))
}

async fn logout(State(state): State<AppState>, req: Request) -> Response {
    match form_user(&state, req).await {
        Ok((user, _)) => match auth_routes::logout(State(state), user).await {
            Ok(resp) => redirect_with_cookies("/login", &resp),
            Err(e) => back_to_login(&e.to_string(), "", "/runs"),
        },
        // An ended session is as good as logged out.
        Err(_) => Redirect::to("/login").into_response(),
    }
}

async fn cancel(State(state): State<AppState>, Path(run_id): Path<i64>, req: Request) -> Response {
    run_action(state, run_id, req, true).await
}

async fn resume(State(state): State<AppState>, Path(run_id): Path<i64>, req: Request) -> Response {
    run_action(state, run_id, req, false).await
}

async fn run_action(state: AppState, run_id: i64, req: Request, cancel: bool) -> Response {
    let page = format!("/runs/{run_id}");
    let result = match form_user(&state, req).await {
        Ok((user, _)) if cancel => api::runs::cancel(State(state), user, ApiPath(run_id))
            .await
            .map(|_| ()),
        Ok((user, _)) => api::runs::resume(State(state), user, ApiPath(run_id))
            .await
            .map(|_| ()),
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => Redirect::to(&page).into_response(),
        Err(e) => {
            Redirect::to(&format!("{page}?error={}", encode_query(&e.to_string()))).into_response()
        }
    }
}

/// The run page's "Evaluate a checkpoint" form. Numbers arrive as text so that a bad value
/// gets a message naming the field instead of a generic form rejection.
#[derive(Debug, Deserialize)]
struct EvaluateForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    checkpoint_step: String,
    #[serde(default)]
    suite: String,
    /// `qa:PATH.jsonl` or `envs:DIR`, used when `suite` is `custom`.
    #[serde(default)]
    custom_suite: String,
    #[serde(default)]
    limit: String,
}

/// Parses an optional positive number field of a form.
fn form_number<T: std::str::FromStr>(field: &str, text: &str) -> Result<Option<T>, AppError> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(None);
    }
    t.parse()
        .map(Some)
        .map_err(|_| AppError::invalid(field, format!("expected a whole number, got {t:?}")))
}

async fn evaluate(
    State(state): State<AppState>,
    Path(run_id): Path<i64>,
    req: Request,
) -> Response {
    let page = format!("/runs/{run_id}");
    let result = async {
        let (mut parts, body) = req.into_parts();
        let Form(f) =
            Form::<EvaluateForm>::from_request(Request::from_parts(parts.clone(), body), &state)
                .await
                .map_err(|e| AppError::invalid("form", e.body_text()))?;
        if let Ok(v) = HeaderValue::from_str(&f.csrf) {
            parts.headers.insert(CSRF_HEADER, v);
        }
        let user = AuthUser::from_request_parts(&mut parts, &state).await?;
        let checkpoint_step = form_number("checkpoint_step", &f.checkpoint_step)?
            .ok_or_else(|| AppError::invalid("checkpoint_step", "choose a checkpoint"))?;
        let suite = if f.suite == "custom" {
            f.custom_suite.trim().to_owned()
        } else {
            f.suite.clone()
        };
        let req = api::evaluations::CreateEvaluation {
            checkpoint_step,
            suite,
            limit: form_number("limit", &f.limit)?,
            max_new_tokens: None,
        };
        api::evaluations::create(State(state.clone()), user, ApiPath(run_id), ApiJson(req))
            .await
            .map(|_| ())
    }
    .await;
    match result {
        Ok(()) => Redirect::to(&format!("{page}#benchmarks")).into_response(),
        Err(e) => Redirect::to(&format!(
            "{page}?error={}#benchmarks",
            encode_query(&e.to_string())
        ))
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_followed_after_login() {
        assert_eq!(local_path("/runs/4"), "/runs/4");
        for bad in [
            "https://evil.example",
            "//evil.example",
            "/\\evil",
            "runs",
            "",
        ] {
            assert_eq!(local_path(bad), "/runs", "{bad}");
        }
    }
}
