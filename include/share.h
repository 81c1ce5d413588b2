/* share.h -- How competing relays share one table in per-key order: this relay's part of the key buckets, and when to claim beyond it; pure, clock injected. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "util.h"

/* Every (topic, key) hashes into one of SHARE_BUCKETS buckets. A claim takes a bucket's
 * transaction-scoped advisory lock before it takes any of its rows, so no two open batches ever
 * hold rows of one (topic, key), and the lock table holds at most SHARE_BUCKETS entries per batch
 * whatever the number of keys. The hash itself runs in SQL (see pg.c). */
#define SHARE_BUCKETS 256

/* How often a relay claims beyond its part, so the part of a relay that is alive but stuck
 * (frozen, or its session kept by a silent network) is never left alone for longer. */
#define SHARE_RESCUE_EVERY (1 * USEC_PER_SEC)

/* The buckets a claim may lock: those whose number is `residue` modulo `modulus`
 * (modulus 1: all). */
struct share_filter {
        unsigned modulus;
        unsigned residue;
};

struct share {
        unsigned relays; /* live relays on the table, this one included; >= 1 */
        unsigned rank; /* this relay's place among them: 0 .. relays - 1 */
        usec_t next_rescue;
        bool rescuing; /* the filter handed out last covered every bucket */
};

void share_init(struct share *s);

/* A new view of the members: the member slots held on the table (each relay holds one session
 * lock), in any order, and this relay's own slot. Relays = how many; rank = how many slots below
 * ours. When our own slot is missing (the view is older than our lock), we count ourselves in.
 * Returns true when the part changed. */
bool share_update(struct share *s, const int *slots, size_t n, int own);

/* The filter for the next claim at `now`: our part of the buckets, or all of them for a rescue:
 * once every SHARE_RESCUE_EVERY, and whenever our own part came back short of a full batch (`part_short`) while
 * others may still have rows — a relay with nothing of its own to do helps with the rest. */
struct share_filter share_next(struct share *s, usec_t now, bool part_short);
