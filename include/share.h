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

/* How deep a claim looks, in batches, at most (whatever the number of relays). */
#define SHARE_DEPTH_MAX 8

struct share {
        unsigned relays; /* live relays on the table, this one included; >= 1 */
        unsigned rank; /* this relay's place among them: 0 .. relays - 1 */
        unsigned empty; /* claims in a row that came back empty while others share the table */
};

/* The next claim: the bucket it tries first (the others follow round from it, each tried once,
 * until the buckets it got cover a batch of the rows it looked at), and how many pending rows
 * it looks at. */
struct share_claim {
        unsigned first;
        int depth;
        bool alone; /* no other relay in view: the claim takes the table's lock, not buckets */
};

void share_init(struct share *s);

/* A new view of the members: the member slots held on the table (each relay holds one session
 * lock), in any order, and this relay's own slot. Relays = how many; rank = how many slots below
 * ours. When our own slot is missing (the view is older than our lock), we count ourselves in.
 * Returns true when the count or our rank changed. */
bool share_update(struct share *s, const int *slots, size_t n, int own);

/* Where the next claim of up to `limit` rows starts and how deep it looks. The relays start
 * evenly spread over the buckets, so they seldom try the same ones. Alone it looks one batch
 * deep; with R relays R + 1 batches (the first rows in view may be the others' open batches,
 * and their buckets' later rows too), at most SHARE_DEPTH_MAX. Alone, it takes the table's lock
 * (exclusive) instead of buckets: there is nobody to leave buckets to, and one lock costs less
 * than one per bucket of the batch; a stale view costs empty claims, never order (pg.c). */
struct share_claim share_claim(const struct share *s, int limit);

/* After a claim that returned `got` of up to `limit` rows, having looked at `in_view` pending
 * rows: how long until the next claim, 0 for at once. A full batch: at once. A short batch that
 * took every row it looked at: the table is drained, wait `poll_interval` (a notification comes
 * sooner). A short batch that left rows it looked at: they are in other relays' open batches,
 * which end within milliseconds, and the rows behind them are free: at once. An empty claim
 * (which says nothing about what it looked at): alone, the table is drained (`poll_interval`);
 * with others, their open batches may hold every row in view: SHARE_BUSY_WAIT, doubling for
 * each empty claim in a row, up to `poll_interval`. */
usec_t share_next_wait(struct share *s, size_t got, size_t in_view, int limit, usec_t poll_interval);
