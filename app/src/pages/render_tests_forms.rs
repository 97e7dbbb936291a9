//! Server-rendered HTML of the pages that change things (launch form, teams, sharing) and of
//! the read-only shared page: labels, messages beside fields, and who gets which form.

use super::launch::{LaunchView, field_id};
use super::render_tests::{detail, metric, render};
use super::share::{ShareSection, SharedRunView};
use super::teams::TeamsView;
use crate::charts::ChartSettings;
use crate::data::TeamsData;
use crate::dto::*;
use leptos::prelude::*;

fn field(path: &str, kind: FieldKind, value: &str, errors: &[&str]) -> ConfigField {
    ConfigField {
        path: path.into(),
        label: path.into(),
        help: format!("help of {path}"),
        kind,
        value: value.into(),
        default: "0.4".into(),
        errors: errors.iter().map(|e| (*e).to_owned()).collect(),
    }
}

fn form() -> LaunchForm {
    LaunchForm {
        projects: vec![ProjectOption {
            id: 3,
            team: "lab".into(),
            name: "games".into(),
        }],
        project: Some(3),
        presets: vec![PresetDto {
            key: "tiny_cpu_demo".into(),
            label: "Tiny CPU demo".into(),
            description: "Minutes on a CPU.".into(),
        }],
        preset: "tiny_cpu_demo".into(),
        name: "tiny".into(),
        executors: vec!["local".into(), "ray".into()],
        executor: "local".into(),
        sections: vec![
            ConfigSection {
                key: "designer".into(),
                title: "Designer".into(),
                fields: vec![
                    field(
                        "designer.plateau.low",
                        FieldKind::Number,
                        "0.9",
                        &["`designer.plateau.low` = 0.9 must not exceed `designer.plateau.high`"],
                    ),
                    field("designer.self_judge", FieldKind::Bool, "true", &[]),
                    field(
                        "curriculum.kinds",
                        FieldKind::Multi(vec!["game".into(), "tool_use".into()]),
                        "game",
                        &[],
                    ),
                    field("model.path", FieldKind::Text { optional: true }, "", &[]),
                ],
            },
            ConfigSection {
                key: "grpo".into(),
                title: "GRPO".into(),
                fields: vec![field("grpo.lr", FieldKind::Number, "1e-6", &[])],
            },
        ],
        toml: "[run]\nsteps = 6\n".into(),
        field_errors: vec![("name".into(), "give the run a name".into())],
        errors: Vec::new(),
        toml_submitted: false,
    }
}

