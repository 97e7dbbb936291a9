-- API tokens for scripts (issue 43). A token belongs to one member of one team and acts as
-- that member inside that team only, with at most its own role (never owner) and never more
-- than the member's role at the time of each request. Only the SHA-256 of the token is stored;
-- the token is shown once. Revoking sets revoked_at; every request reads it, so a revoked token
-- is refused at once.
CREATE TABLE api_tokens (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    team_id      BIGINT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    user_id      BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    role         team_role NOT NULL CHECK (role <> 'owner'),
    token_hash   BYTEA NOT NULL UNIQUE,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at   TIMESTAMPTZ,
    last_used_at TIMESTAMPTZ,
    revoked_at   TIMESTAMPTZ
);
CREATE INDEX api_tokens_team ON api_tokens (team_id, id DESC);
