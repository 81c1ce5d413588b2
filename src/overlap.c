/* overlap.c -- Several batches in flight at once (relay.pipelines): whether the next claim may come now, and from which id; pure, no I/O. */
#include "overlap.h"

#include <string.h>

void overlap_init(struct overlap *o) {
        memset(o, 0, sizeof(*o));
}

struct overlap_next overlap_next(const struct overlap *o, const struct overlap_rules *rules) {
        const struct overlap_next wait = { OVERLAP_WAIT, 0 };

        if (rules->in_flight == 0)
                return (struct overlap_next){ OVERLAP_FLOOR, 0 };
        if (rules->in_flight >= rules->pipelines || rules->serial)
                return wait;
        /* Sharing the table, the relays' batches overlap one another: a second batch of ours
         * would only make every claim look deeper (share.c) to find free buckets. Three relays
         * drained 1.17-1.39x faster with one batch each than with two (docs/ordering.md). */
        if (rules->sharing)
                return wait;
        if (o->broken || !o->chainable || o->claimed >= OVERLAP_CHAIN_MAX)
                return wait;
        return (struct overlap_next){ OVERLAP_CHAIN, o->end + 1 };
}

void overlap_claimed(struct overlap *o, size_t got, size_t limit, int64_t highest, bool covers,
                     int64_t proven, bool ordered) {
        o->claimed++;
        if (got == 0) {
                o->chainable = false;
                return;
        }
        o->end = highest;
        /* A short claim reached the end of what is pending: rows that come later are for a
         * claim from the floor. */
        o->chainable = got >= limit && covers && (!ordered || (proven > 0 && highest <= proven));
}

void overlap_finished(struct overlap *o, bool left_pending, size_t in_flight) {
        if (in_flight == 0) {
                /* Nothing in flight: the next claim starts from the floor anyway. */
                overlap_init(o);
                return;
        }
        if (left_pending)
                o->broken = true;
}

void overlap_break(struct overlap *o) {
        o->broken = true;
}

usec_t overlap_pace(const struct overlap_pace *p, usec_t most) {
        usec_t due;

        if (p->stopping || p->claiming || p->held)
                return most;
        due = p->wake ? p->now : p->next_poll;
        if (p->not_before > due)
                due = p->not_before;
        if (due <= p->now)
                return 0;
        return due - p->now < most ? due - p->now : most;
}
