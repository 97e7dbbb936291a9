-- Share links get a label (who or what a link was made for, so a list of links can be told
-- apart and the right one revoked) and an optional expiry, after which the link reads as
-- unknown, as a revoked one does.
ALTER TABLE share_links
    ADD COLUMN label TEXT NOT NULL DEFAULT '' CHECK (length(label) <= 100),
    ADD COLUMN expires_at TIMESTAMPTZ;
