-- Refresh tokens a session has rotated away. Presenting one again means the token was copied
-- (a stolen token used by the thief or by its owner after the thief): the whole session is
-- revoked, as OAuth 2.0 Security BCP section 4.14.2 recommends for refresh token rotation.
CREATE TABLE retired_refresh_tokens (
    refresh_token_hash BYTEA PRIMARY KEY,
    session_id         BIGINT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    retired_at         TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX retired_refresh_tokens_session ON retired_refresh_tokens (session_id);
