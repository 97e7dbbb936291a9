//! POST routes of the dashboard's HTML forms, so logging in, registering, logging out,
//! cancelling and resuming, launching a run, managing teams and share links work without
//! JavaScript. Each one reads its form into a struct of its own and calls the service function
//! the API route that does the same calls (same checks, roles, audit; logging in and
//! registering go through the auth routes, for their rate limit and cookies), and answers with a
//! 303 redirect: to the next page on success, back to
//! the form with `?error=...` on failure. The launch form is the exception on failure: it has
//! too many fields for a URL, so the page is rendered in the POST's response with what was
//! typed and the messages beside the fields (see `super::launch`). Forms that act on a session
//! carry the CSRF token as a `csrf` field; it is moved into the header the API checks, so the
//! form route is exactly as protected as the API.

mod account;
mod invitations;
mod tokens;
mod views;

use super::Dashboard;
use super::launch::{self, LaunchDraft};
use crate::AppState;
use crate::auth::routes::{self as auth_routes, ClientIp, LoginRequest, RegisterRequest};
use crate::auth::{AuthUser, CSRF_HEADER, origin};
use crate::error::{ApiJson, AppError};
use crate::service::{self, artifacts::CreateEvaluation, shares::CreateShareRequest};
use axum::Form;
use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header, request::Parts};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{Router, post};
use serde::Deserialize;
use spade_app::pages::encode_query;
use spade_db::Role;
use std::sync::Arc;

/// The form routes, merged into the app's router.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/login", post(login))
        .route("/register", post(register))
        .route("/logout", post(logout))
        .route("/runs/{run_id}/cancel", post(cancel))
        .route("/runs/{run_id}/resume", post(resume))
        .route("/runs/{run_id}/details", post(update_details))
        .route("/runs/{run_id}/delete", post(delete_run))
        .route("/runs/{run_id}/evaluate", post(evaluate))
        .route("/runs/{run_id}/environments/{env_id}/review", post(review))
        .route("/runs/new", post(launch_run))
        .route("/runs/{run_id}/shares", post(create_share))
        .route(
            "/runs/{run_id}/shares/{share_id}/revoke",
            post(revoke_share),
        )
        .route("/teams", post(create_team))
        .route("/teams/{team_id}/members", post(set_member_role))
        .route("/teams/{team_id}/invitations", post(invitations::invite))
        .route(
            "/teams/{team_id}/invitations/{invitation_id}/revoke",
            post(invitations::revoke),
        )
        .route(
            "/invitations/{invitation_id}/accept",
            post(invitations::accept),
        )
        .route(
            "/invitations/{invitation_id}/decline",
            post(invitations::decline),
        )
        .route(
            "/teams/{team_id}/members/{user_id}/remove",
            post(remove_member),
        )
        .route("/teams/{team_id}/projects", post(create_project))
        .route("/teams/{team_id}/tokens", post(tokens::create))
        .route("/chart-views/save", post(views::save))
        .route("/chart-views/{view_id}/delete", post(views::delete))
        .route("/account/name", post(account::rename))
        .route("/account/password", post(account::password))
        .route(
            "/account/sessions/{session_id}/end",
            post(account::end_session),
        )
        .route(
            "/teams/{team_id}/tokens/{token_id}/revoke",
            post(tokens::revoke),
        )
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

/// `next` if it is a path on this site, else the runs list (no open redirects). Browsers drop
/// TAB, CR and LF anywhere in a URL and treat `\\` as `/`, so `/\t/evil.example` and `/\\evil`
/// mean `//evil.example`: anything but printable ASCII (controls, whitespace, raw non-ASCII, which
/// a `Location` header cannot carry either) or a backslash makes `next` foreign, as does a second
/// leading slash. Pages this site links to are percent-encoded, so nothing of ours is lost.
pub(crate) fn local_path(next: &str) -> &str {
    let plain = next.chars().all(|c| c.is_ascii_graphic() && c != '\\');
    if plain && next.starts_with('/') && !next.starts_with("//") {
        next
    } else {
        "/runs"
    }
}

