//! Issue 36, item 8: joining a team takes the invited person's consent, and inviting cannot be
//! used to enumerate accounts or team names. Each test is an attack that must fail.

use crate::support::{Cred, Resp, TestApp, TestResult};
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;

async fn invite(app: &TestApp, owner: &Cred, team: i64, email: &str, role: &str) -> Resp {
    app.post(
        &format!("/api/v1/teams/{team}/invitations"),
        owner,
        json!({ "email": email, "role": role }),
    )
    .await
}

fn id(r: &Resp) -> i64 {
    r.json()["id"].as_i64().unwrap_or(-1)
}

/// An invitation as its owner learns of it: its id and the code of its link.
#[derive(Debug, Clone)]
struct Inv {
    id: i64,
    code: String,
}

fn inv(r: &Resp) -> Inv {
    Inv {
        id: id(r),
        code: r.json()["code"].as_str().unwrap_or_default().to_owned(),
    }
}

async fn answer(app: &TestApp, who: &Cred, inv: &Inv, what: &str) -> Resp {
    app.post(
        &format!("/api/v1/invitations/{}/{what}", inv.id),
        who,
        json!({ "code": inv.code }),
    )
    .await
}

async fn accept(app: &TestApp, who: &Cred, inv: &Inv) -> Resp {
    answer(app, who, inv, "accept").await
}

async fn revoke(app: &TestApp, owner: &Cred, team: i64, invitation: i64) -> Resp {
    let path = format!("/api/v1/teams/{team}/invitations/{invitation}");
    app.call(Method::DELETE, &path, owner, None).await
}

async fn team_ids(app: &TestApp, who: &Cred) -> Vec<i64> {
    app.get("/api/v1/teams", who)
        .await
        .json()
        .as_array()
        .map(|a| a.iter().filter_map(|t| t["id"].as_i64()).collect())
        .unwrap_or_default()
}

/// Before the fix, `PUT /teams/{id}/members` with a registered user's email made them a member
/// on the spot: anyone could drop anyone into their team (and onto its pages) without consent.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn an_invited_user_is_not_a_member_until_they_accept(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool);
    let owner = app.user("owner@x.org").await;
    let bob = app.user("bob@x.org").await;
    let (team, _, run) = app.team_project_run(&owner, "lab").await;

    // The old way in adds nobody: a role change finds members only.
    let r = app
        .call(
            Method::PUT,
            &format!("/api/v1/teams/{team}/members"),
            &owner,
            Some(json!({ "email": "bob@x.org", "role": "editor" })),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());

    let inv = invite(&app, &owner, team, "Bob@X.org", "editor").await;
    assert_eq!(inv.status, StatusCode::CREATED, "{}", inv.text());
    assert_eq!(inv.json()["email"], "bob@x.org");
    assert!(team_ids(&app, &bob).await.is_empty(), "not a member yet");
    assert_eq!(
        app.get(&format!("/api/v1/runs/{run}"), &bob).await.status,
        StatusCode::NOT_FOUND
    );
    let members = app
        .get(&format!("/api/v1/teams/{team}/members"), &owner)
        .await;
    assert_eq!(members.json().as_array().map(Vec::len), Some(1));

    let mine = app.get("/api/v1/invitations", &bob).await.json();
    assert_eq!(mine[0]["id"], id(&inv), "{mine}");
    assert_eq!(mine[0]["team_name"], "lab");
    assert_eq!(mine[0]["role"], "editor");
    let listed = app
        .get(&format!("/api/v1/teams/{team}/invitations"), &owner)
        .await
        .json();
    assert_eq!(listed[0]["email"], "bob@x.org", "{listed}");

    let r = accept(&app, &bob, &self::inv(&inv)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(team_ids(&app, &bob).await, vec![team]);
    assert_eq!(
        app.get(&format!("/api/v1/runs/{run}"), &bob).await.status,
        StatusCode::OK
    );
    assert_eq!(
        app.get("/api/v1/invitations", &bob).await.json(),
        json!([]),
        "answered invitations are no longer listed"
    );

    // Declining leaves the decliner outside.
    let carol = app.user("carol@x.org").await;
    let inv = self::inv(&invite(&app, &owner, team, "carol@x.org", "viewer").await);
    let r = answer(&app, &carol, &inv, "decline").await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text());
    assert!(team_ids(&app, &carol).await.is_empty());
    Ok(())
}

