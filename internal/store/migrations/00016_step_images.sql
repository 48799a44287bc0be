-- A step's screenshots as small PNGs (the agent's thumbnails of what its tools saw), for the
-- run's timeline. Read by step, never with the run's list of steps.

-- +goose Up
ALTER TABLE agent_steps ADD COLUMN images bytea[] NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE agent_steps DROP COLUMN images;
