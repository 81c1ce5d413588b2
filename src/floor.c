/* floor.c -- Where a claim starts reading the pending index: the lowest id that can still be pending, raised only once every transaction that could commit a row below it has ended; pure, clock injected. */
#include "floor.h"

#include <string.h>

void floor_init(struct floor *f, usec_t now) {
        memset(f, 0, sizeof(*f));
        f->next_step = f->next_busy_step = now;
        f->next_guard = now + FLOOR_GUARD_INTERVAL;
}

const char *floor_unusable(const struct floor_sequence *s) {
        if (!s->exists)
                return "the id column has no sequence of its own";
        if (s->cache != 1)
                return "the id sequence hands out several values at a time to each session (CACHE > 1)";
        if (s->increment <= 0 || s->min < 1 || s->cycle)
                return "the id sequence does not count upwards from 1 without cycling";
        if (!s->readable)
                return "no SELECT or USAGE privilege on the id sequence";
        return NULL;
}

/* The rule of floor.h: the floor rises to min(lowest pending id, s + 1) where every id <= s that
 * will ever be committed is known to be seen, and never goes down. Returns true when it rose. */
static bool raise_to(struct floor *f, bool any, int64_t lowest, int64_t s) {
        int64_t at = s + 1;

        if (any && lowest < at)
                at = lowest;
        if (at <= 0)
                at = 0; /* ids below 1 (written by hand): no floor */
        if (at <= f->at)
                return false;
        f->at = at;
        return true;
}

enum floor_change floor_step(struct floor *f, const struct floor_look *l, usec_t now) {
        int64_t seq = l->seq_last > 0 ? l->seq_last : 0;

        f->next_step = now + FLOOR_STEP_INTERVAL;
        f->next_busy_step = now + FLOOR_STEP_BUSY_INTERVAL;
        if (f->open && (seq < f->seq_last || l->seq_node != f->seq_node)) {
                floor_reset(f, now);
                return FLOOR_RESET;
        }
        if (f->open && !l->ended)
                return FLOOR_WAITING;
        if (f->open) {
                raise_to(f, l->any, l->lowest, f->seq_last);
                f->proven = f->seq_last;
        }
        f->open = true;
        f->seq_last = seq;
        f->seq_node = l->seq_node;
        return FLOOR_BEGAN;
}

bool floor_guarded(struct floor *f, bool found, usec_t now) {
        f->next_guard = now + FLOOR_GUARD_INTERVAL;
        if (!found)
                return false;
        floor_reset(f, now);
        return true;
}

void floor_reset(struct floor *f, usec_t now) {
        f->epoch++;
        f->at = 0;
        f->proven = 0;
        f->open = false;
        f->seq_last = 0;
        f->seq_node = 0;
        f->next_step = now + FLOOR_STEP_INTERVAL;
        f->next_busy_step = now + FLOOR_STEP_BUSY_INTERVAL;
        f->next_guard = now + FLOOR_GUARD_INTERVAL;
}

void floor_look_failed(struct floor *f, usec_t now) {
        f->next_step = f->next_busy_step = now + FLOOR_STEP_INTERVAL;
}

bool floor_claimed(struct floor *f, int64_t first, int64_t proven, uint64_t epoch) {
        if (epoch != f->epoch || proven <= 0 || first <= 0)
                return false;
        return raise_to(f, true, first, proven);
}

void floor_requeued(struct floor *f, usec_t now) {
        f->epoch++;
        f->proven = 0;
        f->next_guard = now;
}
