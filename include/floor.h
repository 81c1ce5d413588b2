/* floor.h -- Where a claim starts reading the pending index: the lowest id that can still be pending, raised only once every transaction that could commit a row below it has ended; pure, clock injected. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "util.h"

/* Finished rows leave their entries at the head of the pending index until vacuum removes them,
 * and a claim that reads the index from its start steps over every one (with 900k of 1M rows
 * deleted and not yet vacuumed, a 1000-row claim took 526 ms instead of 3 ms). A claim that
 * starts at the floor descends straight to the first row that can still be pending.
 *
 * The rule. A step begins by reading the id sequence's last value S, then the transactions
 * running (their virtual ids). It ends at a later look (a second later, 200 ms while the claims
 * find a backlog) once every one of them has ended;
 * then, in a snapshot taken after that, the floor becomes the lower of the lowest pending id and
 * S + 1. Why no row below it can still appear: a row with an id <= S took it before S was read,
 * so its transaction was running then (listed, and since ended: its row is committed and seen, or
 * gone) or had already ended (committed before the snapshot: seen). It holds while ids come from
 * the column's sequence, with CACHE 1, in the transaction that inserts the row (an identity or
 * bigserial column does this); pg.c checks the cache and leaves the floor at 0 otherwise.
 *
 * Between looks a sharing claim may raise the floor by the same rule, with its own snapshot in
 * place of the look's (floor_claimed).
 *
 * Rows can still turn pending below the floor by hand: a dead letter put back, or ids written
 * explicitly. The guard looks below the floor now and then and, if it finds one, the floor goes
 * back to 0, so such a row waits at most FLOOR_GUARD_INTERVAL. */
#define FLOOR_STEP_INTERVAL (1 * USEC_PER_SEC)
/* While a backlog waits on the floor, a look every 200 ms (floor_busy). Relays that share the
 * table in key order start every claim at the floor, and a drain moves some 150,000 rows a second
 * past it: with a look a second each claim stepped over a second's finished rows or more, twice
 * (the head's count and the walk): steps of 130,000-190,000 ids against 36,000-45,000
 * (docs/ordering.md, "The floor under the sharing claims"). A relay alone in key order overlaps
 * its batches only below the ids a step has proven. */
#define FLOOR_STEP_BUSY_INTERVAL (200 * USEC_PER_MSEC)
_Static_assert(FLOOR_STEP_BUSY_INTERVAL < FLOOR_STEP_INTERVAL, "a backlog looks more often");
#define FLOOR_GUARD_INTERVAL (30 * USEC_PER_SEC)

struct floor {
        int64_t at; /* claims read ids >= at; 0: the whole index */
        /* The S of the last step that ended: a snapshot taken after that look sees every row
         * with an id <= proven that will ever be committed (no transaction that could still
         * commit one is running). 0 when nothing is proven (no step ended since the last reset,
         * or rows were put back in line by hand). Lets batches overlap (overlap.h): a claim
         * whose highest id is <= proven took every pending row of its range. */
        int64_t proven;
        bool open; /* a step has begun and waits for its transactions to end */
        int64_t seq_last; /* the sequence's last value when it began */
        int64_t seq_node; /* and its relfilenode */
        usec_t next_step, next_guard;
        usec_t next_busy_step; /* the next look while the claims find a backlog */
        /* Counts the resets and the rows put back in line: a claim sent before one of them
         * says nothing about the floor after it (floor_claimed). */
        uint64_t epoch;
};

/* What one look read, in this order (pg_floor_look): whether the open step's transactions have
 * all ended (meaningless when no step is open); whether a row is pending at or above the floor
 * (`any`) and the lowest such id; the sequence's last value now, which begins the next step (the
 * caller keeps the transactions read after it when floor_step says a step began). */
struct floor_look {
        bool ended;
        bool any;
        int64_t lowest;
        int64_t seq_last;
        int64_t seq_node; /* the sequence's relfilenode: a RESTART gives it a new one */
};

enum floor_change {
        FLOOR_WAITING, /* the open step's transactions are still running: keep its list */
        FLOOR_BEGAN, /* a new step began (the floor may have risen): keep the new list */
        FLOOR_RESET, /* the sequence went back (TRUNCATE ... RESTART IDENTITY, setval, a standby
                      * promoted behind the old primary): the floor is 0 again, drop the list */
};

void floor_init(struct floor *f, usec_t now);