/// The answer without what must differ between two invitations (id, email, times).
fn shape(r: &Resp) -> (StatusCode, Value) {
    let mut j = r.json();
    if let Some(o) = j.as_object_mut() {
        for k in ["id", "email", "created_at", "expires_at", "code"] {
            if let Some(v) = o.get_mut(k) {
                *v = json!(v.is_string() || v.is_number());
            }
        }
    }
    (r.status, j)
}

/// Before the fix, adding an unknown email answered 404 `user not found` and a registered one
/// 200: any team owner (anyone, after creating a team) could test which emails have accounts.
/// Team names were globally unique, so creating one told anyone which names other teams use.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn inviting_an_unknown_email_answers_exactly_like_a_known_one(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool);
    let mallory = app.user("mallory@x.org").await;
    app.register("alice@x.org").await;
    let alice = Cred::Bearer(app.login_api("alice@x.org").await.0);
    let (alices_team, _, _) = app.team_project_run(&alice, "secret-project-x").await;
    let (team, _, _) = app.team_project_run(&mallory, "probe").await;

    let known = invite(&app, &mallory, team, "alice@x.org", "viewer").await;
    let unknown = invite(&app, &mallory, team, "nobody@x.org", "viewer").await;
    assert_eq!(known.status, StatusCode::CREATED, "{}", known.text());
    assert_eq!(shape(&known), shape(&unknown));
    let keys = |r: &Resp| {
        r.json()
            .as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>())
    };
    assert_eq!(keys(&known), keys(&unknown));
    let listed = app
        .get(&format!("/api/v1/teams/{team}/invitations"), &mallory)
        .await
        .json();
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "{listed}");

    // Team names: taking another team's name is no conflict, so it reveals nothing...
    let r = app
        .post(
            "/api/v1/teams",
            &mallory,
            json!({ "name": "secret-project-x" }),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    assert_ne!(id(&r), alices_team);
    // ...while one person still cannot make two teams they could not tell apart.
    let r = app
        .post("/api/v1/teams", &mallory, json!({ "name": "probe" }))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text());
    Ok(())
}

/// An invitation belongs to the account with the invited email: nobody else sees it, accepts it
/// or declines it, and a foreign one answers exactly like a missing one.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn a_user_cannot_accept_or_see_someone_elses_invitation(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool);
    let owner = app.user("owner@x.org").await;
    let bob = app.user("bob@x.org").await;
    let mallory = app.user("mallory@x.org").await;
    let (team, _, run) = app.team_project_run(&owner, "lab").await;
    let inv = self::inv(&invite(&app, &owner, team, "bob@x.org", "owner").await);

    assert_eq!(
        app.get("/api/v1/invitations", &mallory).await.json(),
        json!([])
    );
    // Even with the code (a forwarded link), only the invited account answers.
    let stolen = accept(&app, &mallory, &inv).await;
    let missing = accept(
        &app,
        &mallory,
        &Inv {
            id: inv.id + 1000,
            ..inv.clone()
        },
    )
    .await;
    assert_eq!(stolen.status, StatusCode::NOT_FOUND, "{}", stolen.text());
    assert_eq!(stolen.json(), missing.json());
    let r = answer(&app, &mallory, &inv, "decline").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(team_ids(&app, &mallory).await.is_empty());
    assert_eq!(
        app.get(&format!("/api/v1/runs/{run}"), &mallory)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    // Nor does the owner accept on bob's behalf.
    assert_eq!(
        accept(&app, &owner, &inv).await.status,
        StatusCode::NOT_FOUND
    );
    // Bob's invitation is untouched by all that.
    assert_eq!(accept(&app, &bob, &inv).await.status, StatusCode::OK);
    Ok(())
}

