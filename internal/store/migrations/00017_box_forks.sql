-- A fork's lineage: the box it was copied from (with its memory) and when. The parent is kept
-- by ID alone, not as a foreign key's promise: a deleted parent's row stays, and a fork lives on
-- without it.

-- +goose Up
ALTER TABLE boxes ADD COLUMN parent_id text, ADD COLUMN forked_at timestamptz;
CREATE INDEX boxes_parent_idx ON boxes (parent_id) WHERE parent_id IS NOT NULL;

-- +goose Down
DROP INDEX boxes_parent_idx;
ALTER TABLE boxes DROP COLUMN parent_id, DROP COLUMN forked_at;
