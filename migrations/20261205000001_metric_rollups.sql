-- Metric rollups kept at ingest (issue 19, item 5), so no page reads or aggregates raw points
-- at request time. Level L (1..10) cuts a series into buckets of 4^L steps (bucket = step >> 2L);
-- a row keeps its bucket's point count and its first, last, lowest and highest point (the M4
-- reduction), each with its wall-clock time. Maintained by `spade_db::ingest` in the batch's
-- transaction; see `spade_db::rollups`.
CREATE TABLE metric_rollups (
    run_id        BIGINT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    level         SMALLINT NOT NULL CHECK (level BETWEEN 1 AND 10),
    bucket        BIGINT NOT NULL,
    n             BIGINT NOT NULL CHECK (n > 0),
    first_step    BIGINT NOT NULL,
    first_value   DOUBLE PRECISION NOT NULL,
    first_elapsed DOUBLE PRECISION NOT NULL,
    last_step     BIGINT NOT NULL,
    last_value    DOUBLE PRECISION NOT NULL,
    last_elapsed  DOUBLE PRECISION NOT NULL,
    low_step      BIGINT NOT NULL,
    low_value     DOUBLE PRECISION NOT NULL,
    low_elapsed   DOUBLE PRECISION NOT NULL,
    high_step     BIGINT NOT NULL,
    high_value    DOUBLE PRECISION NOT NULL,
    high_elapsed  DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (run_id, name, level, bucket)
);

-- The newest value of each series, for the runs list's columns (one query for a whole page of
-- runs instead of one per run and metric); and a revision counted up by every statement that
-- stores points of the series (new or re-logged), so a page can tell that a series it drew
-- before is unchanged without reading it.
ALTER TABLE metric_series
    ADD COLUMN last_value DOUBLE PRECISION,
    ADD COLUMN revision BIGINT NOT NULL DEFAULT 0;

-- Series logged before this migration. Arrays compare element by element, so min(ARRAY[step,
-- ...]) is the first point and min(ARRAY[value, step, ...]) the lowest (earliest on ties),
-- max(ARRAY[value, step, ...]) the highest (latest on ties): the same order the ingest code uses.
UPDATE metric_series s SET last_value = m.value
FROM metrics m
WHERE m.run_id = s.run_id AND m.name = s.name AND m.step = s.last_step;

INSERT INTO metric_rollups
SELECT run_id, name, level, bucket, n,
       first[1]::bigint, first[2], first[3],
       last[1]::bigint, last[2], last[3],
       low[2]::bigint, low[1], low[3],
       high[2]::bigint, high[1], high[3]
FROM (
    SELECT m.run_id, m.name, l.level::smallint AS level, m.step >> (2 * l.level) AS bucket,
           count(*) AS n,
           min(ARRAY[m.step::float8, m.value, m.elapsed_s]) AS first,
           max(ARRAY[m.step::float8, m.value, m.elapsed_s]) AS last,
           min(ARRAY[m.value, m.step::float8, m.elapsed_s]) AS low,
           max(ARRAY[m.value, m.step::float8, m.elapsed_s]) AS high
    FROM metrics m CROSS JOIN generate_series(1, 10) AS l (level)
    GROUP BY m.run_id, m.name, l.level, m.step >> (2 * l.level)
) AS agg;
