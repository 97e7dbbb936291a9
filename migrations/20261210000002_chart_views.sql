-- Saved chart views (issue 43): a person's named chart settings (smoothing, x axis, log
-- scale, the chart filter), offered on every run and compare page they open. Private to the
-- person; the service checks the shapes and names the field, the constraints keep the table
-- honest if it is bypassed.
CREATE TABLE chart_views (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id    BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name       TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 60),
    smoothing  DOUBLE PRECISION NOT NULL CHECK (smoothing >= 0 AND smoothing < 1),
    x_axis     TEXT NOT NULL CHECK (x_axis IN ('step', 'time')),
    log_y      BOOLEAN NOT NULL,
    find       TEXT NOT NULL CHECK (length(find) <= 100),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (user_id, name)
);
