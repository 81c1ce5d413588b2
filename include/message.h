/* message.h -- Row to Kafka message mapping and delivery-error classes; pure, no I/O. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#define MESSAGE_ID_HEADER "outbox-id"

/* What a delivery outcome means for the row and for the relay. */
enum outcome {
        OUTCOME_OK,        /* acknowledged: finish the row */
        OUTCOME_TRANSIENT, /* may work later: keep the row, retry the batch later */
        OUTCOME_PERMANENT, /* the row itself can never be delivered: dead-letter it (once isolated) */
        OUTCOME_CONFIG,    /* not the row's fault (authorization, unknown topic): keep it, alert */
        OUTCOME_FATAL,     /* the producer is broken (idempotence lost): stop, exit non-zero */
};

enum outcome message_classify(rd_kafka_resp_err_t err);
const char *outcome_to_string(enum outcome o);

/* Builds the header list for a row: the row's headers as expanded by the claim query
 * ("name\0value\0" pairs, `buf` may be NULL) followed by "outbox-id: <id>". Returns 0, or
 * -EBADMSG when `buf` is not well formed, -ENOMEM. The caller owns *out. */
int message_headers(const char *buf, size_t len, int64_t id, rd_kafka_headers_t **out);
