-- Plays belong to an environment the run reported (issue 36, item 8): a worker could store
-- plays under any env_id, which then showed on no environment page and counted in nothing a
-- reviewer could see. The database now refuses them; ingestion checks first and names the
-- unknown env_id (`envelopes[i].message.records[j].env_id`).
--
-- NOT VALID: plays stored before this rule (fixed-pool and RLVE runs reported plays without
-- environment records) stay readable; every new play is checked.
ALTER TABLE plays
    ADD CONSTRAINT plays_reported_env FOREIGN KEY (run_id, env_id)
        REFERENCES environments (run_id, env_id) ON DELETE CASCADE NOT VALID;
