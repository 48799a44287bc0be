-- Schema v10: the node that holds a box's sandbox.
--
-- A sandboxd cluster may answer a claim with a redirect: the sandbox is then on the node the
-- redirect named, and every later call on it must go there rather than to the configured engine.
-- sandbox_addr keeps that node's address beside the sandbox's token (empty: the configured
-- engine), written with the token and cleared with it.

-- +goose Up
ALTER TABLE boxes ADD COLUMN sandbox_addr text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE boxes DROP COLUMN sandbox_addr;
