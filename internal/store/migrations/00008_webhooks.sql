-- Schema v8: signed webhooks a user registers for the events of their boxes, and their delivery
-- log.
--
-- A webhook's secret signs every delivery (HMAC-SHA256); it is shown once at creation and kept
-- sealed under the keyring (AAD "webhook:<id>"). The dispatcher reads events after its cursor
-- and starts one delivery workflow per webhook and event, so a crash re-dispatches at worst an
-- event whose workflow already exists, which Temporal refuses.

-- +goose Up
CREATE TABLE webhooks (
    id            text PRIMARY KEY CHECK (id ~ '^wh_[a-z2-7]{20}$'),
    user_id       text NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    url           text NOT NULL CHECK (url ~ '^https?://'),
    secret_sealed bytea NOT NULL,
    events        text[] NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhooks_user ON webhooks (user_id);

CREATE TABLE webhook_deliveries (
    id         bigserial PRIMARY KEY,
    webhook_id text NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    event_id   bigint NOT NULL,
    action     text NOT NULL,
    attempt    integer NOT NULL CHECK (attempt >= 1),
    status     integer,
    error      text NOT NULL DEFAULT '',
    at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_deliveries_hook ON webhook_deliveries (webhook_id, id);

CREATE TABLE webhook_cursor (
    one      boolean PRIMARY KEY DEFAULT true CHECK (one),
    event_id bigint NOT NULL
);

-- +goose Down
DROP TABLE webhook_cursor;
DROP TABLE webhook_deliveries;
DROP TABLE webhooks;
