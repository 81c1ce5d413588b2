-- 002_enqueue.sql -- Writer helpers: outbox_enqueue() for jsonb, text and bytea payloads.
-- Idempotent. Call inside the transaction that changes the business data; each returns the id.

CREATE OR REPLACE FUNCTION outbox_enqueue(p_topic text, p_key text, p_payload bytea,
                                          p_headers jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
    v_why text;
BEGIN
    IF p_topic IS NULL OR p_topic = '' THEN
        RAISE EXCEPTION 'outbox_enqueue: topic must not be empty';
    END IF;
    -- Kafka's rule for topic names (the relay dead-letters a row that breaks it). Only this
    -- function checks: rows inserted directly are still accepted, there is no CHECK constraint.
    -- The reasons are the relay's own (message_topic_invalid() in src/message.c).
    v_why := CASE WHEN p_topic !~ '^[A-Za-z0-9._-]+$'
                      THEN 'a topic name may hold only ASCII letters, digits, ''.'', ''_'' and ''-'''
                  WHEN length(p_topic) > 249 THEN 'a topic name may be at most 249 characters long'
                  WHEN p_topic IN ('.', '..') THEN 'a topic name cannot be ''.'' or ''..''' END;
    IF v_why IS NOT NULL THEN
        RAISE EXCEPTION 'outbox_enqueue: topic % is not a legal Kafka topic name: %',
            quote_literal(left(p_topic, 60)) || CASE WHEN length(p_topic) > 60
                THEN format('... (%s characters)', length(p_topic)) ELSE '' END, v_why
            USING ERRCODE = 'invalid_parameter_value';
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
        IF p_headers ? 'outbox-source' THEN
            RAISE EXCEPTION 'outbox_enqueue: header ''outbox-source'' is reserved for the relay';
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
