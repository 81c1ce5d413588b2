/* message.h -- Row to Kafka message mapping and delivery-error classes; pure, no I/O. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#define MESSAGE_ID_HEADER "outbox-id"
#define MESSAGE_SOURCE_HEADER "outbox-source"
#define MESSAGE_SOURCE_MAX 200 /* bytes of a source, its NUL not counted */

/* What a delivery outcome means for the row and for the relay. */
enum outcome {
        OUTCOME_OK, /* acknowledged: finish the row */
        OUTCOME_TRANSIENT, /* may work later: keep the row, retry the batch later */
        OUTCOME_PERMANENT, /* the row itself can never be delivered: dead-letter it (once isolated) */
        OUTCOME_CONFIG, /* not the row's fault (authorization, unknown topic): keep it, alert */
        OUTCOME_FATAL, /* the producer is broken (idempotence lost): stop, exit non-zero */
};

enum outcome message_classify(rd_kafka_resp_err_t err);

/* How far a delivery error reaches beyond the message it was reported for. */
enum error_scope {
        SCOPE_MESSAGE, /* about this message (or a local check of it alone) */
        SCOPE_REQUEST, /* a broker rejected a whole produce request: neighbours fail with it */
        SCOPE_TOPIC, /* about the topic itself (e.g. an invalid name): every row of it */
};
enum error_scope message_error_scope(rd_kafka_resp_err_t err);

/* The syslog level for a client-level error from librdkafka's error callback: transient
 * states every start goes through (the coordinator still loading) are not warnings. */
int message_client_error_level(rd_kafka_resp_err_t err);

/* The level for one of librdkafka's own log lines (level as librdkafka gives it): the
 * transient start-up retries of the producer id (the coordinator still loading, the broker
 * not ready) are information, not warnings; the rest keeps its level. */
int message_log_level(int level, const char *fac, const char *text);

/* Kafka's rule for topic names: 1..249 characters of [a-zA-Z0-9._-], neither "." nor "..".
 * Returns NULL for a legal name, else why not (a static string). */
const char *message_topic_invalid(const char *topic);

/* Why a row whose created_at is infinity or -infinity is dead-lettered (its last_error): a Kafka
 * message's timestamp is milliseconds since the epoch, and no number stands for either. */
#define MESSAGE_TIME_INFINITE "created_at is infinite: a Kafka message needs a finite timestamp"

/* Why a claimed row can never become a message, or NULL: its headers' error (headers.h) first,
 * then an infinite created_at (the claim gives no time for it: timestamp_known false). */
const char *message_row_invalid(const char *headers_error, bool timestamp_known);
const char *outcome_to_string(enum outcome o);

/* relay.source's rule: 1..MESSAGE_SOURCE_MAX bytes of well-formed UTF-8 without control
 * characters (C0, DEL, C1). Returns NULL for a legal source, else why not (a static string). */
const char *message_source_invalid(const char *source);

/* The source the relay sends in the outbox-source header: `configured` unless it is "", else
 * derived from where the table lives, "DATABASE/SCHEMA.TABLE", each part as quote_ident() gives
 * it (the caller passes them so): "shop/public.outbox", and "\"a.b\"/public.outbox" for a
 * database named a.b, so no two tables of one cluster derive the same value. Names survive a
 * restart and a failover to a physical standby (same database, same names); a renamed database
 * or table changes the derived value, which is why it can be configured. A derived value that
 * would break the rule (a name with control characters, longer than MESSAGE_SOURCE_MAX) is an
 * error: the relay cannot start without a source (-EINVAL; `buf` then says why). Writes at most
 * `size` bytes (MESSAGE_SOURCE_MAX + 1 holds every legal source). Returns 0, -EINVAL. */
int message_source(const char *configured, const char *database, const char *schema, const char *table,
                   char *buf, size_t size);

/* Builds the header list for a row: the row's headers as expanded by the claim query
 * ("name\0value\0" pairs, `buf` may be NULL) followed by "outbox-id: <id>" and, when `source`
 * is not NULL, "outbox-source: <source>". Returns 0, or -EBADMSG when `buf` is not well formed,
 * -ENOMEM. The caller owns *out. */
int message_headers(const char *buf, size_t len, int64_t id, const char *source, rd_kafka_headers_t **out);
