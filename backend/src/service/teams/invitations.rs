//! Team invitations, the only way into a team: an owner invites an email, the account with that
//! email accepts or declines, an owner lists or revokes the open ones. Every change takes the
//! signed-in user, checks what it needs (owner for inviting and revoking; being the invited
//! account for answering) and writes the audit entry.
//!
//! Inviting answers the same for every well-formed email: no account is looked up, so an owner
//! (or anyone who makes themselves one by creating a team) cannot learn which emails are
//! registered. An email that is already a member's is answered 409: owners see their members'
//! emails anyway.

use super::{logged, role_name, team_scope, time};
use crate::service::{Caller, Ctx};
use crate::service::{ServiceError, ServiceResult};
use spade_app::dto;
use spade_db::Role;
use spade_db::teams::invitations::{self as db, Answer, Incoming, Invitation, Invited, Outcome};

fn record(i: Invitation) -> dto::InvitationRecord {
    dto::InvitationRecord {
        id: i.id,
        team_id: i.team_id,
        email: i.email,
        role: role_name(i.role).to_owned(),
        created_at: time(&i.created_at),
        expires_at: time(&i.expires_at),
        code: None,
    }
}

fn incoming(i: Incoming) -> dto::IncomingInvitation {
    dto::IncomingInvitation {
        id: i.id,
        team_id: i.team_id,
        team_name: i.team_name,
        role: role_name(i.role).to_owned(),
        invited_by: i.invited_by,
        created_at: time(&i.created_at),
        expires_at: time(&i.expires_at),
    }
}

/// Invites `email` into team `team_id` with `role` (owners). The answer is the invitation with
/// its code (the only time the code is told), the same whether or not the email has an
/// account; inviting it again changes the open invitation's role and code.
pub async fn invite(
    ctx: &Ctx,
    caller: &Caller,
    team_id: i64,
    email: &str,
    role: Role,
) -> ServiceResult<dto::InvitationRecord> {
    let scope = team_scope(ctx, caller, team_id, Role::Owner).await?;
    let email = super::super::normalize_email(email)?;
    let code = crate::tokens::random_token(CODE_PREFIX);
    let hash = crate::tokens::hash_token(&code);
    let inv = match db::invite(&ctx.db, &scope, &email, role, &hash).await? {
        Invited::Pending(inv) => inv,
        Invited::AlreadyMember => {
            return Err(ServiceError::Conflict {
                code: "already_member",
                message: "this email is already a member's; change their role in the members list"
                    .into(),
            });
        }
        Invited::NotOwner => {
            return Err(ServiceError::Forbidden {
                code: "insufficient_role",
                message: "you are no longer an owner of this team".into(),
            });
        }
    };
    let target = format!("invitation:{}", inv.id);
    logged(ctx, caller, team_id, "invitation.create", target).await?;
    Ok(dto::InvitationRecord {
        code: Some(code),
        ..record(inv)
    })
}

/// How invitation codes start (`spi_` and 32 random bytes, base64url).
pub const CODE_PREFIX: &str = "spi_";

/// Whether `c` has the shape of an invitation code, so only such text from a cookie or an
/// address is put on a page.
pub fn looks_like_code(c: &str) -> bool {
    crate::tokens::looks_like_random_token(CODE_PREFIX, c)
}

/// The open invitations of team `team_id` (owners: they name emails that are not members).
pub async fn of_team(
    ctx: &Ctx,
    caller: &Caller,
    team_id: i64,
) -> ServiceResult<Vec<dto::InvitationRecord>> {
    let scope = team_scope(ctx, caller, team_id, Role::Owner).await?;
    Ok(db::pending_of_team(&ctx.db, &scope)
        .await?
        .into_iter()
        .map(record)
        .collect())
}

/// Revokes the open invitation `id` of team `team_id` (owners); 404 once it was answered.
pub async fn revoke(ctx: &Ctx, caller: &Caller, team_id: i64, id: i64) -> ServiceResult<()> {
    let scope = team_scope(ctx, caller, team_id, Role::Owner).await?;
    db::revoke(&ctx.db, &scope, id).await?;
    logged(
        ctx,
        caller,
        team_id,
        "invitation.revoke",
        format!("invitation:{id}"),
    )
    .await
}

/// The signed-in user's open invitations.
pub async fn mine(ctx: &Ctx, caller: &Caller) -> ServiceResult<Vec<dto::IncomingInvitation>> {
    caller.in_person("read its member's invitations")?;
    Ok(db::pending_for_user(&ctx.db, caller.user_id)
        .await?
        .into_iter()
        .map(incoming)
        .collect())
}

/// Accepts (joining the team with the invited role) or declines invitation `id` with its
/// `code`. Only the invited account can: another's invitation is 404, like a missing one; one
/// already answered, revoked or expired is 409 `invalid_state`; a wrong code is 403
/// `wrong_invitation_code` (whoever registers an invited email sees the invitation, but only
/// the person the owner sent the link to has its code). Returns the team's id.
pub async fn answer(
    ctx: &Ctx,
    caller: &Caller,
    id: i64,
    answer: Answer,
    code: &str,
) -> ServiceResult<i64> {
    caller.in_person("answer an invitation")?;
    let hash = crate::tokens::hash_token(code.trim());
    let done = match db::answer(&ctx.db, caller.user_id, id, answer, &hash).await? {
        Outcome::Done(done) => done,
        Outcome::WrongCode => {
            return Err(ServiceError::Forbidden {
                code: "wrong_invitation_code",
                message: "`code` does not match this invitation: open the invitation link the \
                          team's owner sent you (an owner can invite you again for a new one)"
                    .into(),
            });
        }
    };
    let action = match answer {
        Answer::Accept => {
            // Open pages of the new member may now show the team's runs.
            ctx.events.access_changed();
            "invitation.accept"
        }
        Answer::Decline => "invitation.decline",
    };
    logged(
        ctx,
        caller,
        done.team_id,
        action,
        format!("invitation:{id}"),
    )
    .await?;
    Ok(done.team_id)
}
