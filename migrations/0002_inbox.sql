-- The inbox of AMQP consumers (crate oncebox-inbox): each message id is applied once per
-- consumer, inside the consumer's own transaction.

CREATE SCHEMA IF NOT EXISTS oncebox_inbox;

-- One row per message applied. Retention: rows older than the longest redelivery window can be
-- purged (oncebox_inbox::Inbox::purge; default advice 7 days).
CREATE TABLE oncebox_inbox.processed (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);
CREATE INDEX processed_by_age ON oncebox_inbox.processed (processed_at);

-- Handler failures per message, counted outside the failed transaction, so that a poison
-- message is rejected to the queue's dead-letter exchange after N tries.
CREATE TABLE oncebox_inbox.failures (
    consumer   text        NOT NULL,
    message_id text        NOT NULL,
    count      integer     NOT NULL,
    last_error text,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);
