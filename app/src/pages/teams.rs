//! The teams page (`/teams`): the viewer's teams with their members, roles and projects, and
//! the invitations waiting for the viewer's answer. Owners invite people by email (they join
//! only by accepting), revoke open invitations, change roles and remove members; editors add
//! projects; editors and owners make API tokens for their scripts (owners see and revoke every
//! member's); anyone creates a team. Every change is a POST form the backend routes to the
//! service function the API uses, so roles and the last-owner rule are the API's.

use super::auth::sentence as pages_sentence;
use crate::data::TeamsData;
use crate::dto::{
    ApiTokenRecord, CreatedApiToken, IncomingInvitation, InvitationRecord, MemberDto, ROLES,
    TeamDetail,
};
use leptos::prelude::*;

/// The teams page.
#[component]
pub fn TeamsView(
    data: TeamsData,
    /// The viewer's CSRF token, carried by every form.
    csrf: String,
    /// The message of a refused change.
    error: Option<String>,
    /// What the last change did.
    notice: Option<String>,
    /// The invitation id and code of the link the viewer opened (`?invitation=&code=`): that
    /// invitation's form comes filled in.
    #[prop(default = None)]
    link: Option<(i64, String)>,
) -> impl IntoView {
    let viewer_id = data.viewer_id;
    let empty = data.teams.is_empty();
    let incoming = (!data.invitations.is_empty()).then(|| {
        let rows = data
            .invitations
            .into_iter()
            .map(|i| {
                let code = link
                    .as_ref()
                    .filter(|(id, _)| *id == i.id)
                    .map(|(_, c)| c.clone());
                incoming_row(i, csrf.clone(), code)
            })
            .collect_view();
        view! {
            <section class="card" id="invitations" aria-labelledby="invitations-h">
                <h2 id="invitations-h">"Invitations to you"</h2>
                <ul class="invitation-list">{rows}</ul>
            </section>
        }
    });
    let teams = data
        .teams
        .into_iter()
        .map(|t| team_view(t, viewer_id, csrf.clone()))
        .collect_view();
    view! {
        <div class="page-head"><h1>"Teams"</h1></div>
        {error.map(|e| view! { <p class="form-error" role="alert" id="teams-error">{pages_sentence(e)}</p> })}
        {notice.map(|n| view! { <p class="notice ok" role="status" id="teams-notice">{n}</p> })}
        {incoming}
        {empty.then(|| view! { <p class="empty">"You are not in a team yet. Create one, or ask a team owner to invite you."</p> })}
        {teams}
        <form method="post" action="/teams" class="card filters" aria-label="Create a team">
            <input type="hidden" name="csrf" value=csrf.clone() />
            <div class="field">
                <label for="team-new-name">"New team"</label>
                <input id="team-new-name" name="name" type="text" maxlength="100" required placeholder="Team name" />
            </div>
            <button type="submit" id="team-create">"Create team"</button>
            <p class="help">"You become its owner."</p>
        </form>
    }
}