/* Whether the table's ids allow a floor: the id column has a sequence of its own, handing out
 * one value at a time (CACHE 1), upwards from 1 (INCREMENT > 0, MINVALUE >= 1, NO CYCLE), that
 * the relay may read. NULL when they do; otherwise why not, for the log. Checked on connect and
 * at every look (an ALTER SEQUENCE may change it any time). */
struct floor_sequence {
        bool exists;
        long cache;
        long long increment, min;
        bool cycle;
        bool readable;
};
const char *floor_unusable(const struct floor_sequence *s);

/* Whether the floor looks every FLOOR_STEP_BUSY_INTERVAL. Only within FLOOR_STEP_INTERVAL of the
 * last claim that left rows to claim at once (`backlog_at`, 0: none yet), so an idle table, an
 * open breaker or a lost connection goes back to a look a second by itself; and only for a relay
 * whose claims wait on the floor:
 * - one that shares the table in key order (`sharing`): its every claim starts at the floor;
 * - one in key order alone (`ordered`: "key" or "single") whose newest claim reached past the ids
 *   the floor has proven (`chain_end` > f->proven): a batch may be followed while in flight only
 *   if its ids were proven when it was claimed (overlap.h), so its claims overlap again only once
 *   a step has caught up. With a look a second a relay alone draining 1M rows had 1.550-1.649
 *   batches in flight on average, against 1.788-1.849 with a look every 200 ms and 1.842-1.864
 *   with "none" (docs/claim.md, "The floor of a relay alone").
 * A relay with "none" chains its batches without the floor, and one whose chain is proven starts
 * at the floor only when its chain starts again: a look a second, as it reads pg_locks. */
static inline bool floor_busy(const struct floor *f, bool sharing, bool ordered, int64_t chain_end,
                              usec_t backlog_at, usec_t now) {
        if (backlog_at <= 0 || now < backlog_at || now - backlog_at >= FLOOR_STEP_INTERVAL)
                return false;
        return sharing || (ordered && chain_end > f->proven);
}

/* A look is due: every FLOOR_STEP_INTERVAL, or every FLOOR_STEP_BUSY_INTERVAL while `backlog`
 * (floor_busy). */
static inline bool floor_step_due(const struct floor *f, usec_t now, bool backlog) {
        return now >= (backlog ? f->next_busy_step : f->next_step);
}

/* A look failed: nothing changes but when the next is due (FLOOR_STEP_INTERVAL, backlog or not). */
void floor_look_failed(struct floor *f, usec_t now);

/* One look's outcome. The look moves the floor only when a step ends, up to min(lowest, its
 * S + 1), never down: a sequence that went back (its S lower than the open step's, or restarted:
 * a new relfilenode) sends it to 0 instead, as every id it hands out from then on may lie below
 * the floor. (A setval() back that the sequence passes again within a look's second is not seen:
 * the guard finds its rows.) */
enum floor_change floor_step(struct floor *f, const struct floor_look *l, usec_t now);

/* The guard is due (never while the floor is 0: there is nothing below it). */
static inline bool floor_guard_due(const struct floor *f, usec_t now) {
        return f->at > 0 && now >= f->next_guard;
}

/* The guard looked below the floor; `found`: a pending row is there. Returns true when the
 * floor went back to 0 (and the open step, if any, was dropped). */
bool floor_guarded(struct floor *f, bool found, usec_t now);

/* Back to 0, no step open: the floor is not known to be safe (e.g. a look failed half way). */
void floor_reset(struct floor *f, usec_t now);

/* A sharing claim's head came back: `first`, the lowest pending id at or above the floor in its
 * snapshot, taken after the look that proved `proven` (the floor's proven id when it was sent,
 * `epoch` its epoch then). No row from the floor up to `first` was pending in that snapshot, and
 * every row with an id <= proven that will ever be committed was in it, so the floor may rise to
 * the lower of `first` and proven + 1, as a look's step would take it. Nothing when the floor
 * was reset, or the relay heard of rows put back in line, after the claim was sent, or when
 * nothing was proven. (Rows put back that the relay has not heard of yet: as after a look, the
 * guard looks below the floor as soon as it hears.) Returns true when the floor rose. */
bool floor_claimed(struct floor *f, int64_t first, int64_t proven, uint64_t epoch);

/* Rows were put back in line below the floor (outbox_requeue's notification): nothing is proven
 * any more, and the guard is due now. The floor itself stays until the guard has looked. */
void floor_requeued(struct floor *f, usec_t now);
