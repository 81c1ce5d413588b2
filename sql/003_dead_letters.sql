-- 003_dead_letters.sql -- See and requeue dead-lettered rows. Idempotent.
--
--   SELECT * FROM outbox_dead_letters;               -- what is parked, and why
--   SELECT outbox_requeue(ARRAY[42, 43]);            -- put rows back in line (returns the count)
--   SELECT outbox_requeue(NULL);                     -- requeue every dead-lettered row

-- Finds dead-lettered rows fast without indexing the whole table.
CREATE INDEX IF NOT EXISTS outbox_dead_idx ON outbox (id) WHERE dead_at IS NOT NULL;
-- finish = "mark": retention deletes marked rows by age.
CREATE INDEX IF NOT EXISTS outbox_published_idx ON outbox (published_at) WHERE published_at IS NOT NULL;

CREATE OR REPLACE VIEW outbox_dead_letters AS
    SELECT id, topic, key, octet_length(payload) AS payload_bytes, headers, created_at,
           attempts, last_error, dead_at
      FROM outbox
     WHERE dead_at IS NOT NULL
     ORDER BY id;

-- Requeued rows start over (attempts = 0) and keep last_error for reference until published.
-- Note: a requeued row is older than rows of its key published meanwhile; requeueing trades the
-- key's order for delivery, which is the operator's call.
CREATE OR REPLACE FUNCTION outbox_requeue(p_ids bigint[])
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    UPDATE outbox SET dead_at = NULL, attempts = 0
     WHERE dead_at IS NOT NULL AND (p_ids IS NULL OR id = ANY(p_ids));
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        -- 'requeue': the rows may lie below where the relays' claims start; they look at once.
        PERFORM pg_notify('outbox', 'requeue');
    END IF;
    RETURN n;
END
$$;
