/* share.h -- How competing relays share one table in per-key order: where this relay takes key buckets, how deep it looks, when it claims again; pure, clock free. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "util.h"

/* Every (topic, key) hashes into one of SHARE_BUCKETS buckets. A claim takes a bucket's
 * transaction-scoped advisory lock before it takes any of its rows, so no two open batches ever
 * hold rows of one (topic, key), and the lock table holds at most SHARE_BUCKETS entries per batch
 * whatever the number of keys. The hash itself runs in SQL (see pg.c). */
#define SHARE_BUCKETS 256

/* After a claim that came back empty while others share the table, the next one comes this
 * soon, then twice as late each time, up to the poll interval: the rows in view may all be in
 * the others' open batches, which end within milliseconds. */
#define SHARE_BUSY_WAIT (2 * USEC_PER_MSEC)

/* How often a relay looks at who else claims from its table (pg_members reads pg_locks), and how
 * often while it is alone and its claims find a backlog. Of relays that start together on a
 * backlog, those that look before the others have joined see no other at first and claim alone,
 * in id order with a plain FOR UPDATE, waiting on the others' rows until their next look shows
 * the others (pg.c). Drains of 1M rows
 * by three relays (at 50 and at 10,000 keys) claimed 92,000-148,000 rows that way with a look a
 * second, and 0-16,000 with a look every 200 ms (docs/ordering.md, "Sharing the work"). */
#define SHARE_LOOK_INTERVAL (1 * USEC_PER_SEC)
#define SHARE_LOOK_BUSY_INTERVAL (200 * USEC_PER_MSEC)
_Static_assert(SHARE_LOOK_BUSY_INTERVAL < SHARE_LOOK_INTERVAL, "alone in a backlog looks more often");

/* How deep a claim looks, in batches, at most (whatever the number of relays). */
#define SHARE_DEPTH_MAX 8

/* A relay's pipelines (relay.pipelines) at most: each is a connection of its own, and a member. */
#define SHARE_PIPELINES_MAX 8

/* Every pipeline of every relay on the table holds a member slot (a session advisory lock on its
 * own connection), and every relay one relay slot besides. */
struct share {
        unsigned members; /* pipelines on the table, ours included; >= own */
        unsigned relays; /* relays on the table, this one included; >= 1 */
        unsigned own; /* this relay's pipelines */
        unsigned rank[SHARE_PIPELINES_MAX]; /* each of ours: its place among all: 0 .. members - 1 */
        unsigned empty; /* claims in a row that came back empty while others share the table */
        unsigned turn; /* claims made (share_take): each starts its buckets further round */
};

/* The next claim: the bucket it tries first (the others follow round from it, each tried once,
 * until it got `buckets` of them), and how many pending rows it looks at. */
struct share_claim {
        unsigned first;
        int depth;
        int skip_depth; /* while something is paused: how many candidates it looks at (R + 2
                         * batches; that claim counts and hashes every one, docs/claim.md) */
        unsigned buckets; /* how many buckets the claim takes at most (1 .. SHARE_BUCKETS) */
        bool alone; /* no other relay's pipeline in view: the claim takes no bucket (pg.c) */
};

/* One relay with one pipeline. */
void share_init(struct share *s);

/* A new view of the members: the member slots held on the table, in any order (`slots`, n), our
 * pipelines' own slots (`own`, n_own; -1 for a pipeline without one), and the relays counted.
 * Members = the slots, ours counted in when the view is older than our locks; each of ours is
 * ranked by how many members' slots are below its own (one without a slot after all the others).
 * Returns true when the counts or a rank changed. */
bool share_update(struct share *s, const int *slots, size_t n, const int *own, size_t n_own, unsigned relays);

/* Where pipeline p's next claim of up to `limit` rows starts, how many buckets it takes and how
 * deep it looks. Sharing with R relays (members when no relay is counted), a claim takes an Rth
 * of the buckets (rounded up), so about an Rth of the rows when keys are many. It takes the free
 * buckets it meets from its start, so while the other relays' open batches hold their shares it
 * takes what they leave, and no relay waits for a slower one to let go of a fixed part. (A
 * (R + 1)th, which left one share free whatever the others held, made every claim read about
 * one batch more of rows for each it took, and drained slower: docs/ordering.md.) The pipelines
 * start evenly spread over the buckets, and each claim (share_take) starts a share further
 * round, so every bucket comes up in turn whatever the others do. The claim looks (2R + 2)
 * batches deep, at most SHARE_DEPTH_MAX: the first rows in view may be the other relays' open
 * batches (one each while they share, overlap.h), and a share holds about an Rth of the rest,
 * often less when keys are few. With nothing paused it counts a batch + 1 of them only and
 * walks no further than it needs to fill its batch (pg.c), so a deeper view costs only where the
 * share is sparse; while something is paused the claim counts and hashes every candidate, and
 * looks R + 2 batches deep (skip_depth). Alone (no pipeline but ours) it takes no bucket at all
 * and looks one batch deep: our own pipelines chain their claims instead (overlap.h), and a
 * stale view costs a wait for the others' rows, never order (pg.c). */
struct share_claim share_claim(const struct share *s, unsigned p, int limit);

/* share_claim() for the claim about to be made: the next one starts further round. */
struct share_claim share_take(struct share *s, unsigned p, int limit);

/* After a claim that returned `got` of up to `limit` rows, having looked at `in_view` pending
 * rows (a count that stops at limit + 1 tells all this needs): how long until the next claim, 0
 * for at once. A full batch: at once. A short batch that took every row it looked at: the table
 * is drained, wait `poll_interval` (a notification comes sooner). A short batch that left rows
 * it looked at: they are in other relays' open batches, which end within milliseconds, or in
 * buckets outside this claim's share, which the next claim (a share further round) takes: at
 * once. An empty claim (which says nothing about what it looked at): alone (no other relay's
 * pipeline), the table is drained (`poll_interval`); with others, their open batches may hold
 * every row in view: SHARE_BUSY_WAIT, doubling for each empty claim in a row, up to
 * `poll_interval`. */
usec_t share_next_wait(struct share *s, size_t got, size_t in_view, int limit, usec_t poll_interval);

/* When the next look at the members is due, the last one having been at `looked_at` (0: none
 * yet, due at once): SHARE_LOOK_INTERVAL after it, or SHARE_LOOK_BUSY_INTERVAL after it while
 * this relay is alone and a claim found a backlog less than SHARE_LOOK_INTERVAL ago
 * (`backlog_at`; 0: never). A look that `failed` waits SHARE_LOOK_INTERVAL, backlog or not, as
 * the floor's does (floor_look_failed): a warning a second is enough. */
usec_t share_look_due(const struct share *s, usec_t looked_at, bool failed, usec_t backlog_at, usec_t now);
