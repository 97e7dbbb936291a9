-- Accounts, teams and runs: the spine every later table hangs off.
-- Migrations are never edited once applied; change the schema with a new file.

CREATE TABLE users (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email         TEXT NOT NULL UNIQUE CHECK (length(email) BETWEEN 3 AND 320),
    display_name  TEXT NOT NULL CHECK (length(display_name) BETWEEN 1 AND 100),
    password_hash TEXT NOT NULL,
    is_admin      BOOLEAN NOT NULL DEFAULT FALSE,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE teams (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 100),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TYPE team_role AS ENUM ('owner', 'editor', 'viewer');

CREATE TABLE memberships (
    team_id BIGINT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    user_id BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role    team_role NOT NULL,
    PRIMARY KEY (team_id, user_id)
);

CREATE TABLE projects (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    team_id    BIGINT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name       TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (team_id, name)
);

CREATE TYPE run_status AS ENUM ('queued', 'starting', 'running', 'cancelling', 'cancelled', 'succeeded', 'failed');

CREATE TABLE runs (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id   BIGINT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name         TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    config       JSONB NOT NULL,
    status       run_status NOT NULL DEFAULT 'queued',
    executor     TEXT NOT NULL DEFAULT 'local',
    seed         BIGINT NOT NULL,
    code_version TEXT NOT NULL,
    created_by   BIGINT REFERENCES users (id) ON DELETE SET NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX runs_project_created ON runs (project_id, created_at DESC);
