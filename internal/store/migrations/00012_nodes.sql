-- Schema v12: engine nodes.
--
-- Each engine node is registered and kept current by the heartbeat of the worker beside it
-- (`serve worker --node ID`): its engine's address, its capacity and load, and the ready boxes of
-- its warm pools, from the engine's /v1/info. A node whose heartbeat stops for node_dead_after is
-- marked lost; a draining node takes no new boxes.

-- +goose Up
CREATE TABLE nodes (
    id            text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9.-]{0,62}$'),
    url           text NOT NULL CHECK (url <> ''),
    state         text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'draining', 'lost')),
    memory_mib    bigint NOT NULL DEFAULT 0 CHECK (memory_mib >= 0),
    committed_mib bigint NOT NULL DEFAULT 0 CHECK (committed_mib >= 0),
    max_boxes     integer NOT NULL DEFAULT 0 CHECK (max_boxes >= 0),
    boxes         integer NOT NULL DEFAULT 0 CHECK (boxes >= 0),
    hibernated    integer NOT NULL DEFAULT 0 CHECK (hibernated >= 0),
    warm          jsonb NOT NULL DEFAULT '{}',
    registered_at timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE nodes;