/// Refuses a login or registration form posted by another site's page (login CSRF; see
/// `auth::origin`). The other forms need the session's CSRF token instead.
fn from_our_pages(state: &AppState, headers: &HeaderMap) -> Result<(), AppError> {
    if origin::from_our_pages(headers, state.public_url.as_deref()) {
        Ok(())
    } else {
        Err(AppError::Forbidden {
            code: "cross_site_form",
            message: "this form was posted from another site's page; log in from this site's \
                      own login page"
                .into(),
        })
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
    if let Err(e) = from_our_pages(&state, &headers) {
        return e.into_response();
    }
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
    if let Err(e) = from_our_pages(&state, &headers) {
        return e.into_response();
    }
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
    if let Err(e) = auth_routes::register(State(state.clone()), ip.clone(), ApiJson(req)).await {
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

/// The fields of the launch form, in order (its names are configuration key paths, which
/// `spade::config::form` parses; a checkbox group repeats its name).
type Pairs = Vec<(String, String)>;

/// A form POST whose session checked out.
struct Posted {
    user: AuthUser,
    /// The urlencoded body, read once; [`Posted::fields`] reads it as a form's struct.
    body: Bytes,
    /// The request's head, for rendering a page in the answer.
    parts: Parts,
}

impl Posted {
    /// The form's fields as its struct `F`: a field `F` does not name (the `csrf` field) is
    /// ignored, one it names but the browser did not send reads as empty (`#[serde(default)]`).
    fn fields<F: serde::de::DeserializeOwned>(&self) -> Result<F, AppError> {
        form_fields(&self.body)
    }
}

fn form_fields<F: serde::de::DeserializeOwned>(body: &[u8]) -> Result<F, AppError> {
    serde_urlencoded::from_bytes(body).map_err(|e| AppError::invalid("form", e.to_string()))
}

/// The one field every session form carries.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct CsrfField {
    csrf: String,
}

/// Reads a form POST and authenticates it: the `csrf` field becomes the CSRF header, then the
/// API's extractor decides (session live, token matches), so a form route is exactly as
/// protected as the API route that does the same.
async fn posted(state: &AppState, req: Request) -> Result<Posted, AppError> {
    let (mut parts, body) = req.into_parts();
    let is_form = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
    if !is_form {
        return Err(AppError::invalid(
            "form",
            "expected an HTML form (application/x-www-form-urlencoded)",
        ));
    }
    let body = Bytes::from_request(Request::from_parts(parts.clone(), body), state)
        .await
        .map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                AppError::BadRequest {
                    code: "body_too_large",
                    message: e.body_text(),
                }
            } else {
                AppError::invalid("form", e.body_text())
            }
        })?;
    let CsrfField { csrf } = form_fields(&body)?;
    if let Ok(v) = HeaderValue::from_str(&csrf) {
        parts.headers.insert(CSRF_HEADER, v);
    }
    let user = AuthUser::from_request_parts(&mut parts, state).await?;
    Ok(Posted { user, body, parts })
}

// One struct per form, its fields as the browser sends them (text; an absent field reads as
// empty, as an empty text box does). Numbers and choices are parsed by the handler, whose
// messages name the field.

/// The teams page's "new team" and "new project" forms.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NameForm {
    name: String,
}

/// The teams page's "invite" and "change a member's role" forms.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct MemberForm {
    email: String,
    role: String,
}

/// The run page's "share link" form.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ShareForm {
    label: String,
    expires_in_days: String,
}

/// The run page's "evaluate a checkpoint" form.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EvaluateForm {
    checkpoint_step: String,
    suite: String,
    custom_suite: String,
    limit: String,
    samples: String,
    temperature: String,
}

/// The run page's "name, tags and notes" form; tags comma-separated.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct DetailsForm {
    name: String,
    tags: String,
    notes: String,
}

/// The environment page's review form.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ReviewForm {
    verdict: String,
    comment: String,
}

async fn logout(State(state): State<AppState>, req: Request) -> Response {
    let headers = req.headers().clone();
    match posted(&state, req).await {
        Ok(p) => match auth_routes::logout(State(state), headers, p.user).await {
            Ok(resp) => redirect_with_cookies("/login", &resp),
            Err(e) => back_to_login(&e.to_string(), "", "/runs"),
        },
        // An ended session is as good as logged out.
        Err(_) => Redirect::to("/login").into_response(),
    }
}

async fn cancel(State(state): State<AppState>, Path(run_id): Path<i64>, req: Request) -> Response {
    let result = async {
        let p = posted(&state, req).await?;
        Ok(service::runs::cancel(&state.ctx, &p.user.caller(), run_id).await?)
    };
    back_to_run(run_id, "", result.await.map(|_| String::new()))
}

async fn resume(State(state): State<AppState>, Path(run_id): Path<i64>, req: Request) -> Response {
    let result = async {
        let p = posted(&state, req).await?;
        Ok(service::runs::resume(&state.ctx, &p.user.caller(), run_id).await?)
    };
    back_to_run(run_id, "", result.await.map(|_| String::new()))
}