/// Inviting, listing and revoking invitations is an owner's: a viewer or an editor cannot, and a
/// stranger's attempt looks like a missing team.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn only_an_owner_invites_lists_or_revokes(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool);
    let owner = app.user("owner@x.org").await;
    let viewer = app.user("viewer@x.org").await;
    let editor = app.user("editor@x.org").await;
    let stranger = app.user("stranger@x.org").await;
    let (team, _, _) = app.team_project_run(&owner, "lab").await;
    assert_eq!(
        app.join(&owner, team, "viewer@x.org", "viewer")
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        app.join(&owner, team, "editor@x.org", "editor")
            .await
            .status,
        StatusCode::OK
    );
    let inv = id(&invite(&app, &owner, team, "friend@x.org", "viewer").await);

    for who in [&viewer, &editor] {
        let r = invite(&app, who, team, "mate@x.org", "owner").await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text());
        let r = app
            .get(&format!("/api/v1/teams/{team}/invitations"), who)
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
        let r = app
            .call(
                Method::DELETE,
                &format!("/api/v1/teams/{team}/invitations/{inv}"),
                who,
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
    }
    let r = invite(&app, &stranger, team, "stranger@x.org", "owner").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
    // A member's email is no invitation (the owner sees members' emails anyway).
    let r = invite(&app, &owner, team, "viewer@x.org", "owner").await;
    assert_eq!(r.code(), "already_member");
    let r = invite(&app, &owner, team, "not an email", "viewer").await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    Ok(())
}

/// An invitation is answered once: a second accept, an accept after declining, an accept after
/// the owner revoked it, and a revoke after the accept are all refused.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn an_invitation_is_answered_once(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool.clone());
    let owner = app.user("owner@x.org").await;
    let bob = app.user("bob@x.org").await;
    let (team, _, _) = app.team_project_run(&owner, "lab").await;
    let inv = self::inv(&invite(&app, &owner, team, "bob@x.org", "viewer").await);
    assert_eq!(
        revoke(&app, &owner, team, inv.id).await.status,
        StatusCode::NO_CONTENT
    );
    let r = accept(&app, &bob, &inv).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text());
    assert!(r.message().contains("revoked"), "{}", r.message());
    assert!(team_ids(&app, &bob).await.is_empty());

    let inv = self::inv(&invite(&app, &owner, team, "bob@x.org", "viewer").await);
    let r = answer(&app, &bob, &inv, "decline").await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(accept(&app, &bob, &inv).await.status, StatusCode::CONFLICT);
    assert!(team_ids(&app, &bob).await.is_empty());

    let inv = self::inv(&invite(&app, &owner, team, "bob@x.org", "viewer").await);
    assert_eq!(accept(&app, &bob, &inv).await.status, StatusCode::OK);
    assert_eq!(accept(&app, &bob, &inv).await.status, StatusCode::CONFLICT);
    assert_eq!(
        revoke(&app, &owner, team, inv.id).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(team_ids(&app, &bob).await, vec![team]);

    // An expired invitation cannot be accepted either.
    let carol = app.user("carol@x.org").await;
    let inv = self::inv(&invite(&app, &owner, team, "carol@x.org", "editor").await);
    sqlx::query(
        "UPDATE team_invitations SET expires_at = now() - interval '1 second' WHERE id = $1",
    )
    .bind(inv.id)
    .execute(&pool)
    .await?;
    assert_eq!(
        accept(&app, &carol, &inv).await.status,
        StatusCode::CONFLICT
    );
    assert!(team_ids(&app, &carol).await.is_empty());
    Ok(())
}

/// Eight accepts of one invitation at the same moment (two sessions of the invited user): one
/// succeeds, the others see it answered, and one membership and one audit entry exist.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn concurrent_accepts_make_one_membership(pool: PgPool) -> TestResult {
    let app = TestApp::new(pool.clone());
    let owner = app.user("owner@x.org").await;
    let bob1 = app.user("bob@x.org").await;
    let bob2 = Cred::Bearer(app.login_api("bob@x.org").await.0);
    let (team, _, _) = app.team_project_run(&owner, "lab").await;
    let inv = self::inv(&invite(&app, &owner, team, "bob@x.org", "editor").await);
    let tries = (0..8).map(|i| accept(&app, if i % 2 == 0 { &bob1 } else { &bob2 }, &inv));
    let answers = futures_util::future::join_all(tries).await;
    let ok = answers
        .iter()
        .filter(|r| r.status == StatusCode::OK)
        .count();
    let refused = answers
        .iter()
        .filter(|r| r.status == StatusCode::CONFLICT)
        .count();
    assert_eq!((ok, refused), (1, 7));
    let members: i64 = sqlx::query_scalar("SELECT count(*) FROM memberships WHERE team_id = $1")
        .bind(team)
        .fetch_one(&pool)
        .await?;
    assert_eq!(members, 2);
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action = 'invitation.accept' AND team_id = $1",
    )
    .bind(team)
    .fetch_one(&pool)
    .await?;
    assert_eq!(audited, 1);
    Ok(())
}

