/* kafka.h -- The idempotent producer: produce with a per-message delivery slot, serve reports, purge. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "util.h"

/* Where a message's delivery report lands. The caller keeps it alive until reported. */
struct kafka_delivery {
        rd_kafka_resp_err_t err;
        rd_kafka_msg_status_t status;
        int32_t partition; /* where it went, or RD_KAFKA_PARTITION_UA if it never got one */
        bool reported;
        usec_t sent_at; /* when produce() took it (monotonic) */
        usec_t reported_at; /* when its report was served */
        usec_t latency; /* produce() to the broker's answer, as librdkafka measured it */
        size_t *outstanding; /* the batch's count of reports still to come: one less when it lands */
};

/* Topics whose metadata the producer asked for up front (kafka_produce), at most this many. */
#define KAFKA_KNOWN_TOPICS 256
#define KAFKA_TOPIC_WAIT_MS 250
#define KAFKA_TOPIC_QUIET (10 * USEC_PER_SEC)

struct kafka {
        rd_kafka_t *rk;
        rd_kafka_topic_t *known[KAFKA_KNOWN_TOPICS];
        size_t n_known, last_known;
        usec_t topic_quiet_until; /* no metadata waits before this (the last one got no answer) */
        size_t pending; /* delivery reports still to come, of every batch */
        uint64_t reports; /* delivery reports served so far: a change means some batch moved */
        bool fatal; /* the producer hit a fatal error: stop and let systemd restart */
        char fatal_reason[512];
        char last_error[512]; /* newest client-level error (e.g. all brokers down), for logs */
        int last_error_level; /* its syslog level */
        bool last_error_new;
        /* Readable when librdkafka has reports or errors to serve (its main queue's io event):
         * the loop polls it beside the database sockets. */
        int event_fd[2];
        rd_kafka_queue_t *main_queue;
};

/* Creates the producer from `conf` (taken on success only, as rd_kafka_new() does). */
int kafka_open(struct kafka *k, rd_kafka_conf_t *conf, char *err, size_t errsz);

/* Flushes for at most `timeout`, purges what is left, destroys the producer. */
void kafka_close(struct kafka *k, usec_t timeout);

/* Enqueues one message; `d` receives its delivery report, and `*outstanding` (the batch's own
 * count, may be NULL) goes up by one now and down by one when it lands. `headers` is taken on
 * success. The payload is not copied: it must stay where it is until the report came (the
 * batch's result from PostgreSQL does). `now`: the monotonic clock, read by the caller once for
 * many messages.
 * Returns the librdkafka error code (0 = enqueued); RD_KAFKA_RESP_ERR__QUEUE_FULL is
 * back-pressure for the caller to handle (serve reports, then try again). Waits only the first
 * time a topic is seen, up to KAFKA_TOPIC_WAIT_MS, for its metadata: librdkafka otherwise looks
 * unknown topics up once a second, and the first batch to a topic waited that long. */
rd_kafka_resp_err_t kafka_produce(struct kafka *k, const char *topic, const void *key, size_t key_len,
                                  const void *payload, size_t payload_len, int64_t timestamp_ms,
                                  rd_kafka_headers_t *headers, struct kafka_delivery *d, size_t *outstanding,
                                  usec_t now);

/* The file descriptor that turns readable when there is something to serve (kafka_poll), -1
 * without; and whether something is queued now. librdkafka writes to it when its queue stops
 * being empty: once poll() says it is readable, kafka_event_seen() reads it empty, before the
 * queue is served (so an event that comes meanwhile makes it readable again). Only then: a read
 * on every turn of the loop cost a system call per turn. */
int kafka_event_fd(const struct kafka *k);
void kafka_event_seen(struct kafka *k);
bool kafka_has_events(const struct kafka *k);

/* Serves delivery reports and client errors for up to timeout_ms. */
void kafka_poll(struct kafka *k, int timeout_ms);

/* Serves reports like kafka_poll(), but sends what linger.ms still holds back at once: the
 * batch is complete, waiting for more messages would only add latency. */
void kafka_flush(struct kafka *k, int timeout_ms);

/* Purges queued and in-flight messages; their reports follow through kafka_poll(). */
void kafka_purge_begin(struct kafka *k);

/* Purges queued and in-flight messages and collects their reports (bounded, 5 s). */
void kafka_purge(struct kafka *k);
