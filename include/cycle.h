/* cycle.h -- One batch's life in steps the loop interleaves with other batches': claim and send what may go, send what waited for earlier batches, then re-send suspects alone, plan, finish; the rules live in batch.c and overlap.c. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "batch.h"
#include "relay.h"
#include "util.h"

/* A probe risks a few rows, not a batch: enough to reach more than one topic, key and partition
 * (one broken partition must not read as "Kafka is down"), and rows spend no attempts when
 * nothing goes through. */
#define CYCLE_PROBE_ROWS 8

struct cycle {
        struct lane *lane; /* the pipeline whose connection holds the batch's transaction */
        struct pg_batch claimed;
        struct batch b;
        struct kafka_delivery *slots; /* librdkafka's opaque per row: its report lands here */
        size_t outstanding; /* reports still to come for this batch */
        uint64_t seen; /* r->kafka.reports when the rows last took in their reports */
        usec_t started, claimed_at;
        usec_t deadline; /* the whole cycle, finish included */
        usec_t publish_deadline; /* producing and awaiting reports */
        int limit;
        bool probe;
        bool locked; /* claimed with key buckets' locks (relays share the table) */
        bool covers; /* took every pending row from its start to its highest id (overlap.h) */
        int64_t highest; /* its highest id */
        char *pairs; /* every row's headers, expanded ("name\0value\0" pairs), one after another */
        struct cycle_headers {
                size_t at, len; /* the row's pairs in `pairs`; len 0: none */
                char *error; /* why its headers cannot be sent (headers.h), or NULL */
        } * headers;
};

/* Claims up to `limit` rows on the pipeline's connection, from `start` (0: the floor), and sends
 * every row that may go now; a row whose (topic, key) an earlier batch in flight also holds waits
 * until that batch's rows of it are in Kafka (batch_follow). A probe (the breaker's half-open
 * batch) claims a few rows and skips the keys earlier probes failed on. Returns the rows claimed
 * with *out set (0: nothing claimed, *out NULL, no transaction left open), or -errno: -ECONNRESET,
 * -ETIMEDOUT, -EIO (database), -ENOMEM, -EAGAIN (a lock was not had within `lock_wait`, 0 = no
 * bound but statement_timeout: the claim waited for another transaction). */
int cycle_start(struct relay *r, struct lane *lane, int limit, bool probe, int64_t start, usec_t lock_wait,
                usec_t now, struct cycle **out);

/* Takes in the reports that came, sends what no longer waits (or holds it back for good), and
 * says whether the batch is ready to finish: nothing waits and every report is in, or its
 * publishing time is up. */
bool cycle_ready(struct relay *r, struct cycle *c, usec_t now);

/* Decides at once the rows that waited for a batch just finished (the loop calls it for every
 * later batch before freeing that one: their rows point into it). */
void cycle_resolve(struct relay *r, struct cycle *c);

/* Purges what is still due past the deadline, re-sends suspects of a broker-side rejection alone,
 * plans and finishes the batch in its transaction. Returns the rows it had, or -errno:
 * -ECONNRESET, -ETIMEDOUT, -EIO (database), -ENOMEM, -ECANCELED (second signal),
 * -ENOTRECOVERABLE (the producer broke, or reports went missing: exit for a restart; c must then
 * not be freed while reports are still due, c->outstanding > 0). *verdict says what the batch
 * told about Kafka (VERDICT_NONE when it was no test of it); *left_pending whether rows it claimed
 * are still pending (overlap.h). On failure the transaction is rolled back. Does not free c. */
int cycle_finish(struct relay *r, struct cycle *c, enum batch_verdict *verdict, bool *left_pending);

/* Gives the batch up: rolls back (its rows stay pending) and waits, bounded, for the reports still
 * due. Frees c; when reports are still due after that, it is kept (they would write into it) and
 * the producer is marked broken, so the relay exits. */
void cycle_abandon(struct relay *r, struct cycle *c);

void cycle_free(struct cycle *c);
