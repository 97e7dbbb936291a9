-- The standard error of each held-out score and the samples per question behind it: the
-- paper's tables show mean with standard error, and an Avg@k score needs its k recorded.
-- Rows stored before this have neither (NULL, 1).
ALTER TABLE benchmark_results
    ADD COLUMN stderr DOUBLE PRECISION CHECK (stderr >= 0),
    ADD COLUMN samples INTEGER NOT NULL DEFAULT 1 CHECK (samples >= 1);
