-- Schema v15: what agent runs cost, the bound a run may spend, and runs waiting on a question.
--
-- model_calls has one row per model call a worker relayed for a run's step (the worker holds the
-- gateway key and sees each call's answer, so the counts are the gateway's own, not the box's
-- word). Rows outlive their run and box (no foreign keys): a bill does not vanish with a delete.
-- agent_runs.max_tokens bounds the input and output tokens of all the run's calls; 0 is no bound.
-- A run whose agent asked its starter a question (ask_user) is waiting_for_user until the answer.
-- user_budgets bounds the tokens a user's runs may use, and the hours their boxes may run, in a
-- calendar month (UTC), set by an admin (0: no bound). box_runtime has one row per time a box ran,
-- from the row saying running to it saying hibernating, hibernated, deleting, deleted or failed;
-- boxes.running_since is the start of the time under way.

-- +goose Up
CREATE TABLE model_calls (
    id            bigserial PRIMARY KEY,
    at            timestamptz NOT NULL DEFAULT now(),
    run_id        text NOT NULL,
    step          integer NOT NULL,
    box_id        text NOT NULL,
    user_id       text NOT NULL,
    model         text NOT NULL,
    status        integer NOT NULL,
    input_tokens  bigint NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    output_tokens bigint NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    cached_tokens bigint NOT NULL DEFAULT 0 CHECK (cached_tokens >= 0),
    latency_ms    integer NOT NULL DEFAULT 0
);
CREATE INDEX model_calls_run_idx ON model_calls (run_id);
CREATE INDEX model_calls_user_at_idx ON model_calls (user_id, at);
CREATE INDEX model_calls_at_idx ON model_calls (at);
ALTER TABLE agent_runs ADD COLUMN max_tokens bigint NOT NULL DEFAULT 0 CHECK (max_tokens >= 0);
CREATE TABLE user_budgets (
    user_id             text PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    tokens_per_month    bigint NOT NULL DEFAULT 0 CHECK (tokens_per_month >= 0),
    box_hours_per_month double precision NOT NULL DEFAULT 0 CHECK (box_hours_per_month >= 0),
    updated_at          timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE boxes ADD COLUMN running_since timestamptz;
CREATE TABLE box_runtime (
    id         bigserial PRIMARY KEY,
    box_id     text NOT NULL,
    user_id    text NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at   timestamptz NOT NULL CHECK (ended_at >= started_at)
);
CREATE INDEX box_runtime_user_ended_idx ON box_runtime (user_id, ended_at);
CREATE INDEX box_runtime_box_idx ON box_runtime (box_id);
ALTER TABLE agent_runs DROP CONSTRAINT agent_runs_state_check,
    ADD CONSTRAINT agent_runs_state_check
    CHECK (state IN ('running', 'waiting', 'waiting_for_user', 'succeeded', 'failed', 'cancelled'));

-- +goose Down
UPDATE agent_runs SET state = 'waiting' WHERE state = 'waiting_for_user';
ALTER TABLE agent_runs DROP CONSTRAINT agent_runs_state_check,
    ADD CONSTRAINT agent_runs_state_check
    CHECK (state IN ('running', 'waiting', 'succeeded', 'failed', 'cancelled'));
ALTER TABLE agent_runs DROP COLUMN max_tokens;
DROP TABLE user_budgets;
DROP TABLE box_runtime;
ALTER TABLE boxes DROP COLUMN running_since;
DROP TABLE model_calls;
