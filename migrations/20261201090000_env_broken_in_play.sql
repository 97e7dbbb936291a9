-- An accepted environment that broke the contract while played (issue 17): its status becomes
-- 'broken_in_play'; the reason and message (naming the failing play's seed) go into
-- rejection_reason / rejection_message.
ALTER TYPE env_status ADD VALUE IF NOT EXISTS 'broken_in_play';
