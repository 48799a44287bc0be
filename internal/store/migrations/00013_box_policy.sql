-- Schema v13: a box's policy on its row.
--
-- The box's workflow holds its policy (idle period, durable hibernate, snapshots kept, network);
-- the row keeps a copy, written by the API after each create and policy change, so a box whose
-- workflow is gone (a deployment restored from a backup onto a new Temporal) comes back with its
-- own policy rather than its owner's defaults. '{}' is a box from before v13: defaults.

-- +goose Up
ALTER TABLE boxes ADD COLUMN policy jsonb NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE boxes DROP COLUMN policy;
