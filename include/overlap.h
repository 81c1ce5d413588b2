/* overlap.h -- Several batches in flight at once (relay.pipelines): whether the next claim may come now, and from which id; pure, no I/O. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* While one batch waits for Kafka's acknowledgements the database has nothing to do; a second
 * batch claimed meanwhile on another connection keeps it busy. Which rows may that claim take?
 *
 * - Relays that share the table (ordering = "key" with others in view): each pipeline claims
 *   like a relay of its own, from the floor, and the key buckets' locks keep the open batches'
 *   (topic, key) sequences apart (share.h). Nothing more to decide.
 * - A relay alone on its table (or the one publisher of ordering = "single", or ordering =
 *   "none"): it takes no bucket locks, and a claim from the floor would step over every row the
 *   batches in flight hold (SKIP LOCKED reads each one) or wait for them. So the next claim
 *   starts right after the newest batch's highest id: a chain. That is sound only if the ids
 *   below it can hold no pending row that no batch of the chain took, which holds when every
 *   batch of the chain took every pending row from its start to its highest id (nothing paused,
 *   nothing skipped: a full claim with a plain FOR UPDATE) and that highest id is at most what
 *   the claim floor had proven when it claimed (floor.h: no row with an id up to `proven` can
 *   still commit later). With ordering = "none" nothing is owed to order: a row a chain stepped
 *   over (held by another relay) is taken when the chain starts again from the floor.
 * - Rows of one (topic, key) in two batches of a chain: the later batch sends its rows only once
 *   the earlier batch's rows of that (topic, key) are in Kafka, and never when one of them was
 *   not delivered (batch.h, batch_follow). So the chain keeps per-key order whatever Kafka does.
 *
 * The chain starts again from the floor, once nothing is in flight, after a batch that left rows
 * pending finished (they lie below the chain), after rows were put back in line below the floor,
 * and after OVERLAP_CHAIN_MAX claims (with ordering = "none", rows another relay held are
 * reached no later than that). */
#define OVERLAP_CHAIN_MAX 64

enum overlap_form {
        OVERLAP_WAIT, /* no claim now: let the batches in flight finish first */
        OVERLAP_FLOOR, /* claim from the floor */
        OVERLAP_CHAIN, /* claim from `start`, right after the newest batch of the chain */
};

struct overlap_next {
        enum overlap_form form;
        int64_t start; /* OVERLAP_CHAIN: the first id the claim may take */
};

/* The relay's chain: what it remembers of the claims since nothing was in flight. */
struct overlap {
        unsigned claimed; /* claims since the flight was last empty */
        int64_t end; /* the newest claim's highest id */
        bool chainable; /* the newest claim may be followed from end + 1 */
        bool broken; /* the chain cannot go on: start again from the floor once the flight is empty */
};

/* What the next claim would be. */
struct overlap_rules {
        size_t in_flight; /* batches claimed and not yet finished */
        size_t pipelines; /* at most this many in flight (relay.pipelines) */
        bool sharing; /* ordering = "key" with other relays' pipelines in view: bucket locks, and
                       * one batch in flight (the other relays overlap the database and Kafka) */
        bool serial; /* no overlap now: a breaker probe, paused topics or keys, a stop */
};

void overlap_init(struct overlap *o);

/* Whether and from where the next claim may come. */
struct overlap_next overlap_next(const struct overlap *o, const struct overlap_rules *rules);

/* A claim came back: how many rows of how many asked for, its highest id, whether it took every
 * pending row from its start to there (a plain claim with nothing paused), the floor's proven id
 * when it claimed, and whether order is owed (ordering other than "none"). Empty claims count
 * too: they end the chain (there is nothing to chain to). */
void overlap_claimed(struct overlap *o, size_t got, size_t limit, int64_t highest, bool covers,
                     int64_t proven, bool ordered);

/* A batch finished (or was given up). `left_pending`: rows it claimed are still pending (not
 * sent, failed, or the whole batch when its transaction was lost). `in_flight`: batches still
 * in flight after it. */
void overlap_finished(struct overlap *o, bool left_pending, size_t in_flight);

/* Rows appeared below the chain (put back in line, the floor went back): no chaining until the
 * flight is empty. */
void overlap_break(struct overlap *o);

/* With batches in flight, what the loop knows of the next claim after it tried one. */
struct overlap_pace {
        usec_t now;
        bool stopping; /* a stop was asked: no more claims */
        bool claiming; /* a claim is out: its answer wakes the loop */
        bool held; /* overlap_next() said wait, or no pipeline was free: only a batch that ends
                    * (its finish or its reports wake the loop) can change that */
        bool wake; /* a claim is due at once */
        usec_t next_poll; /* otherwise it is due then */
        usec_t not_before; /* no claim before then (a back-off after an error), 0: none */
};

/* How long the loop may wait in poll() before it tries a claim again: 0 when one may go now,
 * otherwise until it is due, and at most `most` (answers, reports and notifications wake it
 * earlier). A wait of 0 while nothing can change spins the loop: each turn flushed librdkafka,
 * which wakes its broker thread, hundreds of times a batch. */
usec_t overlap_pace(const struct overlap_pace *p, usec_t most);
