/* share.c -- How competing relays share one table in per-key order: this relay's part of the key buckets, and when to claim beyond it; pure, clock injected. */
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

struct share_filter share_next(struct share *s, usec_t now, bool part_short) {
        /* Alone, our part is everything. */
        if (s->relays <= 1) {
                s->rescuing = false;
                return (struct share_filter){ 1, 0 };
        }
        if (now >= s->next_rescue || (part_short && !s->rescuing)) {
                s->next_rescue = now + SHARE_RESCUE_EVERY;
                s->rescuing = true;
                return (struct share_filter){ 1, 0 };
        }
        s->rescuing = false;
        return (struct share_filter){ s->relays, s->rank };
}