/// `POST /runs/{id}/details`: renames the run and sets its tags and notes, as
/// `PATCH /api/v1/runs/{id}` does; back to the run page, with the first wrong field named.
async fn update_details(
    State(state): State<AppState>,
    Path(run_id): Path<i64>,
    req: Request,
) -> Response {
    let result = async {
        let p = posted(&state, req).await?;
        let f: DetailsForm = p.fields()?;
        let tags = f
            .tags
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect();
        let update = service::runs::UpdateRun {
            name: Some(f.name),
            tags: Some(tags),
            // Browsers send a textarea's line breaks as CRLF.
            notes: Some(f.notes.replace("\r\n", "\n")),
        };
        service::runs::update(&state.ctx, &p.user.caller(), run_id, &update).await?;
        Ok(String::new())
    };
    back_to_run(run_id, "#details-h", result.await)
}

/// `POST /runs/{id}/delete`: deletes a run without a live job, then the runs list; a refusal
/// (a running run, a viewer) goes back to the run page with the reason.
async fn delete_run(
    State(state): State<AppState>,
    Path(run_id): Path<i64>,
    req: Request,
) -> Response {
    let result = async {
        let p = posted(&state, req).await?;
        service::runs::delete(&state.ctx, &p.user.caller(), run_id).await?;
        Ok::<_, AppError>(())
    };
    match result.await {
        Ok(()) => Redirect::to("/runs").into_response(),
        Err(e) => back_to_run(run_id, "", Err(e)),
    }
}

/// `POST /runs/new`: a valid form creates the run and opens its page; a refused one renders
/// the form again (422) with what was typed and each message beside its field.
async fn launch_run(State(state): State<AppState>, req: Request) -> Response {
    let (p, pairs) = match posted(&state, req).await {
        Ok(p) => match p.fields::<Pairs>() {
            Ok(pairs) => (p, pairs),
            Err(e) => return back_to_login(&e.to_string(), "", "/runs/new"),
        },
        Err(e) => return back_to_login(&e.to_string(), "", "/runs/new"),
    };
    match launch::submit(&state, p.user, &pairs).await {
        Ok(run_id) => Redirect::to(&format!("/runs/{run_id}")).into_response(),
        Err(form) => {
            let mut resp = render_page(&state, p.parts, LaunchDraft(form)).await;
            *resp.status_mut() = StatusCode::UNPROCESSABLE_ENTITY;
            resp
        }
    }
}

/// Renders the page at the request's path, as a GET would, with `ext` in the request's
/// extensions for the data source to find.
async fn render_page<T: Clone + Send + Sync + 'static>(
    state: &AppState,
    mut parts: Parts,
    ext: T,
) -> Response {
    parts.extensions.insert(ext);
    let data: spade_app::data::SharedData = Arc::new(Dashboard {
        state: state.clone(),
    });
    let context_state = state.clone();
    let options = state.leptos.clone();
    let handler = leptos_axum::render_app_to_stream_with_context(
        move || {
            leptos::prelude::provide_context(data.clone());
            leptos::prelude::provide_context(context_state.clone());
        },
        move || spade_app::shell(options.clone()),
    );
    handler(Request::from_parts(parts, Body::empty())).await
}

/// Back to run `run_id`'s page at `anchor` (`""` or `#section`) with the outcome of a change:
/// on success an extra query (`""`, or `key=value` already encoded), on failure the error.
fn back_to_run(run_id: i64, anchor: &str, result: Result<String, AppError>) -> Response {
    let to = match result {
        Ok(q) if q.is_empty() => format!("/runs/{run_id}{anchor}"),
        Ok(q) => format!("/runs/{run_id}?{q}{anchor}"),
        Err(e) => format!(
            "/runs/{run_id}?error={}{anchor}",
            encode_query(&e.to_string())
        ),
    };
    Redirect::to(&to).into_response()
}

