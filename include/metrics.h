/* metrics.h -- The relay's figures in one place: the loop records them, /metrics, STATUS= and the journal summary read them. */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* Upper bounds (seconds) of every histogram's buckets; +Inf is implicit. From 1 ms (a claim of a
 * few rows) to 5 min (a row that waited out an outage). */
#define METRICS_BOUNDS 16
extern const double metrics_bounds[METRICS_BOUNDS];

/* Topics counted under their own label; the rest share topic="(other)" (a name Kafka refuses,
 * so it meets no real topic). Bounds the series whatever the rows say. */
#define METRICS_TOPICS 64
#define METRICS_OTHER_TOPIC "(other)"

struct histogram {
        uint64_t buckets[METRICS_BOUNDS + 1]; /* per bucket, not cumulative; the last is +Inf */
        uint64_t count;
        double sum;
};

void histogram_observe(struct histogram *h, double seconds);
void histogram_merge(struct histogram *into, const struct histogram *from);

struct metrics_topic {
        char name[256]; /* Kafka allows 249 characters */
        uint64_t published;
};

/* What the loop counted since the start. */
struct metrics_totals {
        uint64_t published;
        uint64_t dead_lettered;
        uint64_t failed; /* row deliveries that failed and will be retried */
        uint64_t held; /* rows not sent because an earlier row of their (topic, key) did not go */
        uint64_t overtaken; /* rows dead-lettered because a later row of their (topic, key) was in Kafka */
        uint64_t batches;
};

enum metrics_transition {
        METRICS_TO_OPEN, /* closed -> open */
        METRICS_TO_HALF_OPEN,
        METRICS_TO_REOPEN, /* half-open -> open: the probe failed */
        METRICS_TO_CLOSED,
        METRICS_TRANSITIONS,
};

/* Everything /metrics shows: a plain value, copied out under the lock. */
struct metrics_data {
        struct metrics_totals totals;
        struct metrics_topic topics[METRICS_TOPICS];
        size_t n_topics;
        uint64_t other_published; /* published to topics past METRICS_TOPICS */
        uint64_t db_reconnects;
        uint64_t transitions[METRICS_TRANSITIONS];

        struct histogram batch_seconds; /* claim to commit */
        struct histogram claim_seconds;
        struct histogram finish_seconds;
        struct histogram delivery_seconds; /* produce() to the delivery report, per message */
        struct histogram end_to_end_seconds; /* created_at to the delivery report, per message */

        bool lag_known; /* the figures below were read (the last status look succeeded) */
        double oldest_pending_age; /* seconds; 0 when nothing is pending */
        int64_t pending_rows; /* exact below 10,000, then an estimate from above (pg_lag) */
        int breaker_state; /* 0 closed, 1 half-open, 2 open */
        size_t paused_topics;
        size_t paused_keys;
        bool db_connected;
        bool producer_ok; /* the producer exists and hit no fatal error */
        const char *ordering; /* "key", "single", "none" */
        unsigned relays; /* ordering = "key": relays on the table, this one included */
        unsigned pipelines; /* ordering = "key": every relay's pipelines on the table; else this one's */
        size_t in_flight; /* batches of this relay claimed and not yet finished */
        unsigned first_bucket; /* ordering = "key": where this relay's claims start */
        bool leader; /* ordering = "single": this relay publishes */
        size_t last_batch_keys; /* distinct (topic, key) pairs of the last batch */
        double start_time; /* seconds since the epoch */
};

struct metrics {
        pthread_mutex_t lock;
        struct metrics_data d; /* written by the loop under the lock, read by copies */
        _Atomic usec_t turn; /* when the loop last served its watchdog (monotonic) */
        atomic_bool exiting; /* the loop has ended, for whatever reason: not ready any more */
};

int metrics_init(struct metrics *m, usec_t start_wall);
void metrics_done(struct metrics *m);

/* A consistent copy for a reader (the HTTP thread, STATUS=). */
void metrics_read(struct metrics *m, struct metrics_data *out);

/* The loop's writes: each takes the lock once. */
struct metrics_batch {
        struct metrics_totals add; /* batches 1 */
        usec_t claim, finish, total;
        struct histogram delivery, end_to_end;
};
void metrics_add_batch(struct metrics *m, const struct metrics_batch *b);
/* Adds n events published to `topic` (called once per run of rows of one topic). */
void metrics_published(struct metrics *m, const char *topic, uint64_t n);
void metrics_transition(struct metrics *m, enum metrics_transition t);
void metrics_reconnected(struct metrics *m);
/* Applies `set` to the data under the lock (gauges: breaker, connection, sharing, lag). */
void metrics_update(struct metrics *m, void (*set)(struct metrics_data *d, void *arg), void *arg);

static inline void metrics_turn(struct metrics *m, usec_t now) {
        atomic_store_explicit(&m->turn, now, memory_order_relaxed);
}

/* What the process costs, read from /proc/self (procstat.c). */
struct metrics_process {
        double cpu_seconds;
        uint64_t resident_bytes;
        uint64_t virtual_bytes;
        int64_t open_fds; /* -1 unknown */
        int64_t max_fds; /* -1 unknown */
        /* What the C allocator has handed out and not taken back (glibc's mallinfo2: in use in
         * its arenas plus the blocks it mapped), the relay's and its libraries' alike. Unlike the
         * resident size it comes back down when memory is freed, so a leak shows in it as growth
         * from one idle moment to the next. 0 when glibc's malloc is not the allocator in use
         * (under a sanitizer or valgrind, which answer mallinfo2 with nothing). */
        uint64_t heap_bytes;
};

struct metrics_build {
        const char *version;
        const char *librdkafka;
        const char *libpq;
};

/* The Prometheus text exposition (version 0.0.4) of d, p and b, in a heap buffer. Pure.
 * Returns 0 or -ENOMEM. */
int metrics_render(const struct metrics_data *d, const struct metrics_process *p,
                   const struct metrics_build *b, char **out, size_t *len);