fn team_view(t: TeamDetail, viewer_id: i64, csrf: String) -> impl IntoView {
    let id = t.team.id;
    let is_owner = t.team.role == "owner";
    let can_edit = is_owner || t.team.role == "editor";
    let members = t
        .members
        .into_iter()
        .map(|m| member_row(id, m, is_owner, viewer_id, csrf.clone()))
        .collect_view();
    let projects = if t.projects.is_empty() {
        view! { <p class="empty">"No projects yet."</p> }.into_any()
    } else {
        view! {
            <ul class="project-list">
                {t.projects.into_iter().map(|p| view! {
                    <li>
                        <span class="project-name">{p.name.clone()}</span>
                        <a href=format!("/runs?team={id}")>"Runs"</a>
                        {can_edit.then(|| view! { <a href=format!("/runs/new?project={}", p.id)>"New run"</a> })}
                    </li>
                }).collect_view()}
            </ul>
        }
        .into_any()
    };
    let invite = is_owner.then(|| {
        let csrf = csrf.clone();
        view! {
            <form method="post" action=format!("/teams/{id}/invitations") class="filters inline-form" id=format!("invite-{id}") aria-label="Invite a member">
                <input type="hidden" name="csrf" value=csrf />
                <div class="field">
                    <label for=format!("invite-email-{id}")>"Email"</label>
                    <input id=format!("invite-email-{id}") name="email" type="email" required placeholder="name@example.org" />
                </div>
                <div class="field">
                    <label for=format!("invite-role-{id}")>"Role"</label>
                    <select id=format!("invite-role-{id}") name="role">{role_options("viewer")}</select>
                </div>
                <button type="submit" class="secondary">"Invite"</button>
                <p class="help">"You get a link to send them: they join once they open it and accept, signed in with this email (they can register at /register)."</p>
            </form>
        }
    });
    // Shown once: only the code's hash is stored.
    let new_link = t.new_invitation.map(|n| {
        view! {
            <div class="notice ok" role="status" id=format!("invitation-link-{id}")>
                <p>{format!("Send this link to {}; it is shown only now, and accepting needs it:", n.email)}</p>
                <input type="text" readonly class="share-url" value=n.link aria-label=format!("Invitation link for {}", n.email) />
            </div>
        }
    });
    let pending = (is_owner && !t.invitations.is_empty()).then(|| {
        let rows = t
            .invitations
            .into_iter()
            .map(|i| pending_row(id, i, csrf.clone()))
            .collect_view();
        view! {
            <h4>"Open invitations"</h4>
            <ul class="invitation-list" id=format!("invitations-{id}")>{rows}</ul>
        }
    });
    let new_project = can_edit.then(|| {
        view! {
            <form method="post" action=format!("/teams/{id}/projects") class="filters inline-form" aria-label="Create a project">
                <input type="hidden" name="csrf" value=csrf.clone() />
                <div class="field">
                    <label for=format!("project-name-{id}")>"New project"</label>
                    <input id=format!("project-name-{id}") name="name" type="text" maxlength="100" required placeholder="Project name" />
                </div>
                <button type="submit" class="secondary">"Create project"</button>
            </form>
        }
    });
    let tokens = tokens_view(
        id,
        is_owner,
        can_edit,
        &t.team.role,
        t.tokens,
        t.new_token,
        &csrf,
    );
    view! {
        <section class="card team" id=format!("team-{id}") aria-labelledby=format!("team-{id}-h")>
            <div class="page-head">
                <h2 id=format!("team-{id}-h")>{t.team.name.clone()}</h2>
                <span class="badge role">{format!("you: {}", t.team.role)}</span>
            </div>
            <div class="team-grid">
                <div>
                    <h3>"Members"</h3>
                    <div class="table-scroll" tabindex="0" role="region" aria-label=format!("Members of {}", t.team.name)>
                        <table class="data members">
                            <thead><tr>
                                <th scope="col">"Name"</th><th scope="col">"Email"</th><th scope="col">"Role"</th>
                                {is_owner.then(|| view! { <th scope="col"><span class="visually-hidden">"Remove"</span></th> })}
                            </tr></thead>
                            <tbody>{members}</tbody>
                        </table>
                    </div>
                    {new_link}
                    {pending}
                    {invite}
                </div>
                <div>
                    <h3>"Projects"</h3>
                    {projects}
                    {new_project}
                </div>
            </div>
            {tokens}
        </section>
    }
}

