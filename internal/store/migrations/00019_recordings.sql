-- A recorded agent run's desktop: the box's RFB stream in gzip chunks in the bucket
-- (recordings/<run>/<seq>.gz), written as the run goes.

-- +goose Up
CREATE TABLE recordings (
    run_id     text PRIMARY KEY REFERENCES agent_runs (id) ON DELETE CASCADE,
    box_id     text NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at   timestamptz,
    chunks     integer NOT NULL DEFAULT 0 CHECK (chunks >= 0),
    bytes      bigint NOT NULL DEFAULT 0 CHECK (bytes >= 0)
);
CREATE INDEX recordings_box_idx ON recordings (box_id, started_at DESC);

-- +goose Down
DROP TABLE recordings;
