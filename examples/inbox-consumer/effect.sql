-- effect.sql -- The example consumer's effect: one row per event applied, so a test can count them.
-- Your consumer writes its own tables instead; only the inbox (sql/inbox.sql) is needed.
CREATE TABLE IF NOT EXISTS inbox_example_effect (
    consumer_group  text NOT NULL,
    source          text NOT NULL,
    outbox_id       bigint NOT NULL,
    topic           text NOT NULL,
    kafka_partition integer NOT NULL,
    kafka_offset    bigint NOT NULL,
    payload         bytea,
    applied_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- Deliberately no unique key: an effect applied twice would show as two rows.
