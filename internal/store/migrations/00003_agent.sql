-- Schema v3, for agent runs: what a run was asked, how it ended, and each step's line for people.
--
-- The conversation a step left is kept on its row so the next step's activity can send it back to
-- the in-box agent without the conversation ever entering a workflow payload. Only the newest two
-- steps keep theirs (a retried step needs its predecessor's); older ones are cleared, so a long run
-- with screenshots does not store its transcript once per step.

-- +goose Up
ALTER TABLE agent_runs
    ADD COLUMN task     text NOT NULL DEFAULT '',
    ADD COLUMN provider text NOT NULL DEFAULT '',
    ADD COLUMN error    text NOT NULL DEFAULT '';
ALTER TABLE agent_steps
    ADD COLUMN summary      text NOT NULL DEFAULT '',
    ADD COLUMN conversation bytea;

-- +goose Down
ALTER TABLE agent_steps DROP COLUMN conversation, DROP COLUMN summary;
ALTER TABLE agent_runs DROP COLUMN error, DROP COLUMN provider, DROP COLUMN task;
