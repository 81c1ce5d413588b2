/* share.c -- How competing relays share one table in per-key order: where this relay takes key buckets, how deep it looks, when it claims again; pure, clock free. */
#include "share.h"

#include <string.h>

void share_init(struct share *s) {
        memset(s, 0, sizeof(*s));
        s->members = s->relays = s->own = 1;
}

bool share_update(struct share *s, const int *slots, size_t n, const int *own, size_t n_own,
                  unsigned relays) {
        struct share next = {
                .relays = relays ? relays : 1, .own = (unsigned)n_own, .empty = s->empty, .turn = s->turn
        };
        unsigned without = 0; /* our pipelines without a slot */

        if (n_own > SHARE_PIPELINES_MAX)
                n_own = next.own = SHARE_PIPELINES_MAX;
        for (size_t i = 0; i < n; i++) {
                bool dup = false;

                for (size_t j = 0; j < i; j++)
                        dup = dup || slots[j] == slots[i];
                if (!dup)
                        next.members++;
        }
        for (size_t p = 0; p < n_own; p++) {
                bool seen = false;

                for (size_t i = 0; i < n && own[p] >= 0; i++)
                        seen = seen || slots[i] == own[p];
                if (!seen)
                        next.members++;
        }
        for (size_t p = 0; p < n_own; p++)
                without += own[p] < 0;
        for (unsigned p = 0, later = 0; p < n_own; p++) {
                unsigned rank = 0;

                if (own[p] < 0) {
                        /* No slot: after every member with one, in our own order. */
                        next.rank[p] = next.members - without + later++;
                        continue;
                }
                /* Distinct slots below ours, in the view or ours and missing from it. */
                for (size_t i = 0; i < n; i++) {
                        bool dup = false;

                        for (size_t j = 0; j < i; j++)
                                dup = dup || slots[j] == slots[i];
                        rank += !dup && slots[i] < own[p];
                }
                for (size_t q = 0; q < n_own; q++) {
                        bool seen = false;

                        if (own[q] < 0 || own[q] >= own[p])
                                continue;
                        for (size_t i = 0; i < n; i++)
                                seen = seen || slots[i] == own[q];
                        rank += !seen;
                }
                next.rank[p] = rank;
        }
        if (next.members < next.own)
                next.members = next.own;
        if (next.members == s->members && next.relays == s->relays && next.own == s->own &&
            memcmp(next.rank, s->rank, sizeof(next.rank)) == 0)
                return false;
        *s = next;
        return true;
}

struct share_claim share_claim(const struct share *s, unsigned p, int limit) {
        unsigned members = s->members ? s->members : 1;
        bool alone = members <= s->own || members <= 1;
        /* Sharing, every relay has one batch in flight at most (overlap.c). */
        unsigned relays = s->relays ? s->relays : members;
        unsigned batches = alone ? 1 : 2 * relays + 2, skip_batches = alone ? 1 : relays + 2;
        /* An Rth of the buckets, rounded up (share.h). */
        unsigned buckets = alone ? SHARE_BUCKETS : (SHARE_BUCKETS + relays - 1) / relays;
        unsigned rank = p < SHARE_PIPELINES_MAX ? s->rank[p] : 0;
        unsigned long base = (unsigned long)(rank % members) * SHARE_BUCKETS / members;

        if (batches > SHARE_DEPTH_MAX)
                batches = SHARE_DEPTH_MAX;
        if (skip_batches > SHARE_DEPTH_MAX)
                skip_batches = SHARE_DEPTH_MAX;
        return (struct share_claim){
                .first = (unsigned)((base + (unsigned long)(alone ? 0 : s->turn) * buckets) % SHARE_BUCKETS),
                .depth = limit > 0 ? (int)batches * limit : 1,
                .skip_depth = limit > 0 ? (int)skip_batches * limit : 1,
                .buckets = buckets,
                .alone = alone,
        };
}

struct share_claim share_take(struct share *s, unsigned p, int limit) {
        struct share_claim c = share_claim(s, p, limit);

        s->turn = (s->turn + 1) % SHARE_BUCKETS;
        return c;
}

usec_t share_next_wait(struct share *s, size_t got, size_t in_view, int limit, usec_t poll_interval) {
        usec_t wait = SHARE_BUSY_WAIT;

        if (got > 0) {
                s->empty = 0;
                return (limit > 0 && got >= (size_t)limit) || got < in_view ? 0 : poll_interval;
        }
        if (s->members <= s->own) {
                s->empty = 0;
                return poll_interval;
        }
        for (unsigned i = 0; i < s->empty && wait < poll_interval; i++)
                wait *= 2;
        if (s->empty < 64)
                s->empty++;
        return wait < poll_interval ? wait : poll_interval;
}

usec_t share_look_due(const struct share *s, usec_t looked_at, bool failed, usec_t backlog_at, usec_t now) {
        bool backlog = backlog_at > 0 && now >= backlog_at && now - backlog_at < SHARE_LOOK_INTERVAL;

        if (looked_at == 0)
                return 0;
        return looked_at +
                (s->members <= s->own && backlog && !failed ? SHARE_LOOK_BUSY_INTERVAL : SHARE_LOOK_INTERVAL);
}
