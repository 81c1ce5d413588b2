-- inbox.sql -- The consumer's half of effectively-once: an inbox of the events a consumer group has applied.
--
-- Applied to the CONSUMER's database (where its effects are written), not to the outbox's: psql -f
-- inbox.sql. It may be applied again. The relay never reads it. docs/inbox.md has the rules.
--
-- The relay is at-least-once: after a fault a message may arrive again, with the same
-- outbox-source and outbox-id headers. A consumer calls outbox_inbox_accept() inside the
-- transaction that writes the event's effect, before writing it: true means "first time, apply
-- it", false "already applied by this group, skip it". The entry and the effect commit or roll
-- back together, so a crash anywhere leaves either both or neither.

CREATE TABLE IF NOT EXISTS outbox_inbox (
    consumer_group text NOT NULL,          -- who applied it: each group applies every event once
    source         text NOT NULL,          -- the message's outbox-source header
    outbox_id      bigint NOT NULL,        -- the message's outbox-id header
    received_at    timestamptz NOT NULL DEFAULT now(),  -- when it was first accepted (pruning)
    PRIMARY KEY (consumer_group, source, outbox_id)
);

-- outbox_inbox_prune() takes the oldest entries first.
CREATE INDEX IF NOT EXISTS outbox_inbox_received_idx ON outbox_inbox (received_at);

-- Pruning deletes all day long: vacuum the table after 1% of it is dead (the default 20% lets a
-- large inbox carry millions of dead entries between runs).
ALTER TABLE outbox_inbox SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.05);

-- Whether this delivery is the first of (group, source, id): true once, false for every repeat.
-- Call it in the consumer's own transaction, before the effect. Concurrent deliveries of one event
-- do not both proceed: the second waits for the first transaction; if that one commits, the second
-- gets false, if it rolls back, the second gets true. Neither gets an error at READ COMMITTED (the
-- default); at REPEATABLE READ or SERIALIZABLE a repeat that committed after the transaction's
-- snapshot fails with serialization_failure (40001), to be retried like any such transaction.
-- Accepting several events in one transaction: accept them in ascending (source, id) order, so
-- two transactions holding overlapping events never wait for each other in a cycle.
CREATE OR REPLACE FUNCTION outbox_inbox_accept(p_group text, p_source text, p_id bigint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_group IS NULL OR p_source IS NULL OR p_id IS NULL THEN
        RAISE EXCEPTION 'outbox_inbox_accept: group, source and id must not be NULL (the message lacks outbox-source or outbox-id?)'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    INSERT INTO outbox_inbox (consumer_group, source, outbox_id)
    VALUES (p_group, p_source, p_id)
    ON CONFLICT DO NOTHING;
    RETURN FOUND;
END
$$;

-- Deletes at most p_limit entries accepted more than p_retention ago, oldest first, and returns
-- how many. Call it again while it returns p_limit (outbox_inbox_prune_all does): each call is one
-- short transaction, so accepts go on meanwhile. A pruned event that arrives again is accepted
-- again: p_retention must be longer than any redelivery can come late (docs/inbox.md).
CREATE OR REPLACE FUNCTION outbox_inbox_prune(p_retention interval, p_limit integer DEFAULT 1000)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_n integer;
BEGIN
    IF p_retention IS NULL OR p_retention <= interval '0' THEN
        RAISE EXCEPTION 'outbox_inbox_prune: the retention must be a positive interval (got %)', p_retention
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'outbox_inbox_prune: the limit must be at least 1 (got %)', p_limit
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    DELETE FROM outbox_inbox
    WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM outbox_inbox
        WHERE received_at < now() - p_retention
        ORDER BY received_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- Prunes everything past the retention, committing after every batch of p_limit entries:
-- CALL outbox_inbox_prune_all('14 days'); (outside a transaction block, e.g. from cron or pg_cron).
CREATE OR REPLACE PROCEDURE outbox_inbox_prune_all(p_retention interval, p_limit integer DEFAULT 1000)
LANGUAGE plpgsql
AS $$
DECLARE
    v_n integer;
BEGIN
    LOOP
        v_n := outbox_inbox_prune(p_retention, p_limit);
        COMMIT;
        EXIT WHEN v_n < p_limit;
    END LOOP;
END
$$;
