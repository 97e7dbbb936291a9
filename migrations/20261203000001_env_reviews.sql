-- Review marks on environments (issue 23): a team member with edit rights marks an environment
-- good, broken or reward-hackable with a comment. One mark per member and environment; marking
-- again replaces it.
CREATE TYPE env_verdict AS ENUM ('good', 'broken', 'reward_hackable');

CREATE TABLE env_reviews (
    environment_id BIGINT NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    user_id        BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    verdict        env_verdict NOT NULL,
    comment        TEXT NOT NULL DEFAULT '' CHECK (length(comment) <= 2000),
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (environment_id, user_id)
);
