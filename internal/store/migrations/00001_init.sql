-- Schema v1. IDs visible outside the database are text, with a type prefix where this package or
-- the root package makes them (usr_, tok_, bx_), so a pasted ID says what it is; rows only the
-- database refers to use identity columns.
-- Enumerations are text with CHECK constraints rather than enum types: adding a value is then a
-- one-line constraint swap in a later migration, inside a transaction.

-- +goose Up
CREATE TABLE users (
    id         text PRIMARY KEY CHECK (id ~ '^usr_[a-z2-7]+$'),
    name       text NOT NULL UNIQUE CHECK (name ~ '^[a-z][a-z0-9._-]{0,62}$'),
    admin      boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Only the SHA-256 of a token is stored: a leaked table grants nothing.
CREATE TABLE tokens (
    id           text PRIMARY KEY CHECK (id ~ '^tok_[a-z2-7]+$'),
    user_id      text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    hash         bytea NOT NULL UNIQUE CHECK (length(hash) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz,
    expires_at   timestamptz
);
CREATE INDEX tokens_user_id_idx ON tokens (user_id);

CREATE TABLE boxes (
    id                       text PRIMARY KEY CHECK (id ~ '^bx_[0-9a-f]{16}$'),
    owner_id                 text NOT NULL REFERENCES users (id),
    name                     text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    size                     text NOT NULL CHECK (size IN ('small', 'medium', 'large', 'xlarge', '2xlarge')),
    state                    text NOT NULL CHECK (state IN (
        'creating', 'running', 'hibernating', 'hibernated', 'waking', 'snapshotting',
        'restoring', 'deleting', 'deleted', 'failed')),
    -- The engine's sandbox and its per-box credential (encrypted; never in Temporal payloads).
    sandbox_id               text,
    sandbox_token_ciphertext bytea,
    last_error               text,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    deleted_at               timestamptz,
    CHECK ((state = 'deleted') = (deleted_at IS NOT NULL))
);
-- Names are unique per owner among boxes that still exist; a deleted box frees its name.
CREATE UNIQUE INDEX boxes_owner_name_key ON boxes (owner_id, name) WHERE deleted_at IS NULL;
CREATE UNIQUE INDEX boxes_sandbox_id_key ON boxes (sandbox_id) WHERE sandbox_id IS NOT NULL AND deleted_at IS NULL;

CREATE TABLE shares (
    box_id     text NOT NULL REFERENCES boxes (id) ON DELETE CASCADE,
    user_id    text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role       text NOT NULL CHECK (role IN ('viewer', 'driver', 'admin')),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (box_id, user_id)
);
CREATE INDEX shares_user_id_idx ON shares (user_id);

CREATE TABLE snapshots (
    id         text PRIMARY KEY CHECK (id <> ''),
    box_id     text NOT NULL REFERENCES boxes (id),
    parent_id  text REFERENCES snapshots (id) ON DELETE SET NULL,
    state      text NOT NULL CHECK (state IN ('uploading', 'complete', 'failed')),
    object_key text NOT NULL UNIQUE CHECK (object_key <> ''),
    bytes      bigint CHECK (bytes >= 0),
    sha256     bytea CHECK (length(sha256) = 32),
    file_count bigint CHECK (file_count >= 0),
    pinned     boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Nothing is complete before its size and checksum are known and verified.
    CHECK (state <> 'complete' OR (bytes IS NOT NULL AND sha256 IS NOT NULL AND file_count IS NOT NULL))
);
CREATE INDEX snapshots_box_created_idx ON snapshots (box_id, created_at DESC);

-- Values are AES-256-GCM ciphertexts; the AAD binds owner and name, so a row copied to another
-- owner or name does not decrypt.
CREATE TABLE secrets (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner_id   text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name       text NOT NULL CHECK (name ~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$'),
    ciphertext bytea NOT NULL,
    nonce      bytea NOT NULL CHECK (length(nonce) = 12),
    key_id     text NOT NULL CHECK (key_id <> ''),
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (owner_id, name)
);

CREATE TABLE agent_runs (
    id         text PRIMARY KEY CHECK (id <> ''),
    box_id     text NOT NULL REFERENCES boxes (id),
    owner_id   text NOT NULL REFERENCES users (id),
    state      text NOT NULL CHECK (state IN ('running', 'waiting', 'succeeded', 'failed', 'cancelled')),
    model      text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    ended_at   timestamptz,
    CHECK ((state IN ('succeeded', 'failed', 'cancelled')) = (ended_at IS NOT NULL))
);
CREATE INDEX agent_runs_box_created_idx ON agent_runs (box_id, created_at DESC);
CREATE INDEX agent_runs_owner_created_idx ON agent_runs (owner_id, created_at DESC);

-- A step records references (object keys, sizes, tool names), not transcripts or screenshots.
CREATE TABLE agent_steps (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id     text NOT NULL REFERENCES agent_runs (id) ON DELETE CASCADE,
    step       integer NOT NULL CHECK (step >= 0),
    kind       text NOT NULL CHECK (kind ~ '^[a-z][a-z_]*$'),
    payload    jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_id, step)
);

-- The audit log. No foreign keys on purpose: entries must outlive the users and boxes they name,
-- and actor may be a system component rather than a user.
CREATE TABLE events (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    actor  text NOT NULL CHECK (actor <> ''),
    box_id text,
    action text NOT NULL CHECK (action ~ '^[a-z][a-z0-9_.]*$'),
    detail jsonb NOT NULL DEFAULT '{}',
    at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_box_at_idx ON events (box_id, at) WHERE box_id IS NOT NULL;
CREATE INDEX events_actor_at_idx ON events (actor, at);
CREATE INDEX events_at_idx ON events (at);

-- +goose Down
DROP TABLE events;
DROP TABLE agent_steps;
DROP TABLE agent_runs;
DROP TABLE secrets;
DROP TABLE snapshots;
DROP TABLE shares;
DROP TABLE boxes;
DROP TABLE tokens;
DROP TABLE users;
