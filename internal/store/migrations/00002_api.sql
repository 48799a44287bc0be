-- Schema v2, for the control-plane API: shares that expire, and secrets under envelope
-- encryption.
--
-- A secret's value is encrypted with its own random data key (AES-256-GCM: ciphertext, nonce);
-- the data key is sealed by the master keyring into wrapped_key, and key_id names the master key
-- that sealed it. Rotating the master key then rewraps 32-byte data keys, found by key_id,
-- without touching the values. Both layers use an AAD that binds owner and name.

-- +goose Up
ALTER TABLE shares ADD COLUMN expires_at timestamptz;

-- The table has no rows anywhere yet, so the new NOT NULL column needs no default.
ALTER TABLE secrets
    ADD COLUMN wrapped_key bytea NOT NULL CHECK (length(wrapped_key) > 0),
    ADD COLUMN updated_at  timestamptz NOT NULL DEFAULT now();
CREATE INDEX secrets_key_id_idx ON secrets (key_id);

-- +goose Down
-- Without their wrapped data keys the values cannot be decrypted, so the rows go too.
DELETE FROM secrets;
DROP INDEX secrets_key_id_idx;
ALTER TABLE secrets DROP COLUMN updated_at, DROP COLUMN wrapped_key;
ALTER TABLE shares DROP COLUMN expires_at;
