-- A user's default for recording the desktop of every agent run on their new boxes (a box's own
-- policy is kept on its row with the rest of it).

-- +goose Up
ALTER TABLE policy_defaults ADD COLUMN record_runs boolean;

-- +goose Down
ALTER TABLE policy_defaults DROP COLUMN record_runs;
