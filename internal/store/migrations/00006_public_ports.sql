-- Schema v6: a box's owner may make a port of the box public.
--
-- A public port's preview answers anyone, without a token, while the box runs (an anonymous
-- request never wakes a box). A row exists only for a public port; making it private deletes it.

-- +goose Up
CREATE TABLE public_ports (
    box_id     text NOT NULL REFERENCES boxes(id) ON DELETE CASCADE,
    port       integer NOT NULL CHECK (port BETWEEN 1 AND 65535),
    set_by     text NOT NULL REFERENCES users(id),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (box_id, port)
);

-- +goose Down
DROP TABLE public_ports;
