-- The standard error of each held-out score and the samples per question behind it: the
-- paper's tables show mean with standard error, and an Avg@k score needs its k recorded.
-- Rows stored before this have neither (NULL, 1).
ALTER TABLE benchmark_results
    ADD COLUMN stderr DOUBLE PRECISION CHECK (stderr >= 0),
    ADD COLUMN samples INTEGER NOT NULL DEFAULT 1 CHECK (samples >= 1);

-- An evaluation job may draw k samples per question at a temperature (Avg@k and pass@k);
-- k > 1 needs a temperature above 0, or every sample is the same greedy reply.
ALTER TABLE evaluations
    ADD COLUMN samples INTEGER NOT NULL DEFAULT 1 CHECK (samples BETWEEN 1 AND 1024),
    ADD COLUMN temperature DOUBLE PRECISION NOT NULL DEFAULT 0
        CHECK (temperature >= 0 AND temperature <= 10),
    ADD CONSTRAINT evaluations_samples_need_temperature CHECK (samples = 1 OR temperature > 0);
