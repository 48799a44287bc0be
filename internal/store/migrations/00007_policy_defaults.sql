-- Schema v7: a user's defaults for the policy of the boxes they create.
--
-- Each column left NULL is the server's default (the config's box_policy, else the built-in
-- one). A box takes the defaults at its create; changing them later changes no existing box.

-- +goose Up
CREATE TABLE policy_defaults (
    user_id                text PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
    idle_seconds           bigint CHECK (idle_seconds >= 0),
    durable                boolean,
    snapshot_every_seconds bigint CHECK (snapshot_every_seconds >= 0),
    keep_snapshots         integer CHECK (keep_snapshots >= 1),
    lease_idle_seconds     bigint CHECK (lease_idle_seconds >= 0),
    updated_at             timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE policy_defaults;
