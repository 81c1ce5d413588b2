/* kafka.c -- The idempotent producer: produce with a per-message delivery slot, serve reports, purge. */
#include "kafka.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "message.h"

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
        struct kafka *k = opaque;
        struct kafka_delivery *d = m->_private;

        (void)rk;
        if (d) {
                d->err = m->err;
                d->status = rd_kafka_message_status(m);
                d->partition = m->partition;
                d->reported = true;
                /* librdkafka's own produce()-to-answer time: not delayed by when the loop
                 * gets round to serving the report (and no clock read per message). */
                {
                        int64_t us = rd_kafka_message_latency(m);

                        if (us >= 0) {
                                d->latency = (usec_t)us;
                                d->reported_at = d->sent_at + d->latency;
                        } else {
                                d->reported_at = now_usec();
                                d->latency = d->reported_at - d->sent_at;
                        }
                }
                if (d->outstanding && *d->outstanding)
                        (*d->outstanding)--;
        }
        if (k->pending)
                k->pending--;
        k->reports++;
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
        struct kafka *k = opaque;

        if (err == RD_KAFKA_RESP_ERR__FATAL) {
                char buf[400];

                rd_kafka_fatal_error(rk, buf, sizeof(buf));
                snprintf(k->fatal_reason, sizeof(k->fatal_reason), "%s", buf);
                k->fatal = true;
                return;
        }
        snprintf(k->last_error, sizeof(k->last_error), "%s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err),
                 reason);
        k->last_error_level = message_client_error_level((rd_kafka_resp_err_t)err);
        k->last_error_new = true;
}

/* librdkafka's own log lines (broker state and the like) go to our log at their level; they
 * arrive on librdkafka's threads, and log_msg() writes whole lines. */
static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
        (void)rk;
        log_msg(message_log_level(level, fac, buf), "kafka: %s: %s", fac, buf);
}

int kafka_open(struct kafka *k, rd_kafka_conf_t *conf, char *err, size_t errsz) {
        memset(k, 0, sizeof(*k));
        rd_kafka_conf_set_opaque(conf, k);
        rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
        rd_kafka_conf_set_error_cb(conf, on_error);
        rd_kafka_conf_set_log_cb(conf, on_log);
        k->event_fd[0] = k->event_fd[1] = -1;
        k->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, errsz);
        if (!k->rk)
                return -EIO;
        /* Without the pipe the loop still serves reports, only on its timer. */
        k->main_queue = rd_kafka_queue_get_main(k->rk);
        if (k->main_queue && pipe2(k->event_fd, O_NONBLOCK | O_CLOEXEC) == 0)
                rd_kafka_queue_io_event_enable(k->main_queue, k->event_fd[1], "1", 1);
        else
                k->event_fd[0] = k->event_fd[1] = -1;
        return 0;
}

int kafka_event_fd(const struct kafka *k) {
        return k->event_fd[0];
}

bool kafka_has_events(const struct kafka *k) {
        return k->main_queue && rd_kafka_queue_length(k->main_queue) > 0;
}

void kafka_event_seen(struct kafka *k) {
        char buf[64];

        if (k->event_fd[0] >= 0)
                while (read(k->event_fd[0], buf, sizeof(buf)) > 0)
                        ;
}

void kafka_poll(struct kafka *k, int timeout_ms) {
        if (k->rk)
                rd_kafka_poll(k->rk, timeout_ms);
}

/* A topic seen for the first time: ask for its metadata now, once, rather than wait for
 * librdkafka's once-a-second look-up of unknown topics (its maintainers' advice for this delay).
 * Bounded: one wait of at most KAFKA_TOPIC_WAIT_MS per topic, for at most KAFKA_KNOWN_TOPICS
 * topics, and after a wait that got no answer (Kafka unreachable) no other wait for
 * KAFKA_TOPIC_QUIET: a batch of many new topics during an outage must not hold the loop for
 * a quarter of a second each. A failure only leaves the topic to librdkafka's own look-up.
 * Returns the topic's kept handle, or NULL when none could be kept. */