/// Back to the teams page with the outcome of a change.
/// Carries a secret shown once (a new share token, a new invitation's code) from a form's
/// redirect to the page that shows it, in a 5-minute HttpOnly, SameSite=Strict cookie that page
/// clears: never in the address, so never in the browser's history.
fn show_once(resp: &mut Response, state: &AppState, headers: &HeaderMap, name: &str, value: &str) {
    let cookie = auth_routes::set_cookie(
        name,
        value,
        300,
        "/",
        true,
        "Strict",
        auth_routes::cookies_secure(state, headers),
    );
    if let Ok(v) = cookie {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
}

fn back_to_teams(result: Result<String, AppError>, team: Option<i64>) -> Response {
    let anchor = team.map(|t| format!("#team-{t}")).unwrap_or_default();
    let to = match result {
        Ok(notice) => format!("/teams?notice={}{anchor}", encode_query(&notice)),
        Err(e) => format!("/teams?error={}{anchor}", encode_query(&e.to_string())),
    };
    Redirect::to(&to).into_response()
}

fn role(s: &str) -> Result<Role, AppError> {
    match s {
        "viewer" => Ok(Role::Viewer),
        "editor" => Ok(Role::Editor),
        "owner" => Ok(Role::Owner),
        other => Err(AppError::invalid(
            "role",
            format!("expected viewer, editor or owner, got \"{other}\""),
        )),
    }
}

async fn create_team(State(state): State<AppState>, req: Request) -> Response {
    let result = async {
        let p = posted(&state, req).await?;
        let NameForm { name } = p.fields()?;
        let team = service::teams::create_team(&state.ctx, &p.user.caller(), &name).await?;
        Ok((
            format!("Team \"{}\" created; you are its owner.", team.name),
            team.id,
        ))
    }
    .await;
    match result {
        Ok((notice, id)) => back_to_teams(Ok(notice), Some(id)),
        Err(e) => back_to_teams(Err(e), None),
    }
}

async fn set_member_role(
    State(state): State<AppState>,
    Path(team_id): Path<i64>,
    req: Request,
) -> Response {
    let result = async {
        let p = posted(&state, req).await?;
        let f: MemberForm = p.fields()?;
        let m = service::teams::set_member_role(
            &state.ctx,
            &p.user.caller(),
            team_id,
            &f.email,
            role(&f.role)?,
        )
        .await?;
        Ok(format!(
            "{} ({}) is now {}.",
            m.display_name, m.email, m.role
        ))
    }
    .await;
    back_to_teams(result, Some(team_id))
}

async fn remove_member(
    State(state): State<AppState>,
    Path((team_id, user_id)): Path<(i64, i64)>,
    req: Request,
) -> Response {
    let result = async {
        let p = posted(&state, req).await?;
        service::teams::remove_member(&state.ctx, &p.user.caller(), team_id, user_id).await?;
        Ok("Member removed.".to_owned())
    }
    .await;
    back_to_teams(result, Some(team_id))
}

async fn create_project(
    State(state): State<AppState>,
    Path(team_id): Path<i64>,
    req: Request,
) -> Response {
    let result = async {
        let p = posted(&state, req).await?;
        let NameForm { name } = p.fields()?;
        let project =
            service::teams::create_project(&state.ctx, &p.user.caller(), team_id, &name).await?;
        Ok(format!("Project \"{}\" created.", project.name))
    }
    .await;
    back_to_teams(result, Some(team_id))
}

/// `POST /runs/{id}/shares`: creates a link with the form's label and expiry and shows it once
/// on the run page. The token goes there in a short-lived HttpOnly cookie that the run page
/// clears, not in the redirect's address, which would keep it in the browser's history.
async fn create_share(
    State(state): State<AppState>,
    Path(run_id): Path<i64>,
    req: Request,
) -> Response {
    let headers = req.headers().clone();
    let result = async {
        let p = posted(&state, req).await?;
        let f: ShareForm = p.fields()?;
        let body = CreateShareRequest {
            label: f.label,
            expires_in_days: form_number::<i32>("expires_in_days", &f.expires_in_days)?,
        };
        let created =
            service::shares::create_share(&state.ctx, &p.user.caller(), run_id, &body).await?;
        Ok::<_, AppError>(created.token)
    }
    .await;
    match result {
        Ok(token) => {
            let mut resp = back_to_run(run_id, "#sharing", Ok(String::new()));
            show_once(
                &mut resp,
                &state,
                &headers,
                &spade_app::dto::new_share_cookie(run_id),
                &token,
            );
            resp
        }
        Err(e) => back_to_run(run_id, "#sharing", Err(e)),
    }
}

async fn revoke_share(
    State(state): State<AppState>,
    Path((run_id, share_id)): Path<(i64, i64)>,
    req: Request,
) -> Response {
    let result = async {
        let p = posted(&state, req).await?;
        service::shares::revoke_share(&state.ctx, &p.user.caller(), run_id, share_id).await?;
        Ok::<_, AppError>(String::new())
    }
    .await;
    back_to_run(run_id, "#sharing", result)
}

/// Parses an optional whole-number field of a form, naming the field when it is not one.
fn form_number<T: std::str::FromStr>(name: &str, text: &str) -> Result<Option<T>, AppError> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(None);
    }
    t.parse()
        .map(Some)
        .map_err(|_| AppError::invalid(name, format!("expected a whole number, got {t:?}")))
}

