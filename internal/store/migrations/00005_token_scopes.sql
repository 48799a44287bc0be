-- Schema v5: a token may be limited to a scope.
--
-- full: everything its user may do (every token before this version); read: only calls that
-- change nothing; mcp: only the /mcp endpoint. The API enforces the scope on every surface.

-- +goose Up
ALTER TABLE tokens ADD COLUMN scope text NOT NULL DEFAULT 'full'
    CHECK (scope IN ('full', 'read', 'mcp'));

-- +goose Down
ALTER TABLE tokens DROP COLUMN scope;
