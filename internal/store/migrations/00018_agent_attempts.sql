-- Best-of-N agent runs: one task run on N forks of a box, one agent run each, then a judge's
-- pick, which the user accepts (the winner's state replaces the box) or overrides.

-- +goose Up
CREATE TABLE agent_attempts (
    id         text PRIMARY KEY CHECK (id <> ''),
    box_id     text NOT NULL REFERENCES boxes (id),
    owner_id   text NOT NULL REFERENCES users (id),
    task       text NOT NULL,
    model      text NOT NULL,
    forks      text[] NOT NULL,
    runs       text[] NOT NULL CHECK (cardinality(runs) = cardinality(forks)),
    state      text NOT NULL CHECK (state IN ('running', 'judging', 'judged', 'accepting', 'accepted', 'failed', 'discarded')),
    winner     integer CHECK (winner >= 1),
    reason     text NOT NULL DEFAULT '',
    chosen     integer CHECK (chosen >= 1),
    error      text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    ended_at   timestamptz
);
CREATE INDEX agent_attempts_box_created_idx ON agent_attempts (box_id, created_at DESC);

-- +goose Down
DROP TABLE agent_attempts;
