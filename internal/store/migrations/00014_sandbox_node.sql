-- Schema v14: the registered engine node that holds a box's sandbox, by ID.
--
-- With several engine nodes, each worker's own engine is a different one, so an empty
-- sandbox_addr ("the configured engine") named a different engine to each worker. sandbox_node
-- names the node (`serve worker --node`, `local` in `cocoonbox dev`); its address is read from its
-- record (nodes.url, kept current by its heartbeat) each time the token is, so a node whose
-- address changes keeps its boxes. Empty for a sandbox on an engine no node record names.

-- +goose Up
ALTER TABLE boxes ADD COLUMN sandbox_node text NOT NULL DEFAULT '';
CREATE INDEX boxes_sandbox_node_idx ON boxes (sandbox_node) WHERE sandbox_node <> '' AND deleted_at IS NULL;

-- +goose Down
DROP INDEX boxes_sandbox_node_idx;
ALTER TABLE boxes DROP COLUMN sandbox_node;
