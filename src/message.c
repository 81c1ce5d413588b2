/* message.c -- Row to Kafka message mapping and delivery-error classes; pure, no I/O. */
#include "message.h"
#include "utf8.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

enum outcome message_classify(rd_kafka_resp_err_t err) {
        switch (err) {
        case RD_KAFKA_RESP_ERR_NO_ERROR:
                return OUTCOME_OK;

        /* The record itself is unacceptable: no retry can fix it. */
        case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
        case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
        case RD_KAFKA_RESP_ERR_INVALID_RECORD:
        case RD_KAFKA_RESP_ERR_INVALID_MSG:
        case RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP:
        case RD_KAFKA_RESP_ERR_UNSUPPORTED_FOR_MESSAGE_FORMAT:
        /* "Invalid topic": the broker will never accept the name. */
        case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
                return OUTCOME_PERMANENT;

        /* The topic or the cluster refuses us: an operator must act, the rows wait. */
        case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
        case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
        case RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
        case RD_KAFKA_RESP_ERR__AUTHENTICATION:
        case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
        case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
        case RD_KAFKA_RESP_ERR_TOPIC_DELETION_DISABLED:
        case RD_KAFKA_RESP_ERR_INVALID_REQUIRED_ACKS:
        case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:
                return OUTCOME_CONFIG;

        case RD_KAFKA_RESP_ERR__FATAL:
        case RD_KAFKA_RESP_ERR__FENCED:
        case RD_KAFKA_RESP_ERR__GAPLESS_GUARANTEE:
        case RD_KAFKA_RESP_ERR__INCONSISTENT:
                return OUTCOME_FATAL;

        /* Timeouts, purges, transport, leader changes, NOT_ENOUGH_REPLICAS, queue full, …:
         * librdkafka already retried what it could; the batch is retried later. */
        default:
                return OUTCOME_TRANSIENT;
        }
}

enum error_scope message_error_scope(rd_kafka_resp_err_t err) {
        switch (err) {
        /* Broker-side checks fail the request the record travelled in, innocent neighbours
         * included (librdkafka cannot say which record it was). */
        case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
        case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
        case RD_KAFKA_RESP_ERR_INVALID_RECORD:
        case RD_KAFKA_RESP_ERR_INVALID_MSG:
        case RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP:
        case RD_KAFKA_RESP_ERR_UNSUPPORTED_FOR_MESSAGE_FORMAT:
                return SCOPE_REQUEST;
        case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
                return SCOPE_TOPIC;
        default:
                return SCOPE_MESSAGE;
        }
}

int message_client_error_level(rd_kafka_resp_err_t err) {
        switch (err) {
        case RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS:
        case RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE:
        case RD_KAFKA_RESP_ERR_NOT_COORDINATOR:
                return 6; /* LOG_INFO: the producer id is being fetched; librdkafka retries */
        default:
                return 4; /* LOG_WARNING */
        }
}

int message_log_level(int level, const char *fac, const char *text) {
        if (level > 3 && level < 6 && fac && text && strcmp(fac, "GETPID") == 0 &&
            (strstr(text, "Coordinator load in progress") || strstr(text, "Coordinator not available") ||
             strstr(text, "Not coordinator")))
                return 6;
        return level < 3 ? 3 : level;
}

const char *message_topic_invalid(const char *topic) {
        size_t n = 0;

        if (!topic || !*topic)
                return "a topic name must not be empty";
        for (const char *c = topic; *c; c++, n++)
                if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                      *c == '.' || *c == '_' || *c == '-'))
                        return "a topic name may hold only ASCII letters, digits, '.', '_' and '-'";
        if (n > 249)
                return "a topic name may be at most 249 characters long";
        if (strcmp(topic, ".") == 0 || strcmp(topic, "..") == 0)
                return "a topic name cannot be '.' or '..'";
        return NULL;
}

const char *message_row_invalid(const char *headers_error, bool timestamp_known) {
        if (headers_error)
                return headers_error;
        return timestamp_known ? NULL : MESSAGE_TIME_INFINITE;
}

const char *outcome_to_string(enum outcome o) {
        switch (o) {
        case OUTCOME_OK:
                return "ok";
        case OUTCOME_TRANSIENT:
                return "transient";
        case OUTCOME_PERMANENT:
                return "permanent";
        case OUTCOME_CONFIG:
                return "configuration";
        case OUTCOME_FATAL:
                return "fatal";
        }
        return "?";
}

const char *message_source_invalid(const char *source) {
        size_t n = strlen(source), fixed;
        char copy[MESSAGE_SOURCE_MAX + 1];

        if (n == 0)
                return "a source must not be empty";
        if (n > MESSAGE_SOURCE_MAX)
                return "a source may be at most 200 bytes long";
        for (const unsigned char *c = (const unsigned char *)source; *c; c++)
                if (*c < 0x20 || *c == 0x7f || (c[0] == 0xc2 && c[1] >= 0x80 && c[1] < 0xa0))
                        return "a source may hold no control characters";
        memcpy(copy, source, n + 1);
        fixed = utf8_repair(copy);
        if (fixed != n || memcmp(copy, source, n) != 0)
                return "a source must be well-formed UTF-8";
        return NULL;
}

int message_source(const char *configured, const char *database, const char *schema, const char *table,
                   char *buf, size_t size) {
        const char *why;
        int n;

        if (configured && configured[0])
                n = snprintf(buf, size, "%s", configured);
        else
                n = snprintf(buf, size, "%s/%s.%s", database, schema, table);
        if (n < 0 || (size_t)n >= size) {
                snprintf(buf, size, "the source would be longer than %d bytes", MESSAGE_SOURCE_MAX);
                return -EINVAL;
        }
        why = message_source_invalid(buf);
        if (why) {
                snprintf(buf, size, "%s", why);
                return -EINVAL;
        }
        return 0;
}

/* The id in decimal, as "%" PRId64 writes it, into buf (room for 21 bytes); returns its length.
 * snprintf() cost 780 instructions a message, more than the rest of this function. */
static size_t id_text(char *buf, int64_t id) {
        char digits[20];
        uint64_t v = id < 0 ? 0 - (uint64_t)id : (uint64_t)id;
        size_t n = 0, len = 0;

        do {
                digits[n++] = (char)('0' + v % 10);
                v /= 10;
        } while (v);
        if (id < 0)
                buf[len++] = '-';
        while (n)
                buf[len++] = digits[--n];
        return len;
}

int message_headers(const char *buf, size_t len, int64_t id, const char *source, rd_kafka_headers_t **out) {
        rd_kafka_headers_t *h;
        char idbuf[24];
        size_t count = 1;

        *out = NULL;
        for (size_t i = 0; buf && i < len; i++)
                count += buf[i] == 0;
        if (buf && (len == 0 || buf[len - 1] != 0 || count % 2 == 0))
                return -EBADMSG; /* pairs: an even number of NUL-terminated strings */
        h = rd_kafka_headers_new(count / 2 + 2);
        if (!h)
                return -ENOMEM;
        for (size_t i = 0; buf && i < len;) {
                const char *name = buf + i;
                size_t nlen = strlen(name);
                const char *value = name + nlen + 1;
                size_t vlen = strlen(value);

                rd_kafka_header_add(h, name, (ssize_t)nlen, value, (ssize_t)vlen);
                i += nlen + 1 + vlen + 1;
        }
        rd_kafka_header_add(h, MESSAGE_ID_HEADER, -1, idbuf, (ssize_t)id_text(idbuf, id));
        if (source)
                rd_kafka_header_add(h, MESSAGE_SOURCE_HEADER, -1, source, -1);
        *out = h;
        return 0;
}