/// The team's API tokens (an owner sees every member's, others their own), the one made just
/// now with its token (shown once), a Revoke form on each live one, and the form that makes one
/// (editors and owners, up to their own role).
fn tokens_view(
    team: i64,
    is_owner: bool,
    can_edit: bool,
    my_role: &str,
    tokens: Vec<ApiTokenRecord>,
    new_token: Option<CreatedApiToken>,
    csrf: &str,
) -> impl IntoView + use<> {
    if tokens.is_empty() && !can_edit {
        return None;
    }
    let fresh = new_token.map(|n| {
        view! {
            <div class="notice ok" role="status" id=format!("token-new-{team}")>
                <p>{format!("Your new token \"{}\" ({}). Copy it now: it is shown only here, and only its hash is kept.", n.record.name, n.record.role)}</p>
                <input type="text" readonly class="share-url" value=n.token aria-label=format!("API token {}", n.record.name) />
                <p class="help">"Send it as " <code>"Authorization: Bearer <token>"</code> " to /api/v1 (see " <a href="/api/v1/openapi.json">"the API"</a> ")."</p>
            </div>
        }
    });
    let rows = tokens
        .into_iter()
        .map(|t| token_row(team, is_owner, t, csrf.to_owned()))
        .collect_view();
    let roles: &[&str] = if my_role == "viewer" {
        &[]
    } else {
        &["viewer", "editor"]
    };
    let form = can_edit.then(|| {
        view! {
            <form method="post" action=format!("/teams/{team}/tokens") class="filters inline-form" id=format!("token-form-{team}") aria-label="Make an API token">
                <input type="hidden" name="csrf" value=csrf.to_owned() />
                <div class="field">
                    <label for=format!("token-name-{team}")>"Token name"</label>
                    <input id=format!("token-name-{team}") name="name" type="text" maxlength="100" required placeholder="nightly eval script" />
                </div>
                <div class="field">
                    <label for=format!("token-role-{team}")>"Can"</label>
                    <select id=format!("token-role-{team}") name="role">
                        {roles.iter().map(|r| view! { <option value=*r>{if *r == "viewer" { "read (viewer)" } else { "read and change runs (editor)" }}</option> }).collect_view()}
                    </select>
                </div>
                <div class="field">
                    <label for=format!("token-days-{team}")>"Expires after (days)"</label>
                    <input id=format!("token-days-{team}") name="expires_in_days" type="number" min="1" max="365" placeholder="never" />
                </div>
                <button type="submit" class="secondary">"Make token"</button>
                <p class="help">"A token acts as you, in this team only, and never does more than your role allows. Revoke it here when a script no longer needs it."</p>
            </form>
        }
    });
    Some(view! {
        <div class="tokens" id=format!("tokens-{team}")>
            <h3>"API tokens"</h3>
            {fresh}
            <div class="table-scroll" tabindex="0" role="region" aria-label="API tokens">
                <table class="data tokens">
                    <thead><tr>
                        <th scope="col">"Name"</th>
                        {is_owner.then(|| view! { <th scope="col">"Member"</th> })}
                        <th scope="col">"Can"</th>
                        <th scope="col">"Made"</th>
                        <th scope="col">"Last used"</th>
                        <th scope="col">"State"</th>
                        <th scope="col"><span class="visually-hidden">"Revoke"</span></th>
                    </tr></thead>
                    <tbody>{rows}</tbody>
                </table>
            </div>
            {form}
        </div>
    })
}

fn token_row(team: i64, is_owner: bool, t: ApiTokenRecord, csrf: String) -> impl IntoView {
    let day = |s: &str| s.get(..10).unwrap_or(s).to_owned();
    let state = match (&t.revoked_at, &t.expires_at) {
        (Some(r), _) => format!("revoked {}", day(r)),
        (None, Some(e)) if t.expired => format!("expired {}", day(e)),
        (None, Some(e)) => format!("live until {}", day(e)),
        (None, None) => "live".to_owned(),
    };
    let live = t.revoked_at.is_none() && !t.expired;
    let id = t.id;
    view! {
        <tr id=format!("token-{id}") class:revoked=!live>
            <td>{t.name.clone()}</td>
            {is_owner.then(|| view! { <td>{t.user_email.clone()}</td> })}
            <td>{t.role.clone()}</td>
            <td>{day(&t.created_at)}</td>
            <td>{t.last_used_at.as_deref().map(day).unwrap_or_else(|| "never".to_owned())}</td>
            <td>{state}</td>
            <td>
                {live.then(|| view! {
                    <form method="post" action=format!("/teams/{team}/tokens/{id}/revoke")>
                        <input type="hidden" name="csrf" value=csrf.clone() />
                        <button type="submit" class="danger" aria-label=format!("Revoke the token {}", t.name)>"Revoke"</button>
                    </form>
                })}
            </td>
        </tr>
    }
}

