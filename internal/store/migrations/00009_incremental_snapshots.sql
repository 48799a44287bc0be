-- Schema v9: incremental snapshots.
--
-- A snapshot with a base holds only the files changed since that base (and the names that are
-- gone); restoring it restores the chain of bases first. RESTRICT makes the database refuse to
-- drop a base while a snapshot still needs it: retention compacts the dependent snapshot into a
-- full one first. depth is the number of bases under a snapshot, 0 for a full one. index_key
-- names the object holding the index of the snapshot's whole tree, which the next incremental
-- snapshot is exported against; NULL for snapshots from before v9, which are never a base.
-- kind says what the object holds: the box's disk layer as the engine exported it ('disk'), or
-- trees of the box read through its agent's State service ('state': an engine without disk
-- export, upstream sandboxd), which restore through the agent too and are never incremental.

-- +goose Up
ALTER TABLE snapshots
    ADD COLUMN base_id text REFERENCES snapshots (id) ON DELETE RESTRICT,
    ADD COLUMN depth integer NOT NULL DEFAULT 0 CHECK (depth >= 0),
    ADD COLUMN index_key text CHECK (index_key <> ''),
    ADD COLUMN kind text NOT NULL DEFAULT 'disk' CHECK (kind IN ('disk', 'state')),
    ADD CONSTRAINT snapshots_state_full CHECK (kind = 'disk' OR (base_id IS NULL AND index_key IS NULL)),
    ADD CONSTRAINT snapshots_depth_base CHECK ((base_id IS NULL) = (depth = 0)),
    ADD CONSTRAINT snapshots_not_own_base CHECK (base_id <> id);
CREATE INDEX snapshots_base_idx ON snapshots (base_id) WHERE base_id IS NOT NULL;

-- +goose Down
DROP INDEX snapshots_base_idx;
ALTER TABLE snapshots DROP COLUMN kind, DROP COLUMN index_key, DROP COLUMN depth, DROP COLUMN base_id;
