-- Team invitations (issue 36, item 8): an owner no longer adds a registered user to a team; they
-- invite an email, and only the account holding that email can accept (or decline). Nobody
-- becomes a member without accepting, and inviting answers the same whether or not the email
-- has an account (the invitation is stored by email, no user is looked up).
--
-- Team names: globally unique names let anyone learn every team's name by trying to create it
-- ("team with this name already exists"). The uniqueness only ever served to keep one person
-- from making two teams they could not tell apart, so it becomes unique per creator: the only
-- names a conflict can reveal are the caller's own.

ALTER TABLE teams ADD COLUMN created_by BIGINT REFERENCES users (id) ON DELETE SET NULL;

-- Existing teams: the creator is taken to be the earliest owner still in the team (memberships
-- keep no time; the lowest user id is the oldest account).
UPDATE teams t SET created_by = (
    SELECT min(m.user_id) FROM memberships m WHERE m.team_id = t.id AND m.role = 'owner'
);

ALTER TABLE teams DROP CONSTRAINT teams_name_key;
CREATE UNIQUE INDEX teams_creator_name ON teams (created_by, name);

CREATE TYPE invitation_status AS ENUM ('pending', 'accepted', 'declined', 'revoked');

CREATE TABLE team_invitations (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    team_id     BIGINT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    -- Stored lower-cased; matched against lower(users.email).
    email       TEXT NOT NULL CHECK (length(email) BETWEEN 3 AND 320 AND email = lower(email)),
    role        team_role NOT NULL,
    invited_by  BIGINT REFERENCES users (id) ON DELETE SET NULL,
    status      invitation_status NOT NULL DEFAULT 'pending',
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at  TIMESTAMPTZ NOT NULL DEFAULT now() + interval '14 days',
    -- When it was accepted, declined or revoked, and by whom.
    decided_at  TIMESTAMPTZ,
    decided_by  BIGINT REFERENCES users (id) ON DELETE SET NULL,
    CHECK ((status = 'pending') = (decided_at IS NULL))
);

-- One open invitation per team and email: inviting again changes its role.
CREATE UNIQUE INDEX team_invitations_one_pending
    ON team_invitations (team_id, email) WHERE status = 'pending';
-- "My invitations": looked up by the signed-in user's email.
CREATE INDEX team_invitations_email ON team_invitations (email) WHERE status = 'pending';