fn form_float(name: &str, text: &str) -> Result<Option<f64>, AppError> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(None);
    }
    t.parse()
        .map(Some)
        .map_err(|_| AppError::invalid(name, format!("expected a number, got {t:?}")))
}

/// The run page's "Evaluate a checkpoint" form: checkpoint, suite (a named one, or `custom`
/// with `custom_suite` = `qa:PATH.jsonl`, `mc:`, `code:` / `envs:DIR`) and items per task.
async fn evaluate(
    State(state): State<AppState>,
    Path(run_id): Path<i64>,
    req: Request,
) -> Response {
    let result = async {
        let p = posted(&state, req).await?;
        let f: EvaluateForm = p.fields()?;
        let checkpoint_step = form_number("checkpoint_step", &f.checkpoint_step)?
            .ok_or_else(|| AppError::invalid("checkpoint_step", "choose a checkpoint"))?;
        let suite = match f.suite.as_str() {
            "custom" => f.custom_suite.trim().to_owned(),
            named => named.to_owned(),
        };
        let req = CreateEvaluation {
            checkpoint_step,
            suite,
            limit: form_number("limit", &f.limit)?,
            max_new_tokens: None,
            samples: form_number("samples", &f.samples)?,
            temperature: form_float("temperature", &f.temperature)?,
        };
        service::artifacts::request_evaluation(&state.ctx, &p.user.caller(), run_id, &req).await?;
        Ok(String::new())
    }
    .await;
    back_to_run(run_id, "#benchmarks", result)
}

/// `POST /runs/{id}/environments/{env}/review` from the environment page: the API's review
/// (editors only), then back to the page, naming a refusal there.
async fn review(
    State(state): State<AppState>,
    Path((run_id, env_id)): Path<(i64, String)>,
    req: Request,
) -> Response {
    let result = async {
        let p = posted(&state, req).await?;
        let f: ReviewForm = p.fields()?;
        let verdict = match f.verdict.as_str() {
            "good" => spade_db::types::Verdict::Good,
            "broken" => spade_db::types::Verdict::Broken,
            "reward_hackable" => spade_db::types::Verdict::RewardHackable,
            other => {
                return Err(AppError::invalid(
                    "verdict",
                    format!("expected good, broken or reward_hackable, got {other:?}"),
                ));
            }
        };
        service::environments::mark(
            &state.ctx,
            &p.user.caller(),
            run_id,
            &env_id,
            verdict,
            &f.comment,
        )
        .await?;
        Ok(())
    }
    .await;
    let page = format!("/runs/{run_id}/environments/{}", encode_query(&env_id));
    let to = match result {
        Ok(()) => format!("{page}#review"),
        Err(e) => format!("{page}?error={}#review", encode_query(&e.to_string())),
    };
    Redirect::to(&to).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_reads_into_its_struct_ignoring_the_csrf_field() {
        let body = b"csrf=t0k&label=for+Ana+%26+Bo&expires_in_days=7";
        let f: ShareForm = form_fields(body).expect("a share form");
        assert_eq!(
            (f.label.as_str(), f.expires_in_days.as_str()),
            ("for Ana & Bo", "7")
        );
        // A field the browser did not send reads as empty, as an empty text box does.
        let f: EvaluateForm = form_fields(body).expect("no evaluation fields is still a form");
        assert!(f.checkpoint_step.is_empty() && f.suite.is_empty());
        assert!(
            form_number::<i32>("expires_in_days", "seven")
                .is_err_and(|e| e.to_string().contains("expires_in_days"))
        );
    }

    #[test]
    fn only_local_paths_are_followed_after_login() {
        assert_eq!(local_path("/runs/4"), "/runs/4");
        for bad in [
            "https://evil.example",
            "//evil.example",
            "/\\evil",
            "/\t/evil.example",
            "/\n/evil.example",
            "/\r\nSet-Cookie: x=1",
            "/ /evil.example",
            "/\u{0}/evil",
            "/caf\u{e9}",
            "runs",
            "",
        ] {
            assert_eq!(local_path(bad), "/runs", "{bad}");
        }
    }
}