/// A GET of a page as a browser sends it, with `cookies` (`name=value; ...`).
async fn page(app: &TestApp, path: &str, cookies: &str) -> Resp {
    let req = axum::http::Request::builder()
        .uri(path)
        .header(axum::http::header::COOKIE, cookies)
        .body(axum::body::Body::empty())
        .unwrap_or_default();
    app.send(req).await
}

/// The teams page's forms go through the same service: the owner's invite form invites (the
/// notice says the same for any email) and hands the link over once, in a cookie the teams
/// page shows and clears; the invited user's page shows the invitation with Accept / Decline
/// and nothing of the team before they accept, and opening the link fills the code in; another
/// account's post is refused, and the invited user's joins the team.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn the_teams_page_invites_and_the_invited_user_accepts_there(pool: PgPool) -> TestResult {
    use crate::pages::{FORM, browser_session, post_form};
    let app = TestApp::new(pool);
    let owner = app.user("owner@x.org").await;
    let bob = app.user("bob@x.org").await;
    app.register("mallory@x.org").await;
    let (team, _, _) = app.team_project_run(&owner, "lab").await;
    let (o_access, o_csrf) = browser_session(&app, "owner@x.org").await;
    let invite_form = format!("/teams/{team}/invitations");
    let cookie_name = format!("spade_new_invitation_{team}");
    let mut notices = Vec::new();
    let mut handed = Vec::new();
    for email in ["bob%40x.org", "nobody%40x.org"] {
        let body = format!("csrf={o_csrf}&email={email}&role=editor");
        let r = post_form(&app, &invite_form, &o_access, FORM, &body).await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text());
        let to = r.header("location");
        assert!(to.starts_with("/teams?notice=Invitation"), "{to}");
        assert!(
            !to.contains("spi_"),
            "the code stays out of the address: {to}"
        );
        notices.push(
            to.replace("bob%40x.org", "E")
                .replace("nobody%40x.org", "E"),
        );
        handed.push(r.cookie(&cookie_name).unwrap_or_default());
    }
    assert_eq!(
        notices[0], notices[1],
        "the same answer for a known and an unknown email"
    );
    // The owner's page shows bob's link once (the cookie it came in is cleared).
    let (bob_id, bob_code) = handed[0].split_once(':').unwrap_or_default();
    let inv_id: i64 = bob_id.parse().unwrap_or(-1);
    assert!(bob_code.starts_with("spi_"), "{handed:?}");
    let shown = page(
        &app,
        "/teams",
        &format!("spade_access={o_access}; {cookie_name}={}", handed[0]),
    )
    .await;
    let link = format!("/teams?invitation={inv_id}&amp;code={bob_code}");
    assert!(shown.text().contains(&link), "{}", shown.text());
    assert_eq!(
        shown.cookie(&cookie_name),
        Some(String::new()),
        "the page clears the cookie that brought the link"
    );
    let again = page(&app, "/teams", &format!("spade_access={o_access}")).await;
    assert!(!again.text().contains(bob_code), "shown only once");

    let (b_access, b_csrf) = browser_session(&app, "bob@x.org").await;
    let bare = page(&app, "/teams", &format!("spade_access={b_access}"))
        .await
        .text();
    assert_eq!(
        app.get("/api/v1/invitations", &bob).await.json()[0]["id"],
        inv_id
    );
    assert!(
        bare.contains(&format!(r#"action="/invitations/{inv_id}/accept""#)),
        "{bare}"
    );
    assert!(bare.contains(&format!(r#"formaction="/invitations/{inv_id}/decline""#)));
    assert!(!bare.contains(bob_code), "no code without the link");
    assert!(
        !bare.contains(&format!(r#"id="team-{team}""#)),
        "not a member yet"
    );
    // Opening the link fills the code in.
    let opened = page(
        &app,
        &format!("/teams?invitation={inv_id}&code={bob_code}"),
        &format!("spade_access={b_access}"),
    )
    .await
    .text();
    assert!(
        opened.contains(&format!(r#"value="{bob_code}""#)),
        "{opened}"
    );

    let (m_access, m_csrf) = browser_session(&app, "mallory@x.org").await;
    let accept = format!("/invitations/{inv_id}/accept");
    let r = post_form(
        &app,
        &accept,
        &m_access,
        FORM,
        &format!("csrf={m_csrf}&code={bob_code}"),
    )
    .await;
    assert!(
        r.header("location").starts_with("/teams?error="),
        "{}",
        r.header("location")
    );
    let r = post_form(&app, &accept, &b_access, FORM, &format!("csrf={b_csrf}")).await;
    assert!(
        r.header("location").starts_with("/teams?error="),
        "no code: {}",
        r.header("location")
    );
    assert!(team_ids(&app, &bob).await.is_empty());
    let r = post_form(
        &app,
        &accept,
        &b_access,
        FORM,
        &format!("csrf={b_csrf}&code={bob_code}"),
    )
    .await;
    let to = r.header("location");
    assert!(
        to.starts_with("/teams?notice=Invitation%20accepted")
            && to.ends_with(&format!("#team-{team}")),
        "{to}"
    );
    assert_eq!(team_ids(&app, &bob).await, vec![team]);
    Ok(())
}

/// Before the fix, an invitation to an email nobody had registered yet went to whoever
/// registered it first: the studio sends no mail, so nothing proves an account's email. A
/// squatter who registers the invited email sees the invitation but can neither accept nor
/// decline it without the code of the owner's link (no code, a wrong one, the code of their
/// own invitation elsewhere, an old invitation made before codes); the invitation stays open
/// for the person the owner sent the link to.
#[sqlx::test(migrator = "spade_db::MIGRATOR")]
async fn whoever_registers_an_invited_email_first_cannot_take_the_invitation(
    pool: PgPool,
) -> TestResult {
    let app = TestApp::new(pool.clone());
    let owner = app.user("owner@x.org").await;
    let (team, _, run) = app.team_project_run(&owner, "lab").await;
    let sent = inv(&invite(&app, &owner, team, "newcomer@x.org", "owner").await);
    assert!(sent.code.starts_with("spi_"), "{sent:?}");
    // The squatter registers the invited email and has a real invitation of their own.
    let squatter = app.user("newcomer@x.org").await;
    let other_owner = app.user("other@x.org").await;
    let (other_team, _, _) = app.team_project_run(&other_owner, "elsewhere").await;
    let own = inv(&invite(&app, &other_owner, other_team, "newcomer@x.org", "viewer").await);
    let listed = app.get("/api/v1/invitations", &squatter).await.json();
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "{listed}");

    let r = app
        .post(
            &format!("/api/v1/invitations/{}/accept", sent.id),
            &squatter,
            json!({}),
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "no code: {}",
        r.text()
    );
    assert!(r.message().contains("code"), "{}", r.message());
    let guesses = [
        String::new(),
        "spi_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".to_owned(),
        own.code.clone(),
    ];
    for code in &guesses {
        for what in ["accept", "decline"] {
            let guess = Inv {
                id: sent.id,
                code: code.clone(),
            };
            let r = answer(&app, &squatter, &guess, what).await;
            assert_eq!(
                r.status,
                StatusCode::FORBIDDEN,
                "{what} {code:?}: {}",
                r.text()
            );
            assert_eq!(r.code(), "wrong_invitation_code");
        }
    }
    assert!(team_ids(&app, &squatter).await.is_empty());
    assert_eq!(
        app.get(&format!("/api/v1/runs/{run}"), &squatter)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let open = app
        .get(&format!("/api/v1/teams/{team}/invitations"), &owner)
        .await
        .json();
    assert_eq!(open[0]["id"], sent.id, "still open: {open}");
    assert!(
        open[0].get("code").is_none(),
        "the code is told once: {open}"
    );

    // An invitation from before codes (none stored) cannot be answered at all.
    sqlx::query("UPDATE team_invitations SET code_hash = NULL WHERE id = $1")
        .bind(own.id)
        .execute(&pool)
        .await?;
    let r = accept(&app, &squatter, &own).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text());
    // Inviting again issues a new code; the old one no longer answers.
    let renewed = inv(&invite(&app, &owner, team, "newcomer@x.org", "owner").await);
    assert_eq!(renewed.id, sent.id);
    assert_ne!(renewed.code, sent.code);
    assert_eq!(
        accept(&app, &squatter, &sent).await.status,
        StatusCode::FORBIDDEN
    );
    // With the link's code, the invited account joins.
    assert_eq!(
        accept(&app, &squatter, &renewed).await.status,
        StatusCode::OK
    );
    assert_eq!(team_ids(&app, &squatter).await, vec![team]);
    Ok(())
}