fn role_options(selected: &str) -> impl IntoView + use<> {
    let selected = selected.to_owned();
    ROLES
        .into_iter()
        .map(|r| view! { <option value=r selected=r == selected>{r}</option> })
        .collect_view()
}

fn member_row(
    team: i64,
    m: MemberDto,
    is_owner: bool,
    viewer_id: i64,
    csrf: String,
) -> impl IntoView {
    let uid = m.user_id;
    let role_cell = if is_owner {
        let sel = format!("role-{team}-{uid}");
        view! {
            <form method="post" action=format!("/teams/{team}/members") class="role-form">
                <input type="hidden" name="csrf" value=csrf.clone() />
                <input type="hidden" name="email" value=m.email.clone() />
                <label for=sel.clone() class="visually-hidden">{format!("Role of {}", m.display_name)}</label>
                <select id=sel name="role">{role_options(&m.role)}</select>
                <button type="submit" class="secondary" aria-label=format!("Change the role of {}", m.display_name)>"Change"</button>
            </form>
        }
        .into_any()
    } else {
        view! { <span class="badge role">{m.role.clone()}</span> }.into_any()
    };
    let remove = is_owner.then(|| {
        let me = uid == viewer_id;
        view! {
            <td>
                {(!me).then(|| view! {
                    <form method="post" action=format!("/teams/{team}/members/{uid}/remove")>
                        <input type="hidden" name="csrf" value=csrf.clone() />
                        <button type="submit" class="danger" aria-label=format!("Remove {}", m.display_name)>"Remove"</button>
                    </form>
                })}
            </td>
        }
    });
    view! {
        <tr>
            <td>{m.display_name.clone()}{(uid == viewer_id).then(|| view! { <span class="sub">"you"</span> })}</td>
            <td>{m.email.clone()}</td>
            <td>{role_cell}</td>
            {remove}
        </tr>
    }
}

/// An invitation to the viewer: one form with the code of its link (filled in when the viewer
/// opened that link) and Accept and Decline buttons.
fn incoming_row(i: IncomingInvitation, csrf: String, code: Option<String>) -> impl IntoView {
    let by = i
        .invited_by
        .map(|n| format!(", invited by {n}"))
        .unwrap_or_default();
    let code_id = format!("invitation-code-{}", i.id);
    view! {
        <li id=format!("invitation-{}", i.id)>
            <span>{format!("{} as {}{by}", i.team_name, i.role)}</span>
            <form method="post" action=format!("/invitations/{}/accept", i.id) class="inline-form">
                <input type="hidden" name="csrf" value=csrf />
                <label for=code_id.clone() class="sub">"Code from the invitation link"</label>
                <input id=code_id name="code" type="text" required autocomplete="off" spellcheck="false" value=code.unwrap_or_default() placeholder="spi_..." />
                <button type="submit" aria-label=format!("Accept the invitation to {}", i.team_name)>"Accept"</button>
                <button type="submit" class="secondary" formaction=format!("/invitations/{}/decline", i.id) aria-label=format!("Decline the invitation to {}", i.team_name)>"Decline"</button>
            </form>
        </li>
    }
}

/// An open invitation of a team the viewer owns, with a Revoke form.
fn pending_row(team: i64, i: InvitationRecord, csrf: String) -> impl IntoView {
    view! {
        <li>
            <span>{format!("{} as {}", i.email, i.role)}</span>
            <form method="post" action=format!("/teams/{team}/invitations/{}/revoke", i.id) class="inline-form">
                <input type="hidden" name="csrf" value=csrf />
                <button type="submit" class="danger" aria-label=format!("Revoke the invitation to {}", i.email)>"Revoke"</button>
            </form>
        </li>
    }
}
