-- Evaluations: one checkpoint of a run on one held-out suite, executed as a job of kind 'eval'
-- beside (not instead of) the run's training job. Results land in benchmark_results with the
-- evaluation that produced them, so a retried job replaces its own rows and nothing else.
-- Migrations are never edited once applied; change the schema with a new file.

-- A run trains at most once at a time; evaluations of its checkpoints may queue and run beside
-- the training job, so the one-unfinished-job rule now holds for training jobs only.
DROP INDEX jobs_one_active_per_run;
CREATE UNIQUE INDEX jobs_one_active_train_per_run ON jobs (run_id)
    WHERE kind = 'train' AND state IN ('queued', 'claimed', 'running', 'cancelling');

CREATE TABLE evaluations (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id          BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    job_id          BIGINT NOT NULL UNIQUE REFERENCES jobs (id) ON DELETE CASCADE,
    -- 0 is the model the run started from (the worker reports it as checkpoint 0).
    checkpoint_step BIGINT NOT NULL CHECK (checkpoint_step >= 0),
    -- Where the job reads the checkpoint (the path the worker reported).
    checkpoint_path TEXT NOT NULL CHECK (length(checkpoint_path) BETWEEN 1 AND 4096),
    suite           TEXT NOT NULL CHECK (length(suite) BETWEEN 1 AND 1000),
    item_limit      INTEGER CHECK (item_limit >= 1),
    max_new_tokens  INTEGER NOT NULL CHECK (max_new_tokens >= 1),
    -- 'manual' (a person asked) or 'auto' (the run configuration's eval.every_steps).
    trigger         TEXT NOT NULL CHECK (trigger IN ('manual', 'auto')),
    requested_by    BIGINT REFERENCES users (id) ON DELETE SET NULL,
    -- SHA-256 of the job's token; it may post results for this evaluation only.
    token_hash      BYTEA,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX evaluations_run ON evaluations (run_id, checkpoint_step);
-- A checkpoint is evaluated automatically once per suite, however often its report is replayed.
CREATE UNIQUE INDEX evaluations_auto_once ON evaluations (run_id, checkpoint_step, suite)
    WHERE trigger = 'auto';

ALTER TABLE benchmark_results
    ADD COLUMN evaluation_id BIGINT REFERENCES evaluations (id) ON DELETE CASCADE;
CREATE INDEX benchmark_results_evaluation ON benchmark_results (evaluation_id);
