/* share.c -- How competing relays share one table in per-key order: where this relay takes key buckets, how deep it looks, when it claims again; pure, clock free. */
#include "share.h"

#include <string.h>

void share_init(struct share *s) {
        memset(s, 0, sizeof(*s));
        s->relays = 1;
}

bool share_update(struct share *s, const int *slots, size_t n, int own) {
        unsigned relays = 0, rank = 0;
        bool seen = false;

        for (size_t i = 0; i < n; i++) {
                bool dup = false;

                for (size_t j = 0; j < i; j++)
                        dup = dup || slots[j] == slots[i];
                if (dup)
                        continue;
                relays++;
                if (slots[i] == own)
                        seen = true;
                else if (slots[i] < own)
                        rank++;
        }
        if (!seen)
                relays++;
        if (relays == s->relays && rank == s->rank)
                return false;
        s->relays = relays;
        s->rank = rank;
        return true;
}

struct share_claim share_claim(const struct share *s, int limit) {
        unsigned relays = s->relays ? s->relays : 1;
        unsigned batches = relays <= 1 ? 1 : relays + 1;

        if (batches > SHARE_DEPTH_MAX)
                batches = SHARE_DEPTH_MAX;
        return (struct share_claim){
                .first = (unsigned)((unsigned long)(s->rank % relays) * SHARE_BUCKETS / relays),
                .depth = limit > 0 ? (int)batches * limit : 1,
                .alone = relays <= 1,
        };
}

usec_t share_next_wait(struct share *s, size_t got, size_t in_view, int limit, usec_t poll_interval) {
        usec_t wait = SHARE_BUSY_WAIT;

        if (got > 0) {
                s->empty = 0;
                return (limit > 0 && got >= (size_t)limit) || got < in_view ? 0 : poll_interval;
        }
        if (s->relays <= 1) {
                s->empty = 0;
                return poll_interval;
        }
        for (unsigned i = 0; i < s->empty && wait < poll_interval; i++)
                wait *= 2;
        if (s->empty < 64)
                s->empty++;
        return wait < poll_interval ? wait : poll_interval;
}
