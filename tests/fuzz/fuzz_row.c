/* fuzz_row.c -- libFuzzer harness: one outbox row's headers, topic and key through the row -> message mapping. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

#include "headers.h"
#include "message.h"

/* The input is split at its first NUL: before it the headers column as PostgreSQL sends a jsonb
 * (any bytes: the column is checked, not trusted), after it a topic name. The headers must be
 * usable (then their pairs build a header list with outbox-id last) or refused with a reason;
 * -ENOMEM is the only other answer. The topic rule must answer for any string. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const uint8_t *nul = memchr(data, 0, size);
        size_t hlen = nul ? (size_t)(nul - data) : size;
        char *json = malloc(hlen + 1), *out = malloc(hlen + 1), *topic;
        char reason[HEADERS_REASON_MAX] = "";
        size_t out_len = 0, tlen = nul ? size - hlen - 1 : 0;
        int ret;

        if (!json || !out)
                abort();
        memcpy(json, data, hlen);
        json[hlen] = 0; /* libpq ends every value with a NUL */
        ret = headers_expand(json, hlen, out, &out_len, reason, sizeof(reason));
        if (ret == 0) {
                rd_kafka_headers_t *h = NULL;

                if (out_len > hlen)
                        abort(); /* the pairs never outgrow the text */
                if (message_headers(out_len ? out : NULL, out_len, (int64_t)size, "fuzz/public.outbox", &h) !=
                    0)
                        abort(); /* what headers_expand wrote, message_headers reads */
                rd_kafka_headers_destroy(h);
        } else if (ret == 1) {
                if (!reason[0] || strlen(reason) >= sizeof(reason))
                        abort();
        } else if (ret != -ENOMEM) {
                abort();
        }
        /* message_headers on raw bytes: well formed or -EBADMSG, nothing else */
        {
                rd_kafka_headers_t *h = NULL;

                ret = message_headers((const char *)data, hlen, -1, "fuzz/public.outbox", &h);
                if (ret == 0)
                        rd_kafka_headers_destroy(h);
                else if (ret != -EBADMSG && ret != -ENOMEM)
                        abort();
        }
        topic = malloc(tlen + 1);
        if (!topic)
                abort();
        memcpy(topic, nul ? nul + 1 : data, tlen);
        topic[tlen] = 0;
        (void)message_topic_invalid(topic);
        headers_quote_literal(topic, reason, sizeof(reason));
        free(topic);
        free(json);
        free(out);
        return 0;
}
