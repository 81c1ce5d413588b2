/* relay.h -- The relay loop: claim -> publish -> finish, wake on NOTIFY, reconnect, drain on stop. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "backoff.h"
#include "breaker.h"
#include "config.h"
#include "floor.h"
#include "http.h"
#include "kafka.h"
#include "metrics.h"
#include "notify.h"
#include "overlap.h"
#include "pause.h"
#include "pg.h"
#include "probe.h"
#include "share.h"
#include "signals.h"

enum relay_state {
        RELAY_CONNECTING, /* no database connection; reconnecting with backoff */
        RELAY_IDLE, /* waiting for NOTIFY or the poll interval */
        RELAY_BACKOFF, /* the last batch failed transiently; waiting before the next */
};

/* One pipeline (relay.pipelines): a connection whose transactions are batches, one at a time. */
struct lane {
        struct pg pg;
        unsigned index; /* 0 .. pipelines - 1 */
        bool busy; /* a batch of it is in flight */
};

struct cycle;

struct relay {
        struct relay_config *cfg; /* owned; replaced on reload */
        struct signal_flags *sig;
        /* The relay's own connection: LISTEN, the claim floor's and the status looks, the members,
         * retention, the leader lock. Never in a transaction. */
        struct pg pg;
        struct lane lanes[SHARE_PIPELINES_MAX];
        unsigned n_lanes;
        bool schema_said; /* what the table runs without was logged */
        char source[MESSAGE_SOURCE_MAX + 1]; /* the outbox-source header of every message */
        /* The batches in flight, oldest first (each on its own lane), and how the next claim may
         * follow them (overlap.h). */
        struct cycle *flight[2 * SHARE_PIPELINES_MAX]; /* active ones, and done ones a claim may follow */
        size_t n_flight;
        struct overlap overlap;
        struct kafka kafka;
        struct notifier notifier;
        struct rng rng;
        struct backoff db_backoff;
        struct backoff batch_backoff;
        struct breaker breaker;

        enum relay_state state;
        bool wake; /* claim at once: notification or a full batch */
        bool claim_held; /* the last claim_more() waited for a batch in flight to end */
        usec_t next_poll; /* claim by then even without a notification */
        usec_t retry_at; /* no reconnect / no claim before then */
        usec_t stop_at; /* when the stop was requested, 0 = not yet */
        usec_t next_summary;
        usec_t next_status;
        usec_t status_at; /* when STATUS was last computed */
        uint64_t status_published; /* published total then */
        usec_t next_retention;
        bool ready_sent;
        bool leader; /* ordering = "single": this relay holds the table's leader lock */
        bool standby_said; /* the standby state was logged */
        usec_t next_leader_try;

        /* Topics Kafka takes nothing of while it takes other topics (unknown, not
         * authorized), and keys whose partition takes nothing while the topic's other
         * partitions do: not claimed for a growing while, so they do not block the rest. */
        struct pause_set paused_topics;
        struct pause_set paused_keys;
        /* (topic, key) pairs a failed probe tried: the next probe tests others, so one broken
         * partition does not keep the breaker open. Forgotten when the breaker closes. */
        struct pause_set probe_keys;

        /* ordering = "key": how this relay shares the table with the others (share.c). */
        struct share share;
        usec_t members_looked_at; /* the last look at the members (share_look_due); 0: look now */
        bool members_look_failed; /* and it failed */
        bool pooler_said; /* the lost session lock was logged */
        size_t last_keys; /* distinct (topic, key) pairs of the last batch */
        size_t last_in_view; /* ordering = "key": the pending rows the last claim looked at (pg.h) */
        int last_got; /* rows the last claim took (-1: none yet) */
        usec_t backlog_at; /* when a claim last left rows to claim at once (floor_busy), 0: never */

        /* Where the claims start reading the pending index (floor.c), and the transactions the
         * open step waits for (as pg_floor_look gave them). */
        struct floor floor;
        char *floor_running;
        bool floor_said; /* why there is no floor was logged */
        bool floor_requeued; /* the guard is due because rows were put back with outbox_requeue */

        /* The figures (metrics.h): the loop writes them, STATUS=, the summary and /metrics read
         * them. The loop is their only writer, so it reads metrics.d without the lock. */
        struct metrics metrics;
        struct metrics_totals last_summary;
        struct http_server http;
        struct probe_source probe; /* what the HTTP thread reads */
};

/* Prepares the context and takes ownership of the heap-allocated cfg (also on failure);
 * does not connect. */
int relay_init(struct relay *r, struct relay_config *cfg, struct signal_flags *sig);

/* Runs until stopped. Returns 0 after a clean drain, -ECANCELED after a second signal,
 * -ENOTRECOVERABLE after a fatal producer error, -ENOPKG when the table lacks a migration at
 * start (said in the log), other -errno on setup failure. */
int relay_run(struct relay *r);

void relay_done(struct relay *r);

/* For the batch cycle (cycle.c): serves the watchdog and announces a stop request; called
 * wherever a batch waits. */
void relay_serve(struct relay *r);

/* The deadline a batch must keep: `deadline`, shortened to the drain timeout once stopping. */
usec_t relay_deadline(const struct relay *r, usec_t deadline);
