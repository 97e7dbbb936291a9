-- Every entity of the design (../shared/design.md, "Storage") that the initial migration did not
-- create, plus the columns runs need for workers, progress and revocable credentials.
-- Migrations are never edited once applied; change the schema with a new file.

-- Emails compare case-insensitively; the application stores them lowercased, this index makes
-- sure two spellings of one address can never both exist.
CREATE UNIQUE INDEX users_email_lower ON users (lower(email));

CREATE INDEX memberships_user ON memberships (user_id);

ALTER TABLE runs
    ADD COLUMN run_token_hash BYTEA,
    ADD COLUMN progress_step  BIGINT NOT NULL DEFAULT 0 CHECK (progress_step >= 0),
    ADD COLUMN progress_total BIGINT NOT NULL DEFAULT 0 CHECK (progress_total >= 0),
    ADD COLUMN phase          TEXT,
    ADD COLUMN status_message TEXT,
    ADD COLUMN started_at     TIMESTAMPTZ,
    ADD COLUMN finished_at    TIMESTAMPTZ;
CREATE INDEX runs_project_status ON runs (project_id, status);

-- Refresh sessions: one row per login. Access tokens name their session (`sid`), so revoking the
-- row (logout, refresh-token reuse) also ends every access token issued for it.
CREATE TABLE sessions (
    id                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id            BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    refresh_token_hash BYTEA NOT NULL UNIQUE,
    created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at         TIMESTAMPTZ NOT NULL,
    revoked_at         TIMESTAMPTZ,
    user_agent         TEXT
);
CREATE INDEX sessions_user ON sessions (user_id);

CREATE TYPE env_kind AS ENUM ('game', 'tool_use');
CREATE TYPE env_status AS ENUM ('accepted', 'rejected');

CREATE TABLE environments (
    id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id            BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    env_id            TEXT NOT NULL CHECK (length(env_id) BETWEEN 1 AND 200),
    step              BIGINT NOT NULL CHECK (step >= 0),
    skill             TEXT NOT NULL,
    kind              env_kind NOT NULL,
    status            env_status NOT NULL,
    rejection_reason  TEXT,
    rejection_message TEXT,
    code              TEXT NOT NULL,
    hint              TEXT,
    -- env_id of the memory environment this one was derived from (same run).
    parent_env_id     TEXT,
    regret            DOUBLE PRECISION,
    win_rate_hint     DOUBLE PRECISION,
    win_rate_no_hint  DOUBLE PRECISION,
    designer_reward   DOUBLE PRECISION,
    reward_levels     INTEGER CHECK (reward_levels >= 0),
    attempts          INTEGER NOT NULL DEFAULT 1 CHECK (attempts >= 0),
    -- Optional embedding of the code (e.g. for Vendi diversity); absent until computed.
    embedding         REAL[],
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (run_id, env_id)
);
CREATE INDEX environments_run_step ON environments (run_id, step);
CREATE INDEX environments_run_skill ON environments (run_id, skill, step);
CREATE INDEX environments_run_regret ON environments (run_id, regret);

CREATE TABLE plays (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id         BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    env_id         TEXT NOT NULL,
    step           BIGINT NOT NULL CHECK (step >= 0),
    with_hint      BOOLEAN NOT NULL,
    episode_return DOUBLE PRECISION NOT NULL,
    won            BOOLEAN NOT NULL,
    turns          INTEGER NOT NULL CHECK (turns >= 0),
    transcript     JSONB NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX plays_run_env ON plays (run_id, env_id, id);

-- Scalar time series. The primary key is the index range queries use: one metric of one run,
-- ordered by step.
CREATE TABLE metrics (
    run_id    BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    name      TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    step      BIGINT NOT NULL CHECK (step >= 0),
    value     DOUBLE PRECISION NOT NULL,
    elapsed_s DOUBLE PRECISION NOT NULL DEFAULT 0,
    logged_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, name, step)
);

CREATE TABLE checkpoints (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id     BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step       BIGINT NOT NULL CHECK (step >= 0),
    path       TEXT NOT NULL,
    bytes      BIGINT NOT NULL CHECK (bytes >= 0),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (run_id, step)
);

CREATE TABLE benchmark_results (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id          BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    checkpoint_step BIGINT CHECK (checkpoint_step >= 0),
    suite           TEXT NOT NULL,
    task            TEXT NOT NULL,
    score           DOUBLE PRECISION NOT NULL,
    n               INTEGER NOT NULL CHECK (n >= 0),
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX benchmark_results_run ON benchmark_results (run_id, suite, task);

CREATE TABLE run_logs (
    id        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id    BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    level     TEXT NOT NULL,
    line      TEXT NOT NULL,
    logged_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX run_logs_run ON run_logs (run_id, id);

-- Read-only links to one run. Only the SHA-256 of the token is stored.
CREATE TABLE share_links (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id     BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    token_hash BYTEA NOT NULL UNIQUE,
    created_by BIGINT REFERENCES users (id) ON DELETE SET NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at TIMESTAMPTZ
);
CREATE INDEX share_links_run ON share_links (run_id);

-- Idempotency of worker ingestion: an envelope's key is stored in the same transaction as what
-- it carried, so a replayed key is acknowledged without being applied twice.
CREATE TABLE ingest_keys (
    run_id      BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key         TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 200),
    seq         BIGINT NOT NULL CHECK (seq >= 0),
    received_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, key)
);

CREATE TABLE audit_log (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    actor_id   BIGINT REFERENCES users (id) ON DELETE SET NULL,
    team_id    BIGINT REFERENCES teams (id) ON DELETE SET NULL,
    action     TEXT NOT NULL,
    target     TEXT NOT NULL,
    detail     JSONB NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_team_at ON audit_log (team_id, at DESC);