#[test]
fn launch_form_puts_each_message_beside_its_labelled_field() {
    let html = render(|| view! { <LaunchView form=form() csrf="t0k".into() /> }.into_any());
    let id = field_id("designer.plateau.low");
    assert_eq!(id, "cfg-designer-plateau-low");
    assert!(html.contains(&format!(r#"<label for="{id}">"#)), "{html}");
    assert!(html.contains(r#"name="designer.plateau.low""#));
    assert!(html.contains(r#"value="0.9""#), "what was typed stays");
    assert!(html.contains(&format!(r#"aria-describedby="{id}-help {id}-err""#)));
    let err_at = html.find(&format!(r#"id="{id}-err""#)).unwrap_or(0);
    let next_field = html.find(r#"id="cfg-designer-self-judge""#).unwrap_or(0);
    assert!(
        err_at > 0 && err_at < next_field,
        "the message follows its own field"
    );
    assert!(html.contains("must not exceed"));
    assert!(
        html.contains(r##"href="#cfg-designer-plateau-low""##),
        "summary links"
    );
    assert!(
        html.contains(r#"id="launch-name-err""#),
        "the name's message"
    );
    assert!(html.contains(r#"type="checkbox" value="true" checked"#));
    assert!(html.contains(r#"id="cfg-curriculum-kinds-game""#));
    assert!(html.contains(r#"<label for="cfg-curriculum-kinds-tool_use">"#));
    assert!(html.contains(r#"placeholder="not set""#));
    assert!(html.contains(r#"<input type="hidden" name="csrf" value="t0k">"#));
    assert!(
        html.contains(r#"<form method="get" action="/runs/new""#),
        "presets without JS"
    );
    assert!(html.contains(r#"<option value="3" selected"#));
    assert!(html.contains("[run]\nsteps = 6"), "the TOML alternative");
    // Sections fold: one with a problem is open, the others closed (issue 43: the form was
    // 8,100 px tall), their fields still in the form.
    assert!(
        html.contains(r#"<details id="section-designer" open"#),
        "a section with a problem opens: {html}"
    );
    assert!(
        html.contains(r#"<details id="section-grpo" class="card config-section">"#),
        "{html}"
    );
    assert!(html.contains(r#"name="grpo.lr""#));
    assert!(html.contains("1 setting"));
}

#[test]
fn teams_page_gives_owner_controls_to_owners_only() {
    let member = |id: i64, role: &str| MemberDto {
        user_id: id,
        email: format!("u{id}@example.org"),
        display_name: format!("User {id}"),
        role: role.into(),
    };
    let team = |id: i64, role: &str| TeamDetail {
        team: TeamDto {
            id,
            name: format!("team {id}"),
            role: role.into(),
        },
        members: vec![member(1, role), member(2, "viewer")],
        projects: vec![ProjectDto {
            id: 9,
            name: "games".into(),
        }],
        invitations: vec![],
        new_invitation: None,
        tokens: Vec::new(),
        new_token: None,
    };
    let data = TeamsData {
        viewer_id: 1,
        teams: vec![team(10, "owner"), team(11, "viewer")],
        invitations: vec![],
    };
    let html = render(move || {
        view! { <TeamsView data csrf="t0k".into() error=Some("only an owner can do this".into()) notice=None /> }.into_any()
    });
    assert!(html.contains(r#"action="/teams/10/members""#), "{html}");
    assert!(html.contains(r#"action="/teams/10/members/2/remove""#));
    assert!(
        !html.contains(r#"action="/teams/10/members/1/remove""#),
        "no removing yourself from the row"
    );
    assert!(
        !html.contains("/teams/11/members"),
        "a viewer manages nobody"
    );
    assert!(!html.contains("/teams/11/projects"));
    assert!(html.contains(r#"action="/teams/10/projects""#));
    assert!(html.contains(r#"<label for="invite-email-10">"#));
    assert!(html.contains(r#"<label for="role-10-2" class="visually-hidden">"#));
    assert!(
        html.contains("Only an owner can do this"),
        "error as a sentence"
    );
    assert!(html.contains(r#"action="/teams""#));
}

#[test]
fn teams_page_shows_a_new_token_once_and_lets_viewers_make_none() {
    let token = |id: i64, user: i64, revoked: bool| ApiTokenRecord {
        id,
        team_id: 10,
        user_id: user,
        user_email: format!("u{user}@example.org"),
        name: format!("script {id}"),
        role: "viewer".into(),
        created_at: "2026-12-05T10:00:00Z".into(),
        expires_at: None,
        last_used_at: None,
        revoked_at: revoked.then(|| "2026-12-05T11:00:00Z".into()),
        expired: false,
    };
    let team = |id: i64, role: &str, tokens: Vec<ApiTokenRecord>| TeamDetail {
        team: TeamDto {
            id,
            name: format!("team {id}"),
            role: role.into(),
        },
        members: vec![],
        projects: vec![],
        invitations: vec![],
        new_invitation: None,
        new_token: (id == 10).then(|| CreatedApiToken {
            record: token(7, 1, false),
            token: "spt_secret-shown-once".into(),
        }),
        tokens,
    };
    let data = TeamsData {
        viewer_id: 1,
        teams: vec![
            team(10, "owner", vec![token(7, 1, false), token(6, 2, true)]),
            team(11, "viewer", vec![]),
            team(12, "editor", vec![]),
        ],
        invitations: vec![],
    };
    let html = render(move || {
        view! { <TeamsView data csrf="t0k".into() error=None notice=None /> }.into_any()
    });
    assert_eq!(html.matches("spt_secret-shown-once").count(), 1, "{html}");
    assert!(html.contains(r#"action="/teams/10/tokens/7/revoke""#));
    assert!(
        !html.contains("/teams/10/tokens/6/revoke"),
        "a revoked token has nothing to revoke"
    );
    assert!(
        html.contains("u2@example.org"),
        "owners see whose token it is"
    );
    assert!(html.contains("revoked 2026-12-05"));
    assert!(html.contains(r#"action="/teams/10/tokens""#));
    assert!(
        html.contains(r#"action="/teams/12/tokens""#),
        "editors make tokens"
    );
    assert!(!html.contains("/teams/11/tokens"), "viewers make none");
    assert!(!html.contains(r#"<option value="owner">read"#));
    assert!(html.contains(r#"<label for="token-name-10">"#));
}

#[test]
fn teams_page_invites_instead_of_adding_and_offers_answers_to_invitations() {
    let team = |id: i64, role: &str, invitations| TeamDetail {
        team: TeamDto {
            id,
            name: format!("team {id}"),
            role: role.into(),
        },
        members: vec![],
        projects: vec![],
        invitations,
        new_invitation: (id == 10).then(|| NewInvitation {
            id: 31,
            email: "new@example.org".into(),
            link: "http://studio.example/teams?invitation=31&code=spi_x".into(),
        }),
        tokens: Vec::new(),
        new_token: None,
    };
    let open = InvitationRecord {
        id: 31,
        team_id: 10,
        email: "new@example.org".into(),
        role: "editor".into(),
        created_at: "2026-12-03T10:00:00Z".into(),
        expires_at: "2026-12-17T10:00:00Z".into(),
        code: None,
    };
    let data = TeamsData {
        viewer_id: 1,
        teams: vec![team(10, "owner", vec![open]), team(11, "viewer", vec![])],
        invitations: vec![IncomingInvitation {
            id: 44,
            team_id: 12,
            team_name: "Bravo <b>".into(),
            role: "viewer".into(),
            invited_by: Some("Bob".into()),
            created_at: "2026-12-03T10:00:00Z".into(),
            expires_at: "2026-12-17T10:00:00Z".into(),
        }],
    };
    let html = render(move || {
        view! { <TeamsView data csrf="t0k".into() error=None notice=None link=Some((44, "spi_from_link".into())) /> }.into_any()
    });
    assert!(html.contains(r#"action="/teams/10/invitations""#), "{html}");
    assert!(
        html.contains(r#"value="http://studio.example/teams?invitation=31&amp;code=spi_x""#),
        "the new invitation's link, once"
    );
    assert!(html.contains(r#"name="code""#) && html.contains(r#"value="spi_from_link""#));
    assert!(html.contains(">Invite</button>"));
    assert!(!html.contains("Add member"));
    assert!(
        !html.contains("/teams/11/invitations"),
        "a viewer invites nobody"
    );
    assert!(html.contains(r#"action="/teams/10/invitations/31/revoke""#));
    assert!(html.contains("new@example.org as editor"));
    assert!(html.contains(r#"action="/invitations/44/accept""#));
    assert!(html.contains(r#"formaction="/invitations/44/decline""#));
    assert!(
        html.contains("Bravo &lt;b&gt; as viewer, invited by Bob"),
        "escaped"
    );
}

#[test]
fn share_section_shows_a_new_link_once_and_revoke_for_live_links() {
    let shares = SharesDto {
        origin: "http://studio.example".into(),
        links: vec![
            ShareDto {
                id: 6,
                created_at: "2026-11-30T03:02:03Z".into(),
                revoked_at: None,
                label: "for the reviewers".into(),
                expires_at: Some("2026-12-07T03:02:03Z".into()),
                expired: false,
            },
            ShareDto {
                id: 5,
                created_at: "2026-11-30T01:02:03Z".into(),
                revoked_at: None,
                label: String::new(),
                expires_at: Some("2026-11-30T02:02:03Z".into()),
                expired: true,
            },
            ShareDto {
                id: 4,
                created_at: "2026-11-29T01:02:03Z".into(),
                revoked_at: Some("2026-11-29T02:00:00Z".into()),
                label: String::new(),
                expires_at: None,
                expired: false,
            },
        ],
        new_token: Some("sps_abc".into()),
    };
    let html =
        render(move || view! { <ShareSection run_id=7 shares csrf="t0k".into() /> }.into_any());
    assert!(
        html.contains(r#"value="http://studio.example/share/sps_abc""#),
        "{html}"
    );
    assert!(html.contains(r#"id="share-copy""#), "a copy button");
    assert!(html.contains(r#"action="/runs/7/shares/6/revoke""#));
    assert!(
        html.contains(r#"aria-label="Revoke the link &quot;for the reviewers&quot;""#)
            || html.contains("Revoke the link \"for the reviewers\""),
        "{html}"
    );
    assert!(html.contains("expires 2026-12-07"), "{html}");
    assert!(
        !html.contains("/runs/7/shares/5/revoke"),
        "an expired link has nothing to revoke"
    );
    assert!(html.contains("expired 2026-11-30"));
    assert!(
        !html.contains("/runs/7/shares/4/revoke"),
        "revoked stays revoked"
    );
    assert!(html.contains(r#"action="/runs/7/shares""#));
    assert!(html.contains(r#"name="label""#) && html.contains(r#"name="expires_in_days""#));
}

#[test]
fn shared_page_has_no_forms_that_change_anything() {
    let env = EnvironmentSummary {
        env_id: "e-1".into(),
        run_id: 7,
        step: 3,
        skill: "Optimization".into(),
        kind: EnvKind::Game,
        status: EnvStatus::Rejected,
        rejection_reason: Some("not_solvable".into()),
        regret: Some(0.2),
        win_rate_hint: Some(0.5),
        win_rate_no_hint: None,
        verdicts: vec![],
        title: String::new(),
        code_skill: String::new(),
    };
    let html = render(move || {
        let settings = ChartSettings::from_query(None, None, None);
        view! {
            <SharedRunView token="sps_abc".into() run=detail(7, RunStatus::Running, true, 1) metrics=vec![metric("regret_mean")] environments=vec![env] settings />
        }
        .into_any()
    });
    assert!(!html.contains(r#"method="post""#), "{html}");
    assert!(
        !html.contains("/environments"),
        "no links into members' pages"
    );
    assert!(html.contains("rejected: not_solvable"));
    assert!(
        html.contains(r#"href="/api/v1/shared/sps_abc/pool.zip""#),
        "the pool through the link: {html}"
    );
    assert_eq!(html.matches("<svg").count(), 1);
    assert!(!html.contains("step 30"), "no log");
}
