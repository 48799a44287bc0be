-- Schema v4: desktop tickets are spent once.
--
-- A desktop ticket (sealed by the API, valid for a minute) opens one WebSocket. Its ID is
-- recorded here when the edge accepts it, so a ticket that leaked (a log, a shared address bar)
-- opens nothing after its first use, on any API replica. Rows are useless once the ticket has
-- expired and are deleted by later spends.

-- +goose Up
CREATE TABLE spent_tickets (
    id         text PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
CREATE INDEX spent_tickets_expires_at ON spent_tickets (expires_at);

-- +goose Down
DROP TABLE spent_tickets;
