/* cycle.h -- One batch's life in steps the loop interleaves with other batches': claim and send what may go, send what waited for earlier batches, then re-send suspects alone, plan, finish; the rules live in batch.c and overlap.c. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "batch.h"
#include "headers.h"
#include "relay.h"
#include "util.h"

/* A probe risks a few rows, not a batch: enough to reach more than one topic, key and partition
 * (one broken partition must not read as "Kafka is down"), and rows spend no attempts when
 * nothing goes through. */
#define CYCLE_PROBE_ROWS 8

enum cycle_state {
        CYCLE_CLAIMING, /* the claim is sent, its rows still to come */
        CYCLE_FLIGHT, /* rows claimed: being sent, reports coming */
        CYCLE_FINISHING, /* planned (every row's fate final), the finish sent */
        CYCLE_DONE, /* committed (or given up): to be freed */
};

struct cycle {
        struct lane *lane; /* the pipeline whose connection holds the batch's transaction */
        enum cycle_state state;
        int64_t start;
        usec_t lock_wait;
        usec_t finish_at;
        struct pg_batch claimed;
        struct batch b;
        struct kafka_delivery *slots; /* librdkafka's opaque per row: its report lands here */
        size_t outstanding; /* reports still to come for this batch */
        uint64_t seen; /* r->kafka.reports when the rows last took in their reports */
        usec_t started, claimed_at;
        usec_t round_at; /* when the current round of sends began (their messages' sent_at) */
        usec_t deadline; /* the whole cycle, finish included */
        usec_t publish_deadline; /* producing and awaiting reports */
        int limit;
        bool probe;
        bool covers; /* took every pending row from its start to its highest id (overlap.h) */
        int64_t proven; /* the claim floor's proven id when it claimed (floor.h) */
        uint64_t floor_epoch; /* and the floor's epoch then (floor_claimed) */
        enum batch_verdict verdict; /* what its plan said about Kafka */
        int64_t highest; /* its highest id */
        char *pairs; /* every row's headers, expanded ("name\0value\0" pairs), one after another */
        struct headers_row *headers; /* per row: its pairs in `pairs`, or why they cannot be sent */
};

/* Sends a claim of up to `limit` rows on the pipeline's connection, from `start` (0: the floor);
 * *out is the batch, CYCLE_CLAIMING until cycle_claimed() reads the rows. A probe (the breaker's
 * half-open batch) claims a few rows and skips the keys earlier probes failed on. `lock_wait`: the
 * longest the claim waits for a lock (0: statement_timeout). 0, or -errno: -ECONNRESET,
 * -ETIMEDOUT, -EIO (database), -ENOMEM. */
int cycle_claim(struct relay *r, struct lane *lane, int limit, bool probe, int64_t start, usec_t lock_wait,
                usec_t now, struct cycle **out);

/* Reads the claim's rows when they have come: -EINPROGRESS before; then the rows claimed (the
 * batch is CYCLE_FLIGHT, nothing sent yet: cycle_send), 0 (nothing claimed, no transaction left
 * open), or -errno: those of cycle_claim(), -EAGAIN (a lock was not had within `lock_wait`: the
 * claim waited for another transaction). A row whose (topic, key) an earlier batch in flight
 * also holds follows that batch's newest (batch_follow). */
int cycle_claimed(struct relay *r, struct cycle *c);

/* Sends every row that may go now; the others wait until the earlier batch's rows of their
 * (topic, key) are in Kafka. */
void cycle_send(struct relay *r, struct cycle *c);

/* Takes in the reports that came, sends what no longer waits (or holds it back for good), and
 * says whether the batch is ready to finish: nothing waits and every report is in, or its
 * publishing time is up. */
bool cycle_ready(struct relay *r, struct cycle *c, usec_t now);

/* Decides at once the rows that waited for a batch just planned (the loop calls it for every
 * later batch: once decided, their rows no longer point into it). */
void cycle_resolve(struct relay *r, struct cycle *c);

/* Purges what is still due past the deadline, re-sends suspects of a broker-side rejection alone,
 * plans the batch and sends its finish (CYCLE_FINISHING). 0, or -errno: -ECONNRESET, -ETIMEDOUT,
 * -EIO (database), -ENOMEM, -ECANCELED (second signal), -ENOTRECOVERABLE (the producer broke, or
 * reports went missing: exit for a restart; c must then not be freed while reports are still
 * due, c->outstanding > 0). *verdict says what the batch told about Kafka (VERDICT_NONE when it
 * was no test of it). On failure the transaction is rolled back. */
int cycle_finish_start(struct relay *r, struct cycle *c, enum batch_verdict *verdict);

/* Reads the finish's outcome when it has come: -EINPROGRESS before; then the rows the batch had
 * (CYCLE_DONE), or -errno (the transaction is gone, every row stays pending). *left_pending
 * whether rows it claimed are still pending (overlap.h). */
int cycle_finished(struct relay *r, struct cycle *c, bool *left_pending);

/* Gives the batch up: rolls back (its rows stay pending) and waits, bounded, for the reports still
 * due. Frees c; when reports are still due after that, it is kept (they would write into it) and
 * the producer is marked broken, so the relay exits. */
void cycle_abandon(struct relay *r, struct cycle *c);

void cycle_free(struct cycle *c);
