-- One row per (run, metric): what the run page lists without scanning a million points.
-- Maintained by ingestion in the same statement that stores the points (`spade_db::ingest`).
-- A separate file because 20261130000001 was already applied on some databases.
CREATE TABLE metric_series (
    run_id     BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    points     BIGINT NOT NULL CHECK (points >= 0),
    first_step BIGINT NOT NULL,
    last_step  BIGINT NOT NULL,
    PRIMARY KEY (run_id, name)
);

-- Runs that logged metrics before this table existed.
INSERT INTO metric_series (run_id, name, points, first_step, last_step)
SELECT run_id, name, count(*), min(step), max(step) FROM metrics GROUP BY run_id, name;
