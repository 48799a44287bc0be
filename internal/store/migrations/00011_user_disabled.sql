-- Schema v11: disabled users.
--
-- An admin disables a user (cocoonbox admin user disable): their tokens are revoked with it and
-- no token of theirs authenticates again; their boxes stay, for an admin to keep or delete.

-- +goose Up
ALTER TABLE users ADD COLUMN disabled_at timestamptz;

-- +goose Down
ALTER TABLE users DROP COLUMN disabled_at;
