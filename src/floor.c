/* floor.c -- Where a claim starts reading the pending index: the lowest id that can still be pending, raised only once every transaction that could commit a row below it has ended; pure, clock injected. */
#include "floor.h"

#include <string.h>

void floor_init(struct floor *f, usec_t now) {
        memset(f, 0, sizeof(*f));
        f->next_step = now;
        f->next_guard = now + FLOOR_GUARD_INTERVAL;
}

const char *floor_unusable(bool has_sequence, long cache, bool readable) {
        if (!has_sequence)
                return "the id column has no sequence of its own";
        if (cache != 1)
                return "the id sequence hands out several values at a time to each session (CACHE > 1)";
        if (!readable)
                return "no SELECT or USAGE privilege on the id sequence";
        return NULL;
}

enum floor_change floor_step(struct floor *f, const struct floor_look *l, usec_t now) {
        f->next_step = now + FLOOR_STEP_INTERVAL;
        if (f->open && !l->ended)
                return FLOOR_WAITING;
        if (f->open) {
                int64_t at = f->seq_last + 1;

                if (l->lowest > 0 && l->lowest < at)
                        at = l->lowest;
                f->at = at;
        }
        f->open = true;
        f->seq_last = l->seq_last > 0 ? l->seq_last : 0;
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
        f->at = 0;
        f->open = false;
        f->seq_last = 0;
        f->next_step = now + FLOOR_STEP_INTERVAL;
        f->next_guard = now + FLOOR_GUARD_INTERVAL;
}