static rd_kafka_topic_t *know_topic(struct kafka *k, const char *topic) {
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_topic_t *rkt;

        if (k->n_known > 0 && strcmp(rd_kafka_topic_name(k->known[k->last_known]), topic) == 0)
                return k->known[k->last_known];
        for (size_t i = 0; i < k->n_known; i++)
                if (strcmp(rd_kafka_topic_name(k->known[i]), topic) == 0) {
                        k->last_known = i;
                        return k->known[i];
                }
        if (k->n_known >= KAFKA_KNOWN_TOPICS)
                return NULL;
        rkt = rd_kafka_topic_new(k->rk, topic, NULL);
        if (!rkt)
                return NULL;
        if (now_usec() >= k->topic_quiet_until) {
                if (rd_kafka_metadata(k->rk, 0, rkt, &md, KAFKA_TOPIC_WAIT_MS) == RD_KAFKA_RESP_ERR_NO_ERROR)
                        rd_kafka_metadata_destroy(md);
                else
                        k->topic_quiet_until = now_usec() + KAFKA_TOPIC_QUIET;
        }
        k->last_known = k->n_known;
        k->known[k->n_known++] = rkt;
        return rkt;
}

rd_kafka_resp_err_t kafka_produce(struct kafka *k, const char *topic, const void *key, size_t key_len,
                                  const void *payload, size_t payload_len, int64_t timestamp_ms,
                                  rd_kafka_headers_t *headers, struct kafka_delivery *d, size_t *outstanding,
                                  usec_t now) {
        rd_kafka_topic_t *rkt, *own = NULL;
        rd_kafka_resp_err_t e;

        memset(d, 0, sizeof(*d));
        d->partition = RD_KAFKA_PARTITION_UA;
        d->sent_at = now;
        /* By a kept handle: by name, librdkafka looks the topic up in its list under a lock for
         * every message. Beyond the kept topics, a handle for this message, as a name would get. */
        rkt = know_topic(k, topic);
        if (!rkt)
                rkt = own = rd_kafka_topic_new(k->rk, topic, NULL);
        if (!rkt) /* a name librdkafka refuses, or no memory: never "no error" */
                return rd_kafka_last_error() ? rd_kafka_last_error() : RD_KAFKA_RESP_ERR__INVALID_ARG;
        e = rd_kafka_producev(k->rk, RD_KAFKA_V_RKT(rkt), RD_KAFKA_V_KEY(key, key_len),
                              RD_KAFKA_V_VALUE((void *)payload, payload_len), RD_KAFKA_V_MSGFLAGS(0),
                              RD_KAFKA_V_TIMESTAMP(timestamp_ms), RD_KAFKA_V_HEADERS(headers),
                              RD_KAFKA_V_OPAQUE(d), RD_KAFKA_V_END);
        if (own)
                rd_kafka_topic_destroy(own);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
                k->pending++;
                d->outstanding = outstanding;
                if (outstanding)
                        (*outstanding)++;
        }
        return e;
}

void kafka_flush(struct kafka *k, int timeout_ms) {
        if (k->rk)
                rd_kafka_flush(k->rk, timeout_ms);
}

void kafka_purge_begin(struct kafka *k) {
        if (!k->rk)
                return;
        rd_kafka_purge(k->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_poll(k->rk, 0);
}

void kafka_purge(struct kafka *k) {
        usec_t until = now_usec() + 5 * USEC_PER_SEC;

        if (!k->rk)
                return;
        rd_kafka_purge(k->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        while (k->pending && now_usec() < until)
                rd_kafka_poll(k->rk, 50);
}

void kafka_close(struct kafka *k, usec_t timeout) {
        if (!k->rk)
                return;
        rd_kafka_flush(k->rk, (int)(timeout / USEC_PER_MSEC));
        if (rd_kafka_outq_len(k->rk) > 0)
                kafka_purge(k);
        for (size_t i = 0; i < k->n_known; i++)
                rd_kafka_topic_destroy(k->known[i]);
        k->n_known = 0;
        if (k->main_queue) {
                rd_kafka_queue_io_event_enable(k->main_queue, -1, NULL, 0);
                rd_kafka_queue_destroy(k->main_queue);
                k->main_queue = NULL;
        }
        rd_kafka_destroy(k->rk);
        k->rk = NULL;
        for (int i = 0; i < 2; i++)
                if (k->event_fd[i] >= 0)
                        close(k->event_fd[i]);
        k->event_fd[0] = k->event_fd[1] = -1;
}
