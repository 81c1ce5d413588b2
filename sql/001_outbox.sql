-- 001_outbox.sql -- The outbox table, its pending-row index and the NOTIFY trigger.
-- Idempotent: applying it twice is harmless. Apply with: psql -v ON_ERROR_STOP=1 -f sql/001_outbox.sql

CREATE TABLE IF NOT EXISTS outbox (
    -- written by the database
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- written by the application
    topic        text NOT NULL,
    key          text,
    payload      bytea,
    headers      jsonb,
    -- owned by the relay
    attempts     integer NOT NULL DEFAULT 0,   -- failed deliveries that were the row's own fault
    last_error   text,                         -- the most recent failure, readable
    dead_at      timestamptz,                  -- set when the row is parked in the dead-letter state
    published_at timestamptz                   -- finish = "mark": when Kafka acknowledged it
);

-- Exactly the rows the claim query scans, in claim order.
CREATE INDEX IF NOT EXISTS outbox_pending_idx ON outbox (id)
    WHERE published_at IS NULL AND dead_at IS NULL;

-- The outbox is a queue: rows come and go fast, so vacuum it by a fixed number of dead rows
-- rather than a fraction of a table that is usually near empty.
ALTER TABLE outbox SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
                        autovacuum_vacuum_insert_scale_factor = 0,
                        autovacuum_vacuum_insert_threshold = 5000);

-- One notification per inserting statement (not per row) wakes the relay. The channel is the
-- trigger's argument, so a second outbox table can use its own channel. Identical notifications
-- within one transaction are folded into one by PostgreSQL.
CREATE OR REPLACE FUNCTION outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_ARGV[0], TG_TABLE_NAME);
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS outbox_notify ON outbox;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify('outbox');
