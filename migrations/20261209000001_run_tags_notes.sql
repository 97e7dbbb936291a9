-- What a team writes about its runs (issue 43): tags to find them by and free-text notes.
-- The service checks the shapes (at most 20 tags of 1-40 characters, notes up to 10,000
-- characters) and names the field; the constraints keep the table honest if it is bypassed.
ALTER TABLE runs
    ADD COLUMN tags  TEXT[] NOT NULL DEFAULT '{}'
        CHECK (cardinality(tags) <= 20),
    ADD COLUMN notes TEXT NOT NULL DEFAULT ''
        CHECK (length(notes) <= 10000);
CREATE INDEX runs_tags ON runs USING gin (tags);
