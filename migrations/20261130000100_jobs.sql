-- The job queue: one row per attempt to execute a run (training) or an evaluation. The scheduler
-- claims queued rows with FOR UPDATE SKIP LOCKED, so concurrent schedulers never claim one twice,
-- and records where each job runs (executor + external id) so a restarted server re-attaches.
-- Migrations are never edited once applied; change the schema with a new file.

CREATE TYPE job_kind AS ENUM ('train', 'eval');
CREATE TYPE job_state AS ENUM (
    'queued', 'claimed', 'running', 'cancelling', 'succeeded', 'failed', 'cancelled'
);
CREATE TYPE job_executor AS ENUM ('local', 'ray');

CREATE TABLE jobs (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id       BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    kind         job_kind NOT NULL DEFAULT 'train',
    state        job_state NOT NULL DEFAULT 'queued',
    executor     job_executor NOT NULL,
    -- Numbered per run from 1; with run_id it names the job at the executor (Ray submission id).
    attempt      INTEGER NOT NULL CHECK (attempt >= 1),
    -- Local: "pid:<pid>:<start ticks>"; Ray: the submission id. Set once the executor accepted it.
    external_id  TEXT CHECK (length(external_id) BETWEEN 1 AND 200),
    -- The scheduler node that claimed the job; only that node polls and re-attaches it.
    claimed_by   TEXT CHECK (length(claimed_by) BETWEEN 1 AND 200),
    heartbeat_at TIMESTAMPTZ,
    log_path     TEXT,
    exit_code    INTEGER,
    message      TEXT,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    claimed_at   TIMESTAMPTZ,
    started_at   TIMESTAMPTZ,
    finished_at  TIMESTAMPTZ,
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (run_id, attempt),
    -- A job that left the queue has an owner; a running one has an executor handle; a finished
    -- one has an end time.
    CHECK (state = 'queued' OR state = 'cancelled' OR claimed_by IS NOT NULL),
    CHECK (state <> 'running' OR external_id IS NOT NULL),
    CHECK ((state IN ('succeeded', 'failed', 'cancelled')) = (finished_at IS NOT NULL))
);

-- At most one unfinished job per run: a second enqueue for the same run fails instead of
-- starting the run twice.
CREATE UNIQUE INDEX jobs_one_active_per_run ON jobs (run_id)
    WHERE state IN ('queued', 'claimed', 'running', 'cancelling');
-- The claim query's scan: oldest queued job of one executor.
CREATE INDEX jobs_queue ON jobs (executor, created_at, id) WHERE state = 'queued';
-- Re-attach and polling: the unfinished jobs of one node.
CREATE INDEX jobs_active_by_node ON jobs (claimed_by)
    WHERE state IN ('claimed', 'running', 'cancelling');
