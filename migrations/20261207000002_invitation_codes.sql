-- An invitation is answered with the code of its link (issue 36, item 8). Before, whoever
-- registered an invited email first could accept: nothing proves that an account's email is
-- its holder's (the studio sends no mail). Now inviting returns a random code once, only its
-- SHA-256 is stored, and accepting or declining needs it, so a squatter who registers the
-- email sees the invitation but cannot take it; the owner sends the link to the person.
--
-- Invitations pending from before have no code and cannot be answered: an owner invites again
-- (which issues a code).
ALTER TABLE team_invitations
    ADD COLUMN code_hash BYTEA CHECK (code_hash IS NULL OR length(code_hash) = 32);
