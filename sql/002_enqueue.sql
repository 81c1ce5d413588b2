-- 002_enqueue.sql -- Writer helpers: outbox_enqueue() for jsonb, text and bytea payloads.
-- Idempotent. Call inside the transaction that changes the business data; each returns the id.

CREATE OR REPLACE FUNCTION outbox_enqueue(p_topic text, p_key text, p_payload bytea,
                                          p_headers jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    IF p_topic IS NULL OR p_topic = '' THEN
        RAISE EXCEPTION 'outbox_enqueue: topic must not be empty';
    END IF;
    -- Reject at write time what the relay would have to dead-letter later.
    IF p_headers IS NOT NULL THEN
        IF jsonb_typeof(p_headers) <> 'object' THEN
            RAISE EXCEPTION 'outbox_enqueue: headers must be a JSON object (got %)', jsonb_typeof(p_headers);
        END IF;
        IF EXISTS (SELECT 1 FROM jsonb_each(p_headers) e WHERE jsonb_typeof(e.value) <> 'string') THEN
            RAISE EXCEPTION 'outbox_enqueue: every header value must be a string';
        END IF;
        IF p_headers ? 'outbox-id' THEN
            RAISE EXCEPTION 'outbox_enqueue: header ''outbox-id'' is reserved for the relay';
        END IF;
    END IF;
    INSERT INTO outbox (topic, key, payload, headers)
    VALUES (p_topic, p_key, p_payload, p_headers)
    RETURNING id INTO v_id;
    RETURN v_id;
END
$$;

-- jsonb payloads are sent as their compact UTF-8 text.
CREATE OR REPLACE FUNCTION outbox_enqueue(p_topic text, p_key text, p_payload jsonb,
                                          p_headers jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE sql AS $$
    SELECT outbox_enqueue(p_topic, p_key, convert_to(p_payload::text, 'UTF8'), p_headers);
$$;

-- text payloads are sent as their UTF-8 bytes.
CREATE OR REPLACE FUNCTION outbox_enqueue(p_topic text, p_key text, p_payload text,
                                          p_headers jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE sql AS $$
    SELECT outbox_enqueue(p_topic, p_key, convert_to(p_payload, 'UTF8'), p_headers);
$$;
