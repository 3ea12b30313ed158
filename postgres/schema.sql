-- BabelQueue on PostgreSQL: the transactional outbox and the inbox.
--
-- Apply it with psql (psql "$URL" -f schema.sql) or with postgres.Migrate, which runs this file.
-- It creates its objects in the first schema of the search_path and may be applied again: every
-- statement is idempotent. Needs PostgreSQL 14 or later (CREATE OR REPLACE TRIGGER).

-- The outbox: one row per message written in a business transaction. body is the envelope's
-- canonical encoding, byte for byte what the relay publishes.
CREATE TABLE IF NOT EXISTS babelqueue_outbox (
    seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id      text        NOT NULL UNIQUE,     -- meta.id, also the duplicate id (_AMQ_DUPL_ID)
    queue           text        NOT NULL,
    urn             text        NOT NULL,
    group_id        text,                            -- NULL: no message group
    headers         jsonb,                           -- out-of-band headers (string values)
    body            bytea       NOT NULL,
    deliver_at      timestamptz,                     -- NULL: at once
    created_at      timestamptz NOT NULL DEFAULT now(),
    attempts        integer     NOT NULL DEFAULT 0,  -- publishes the broker refused
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    parked_at       timestamptz,                     -- set after too many refusals: never published until reset
    published_at    timestamptz                      -- set once the broker accepted the message
);

CREATE INDEX IF NOT EXISTS babelqueue_outbox_pending
    ON babelqueue_outbox (seq) WHERE published_at IS NULL;
CREATE INDEX IF NOT EXISTS babelqueue_outbox_group
    ON babelqueue_outbox (group_id, seq) WHERE published_at IS NULL AND group_id IS NOT NULL;
-- The rows that may hold back the later rows of their group (parked, or refused and waiting out
-- a back-off): the relay's claim looks a group up here, so held rows cost it one probe each.
CREATE INDEX IF NOT EXISTS babelqueue_outbox_held
    ON babelqueue_outbox (group_id, seq)
    WHERE published_at IS NULL AND group_id IS NOT NULL AND (parked_at IS NOT NULL OR attempts > 0);
CREATE INDEX IF NOT EXISTS babelqueue_outbox_published
    ON babelqueue_outbox (published_at) WHERE published_at IS NOT NULL;

-- Relays LISTEN on "babelqueue_outbox:<schema>", or "babelqueue_outbox:<md5 of the schema name>"
-- when that would be longer than a channel name may be (max_identifier_length, 63 bytes); the
-- relay derives the same name with the same expression. The notification goes out when the
-- writing transaction commits.
CREATE OR REPLACE FUNCTION babelqueue_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    channel text := 'babelqueue_outbox:' || TG_TABLE_SCHEMA;
BEGIN
    IF octet_length(channel) > current_setting('max_identifier_length')::int THEN
        channel := 'babelqueue_outbox:' || md5(TG_TABLE_SCHEMA);
    END IF;
    PERFORM pg_notify(channel, '');
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER babelqueue_outbox_notify
    AFTER INSERT ON babelqueue_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION babelqueue_outbox_notify();

-- The inbox: one row per (consumer, meta.id) whose handler committed.
CREATE TABLE IF NOT EXISTS babelqueue_inbox (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);

CREATE INDEX IF NOT EXISTS babelqueue_inbox_processed ON babelqueue_inbox (processed_at);
