/* pause.h -- Sets of names (topics, keys) not to claim until a growing deadline; pure, clock injected. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "util.h"

struct pause_entry {
        char *name;
        usec_t until;
        unsigned strikes; /* pauses in a row: each one lasts twice as long, up to the cap */
};

struct pause_set {
        struct pause_entry *v;
        size_t n;
        usec_t base; /* first pause */
        usec_t cap;  /* longest pause */
        size_t max;  /* most names held (0 = no limit); past it, new names are not paused */
};

void pause_set_init(struct pause_set *s, usec_t base, usec_t cap);
void pause_set_done(struct pause_set *s);

/* Pauses `name` from `now`. Returns the length of the new pause, or 0 if it was already paused
 * (or memory ran out: then it is simply not paused, and will be claimed and fail again). */
usec_t pause_set_add(struct pause_set *s, const char *name, usec_t now);

/* Forgets `name` (it was delivered again), so its next pause starts short. Returns true if it
 * was in the set. */
bool pause_set_forget(struct pause_set *s, const char *name);

bool pause_set_paused(const struct pause_set *s, const char *name, usec_t now);

/* In the set at all, paused now or expired but not yet forgotten. */
bool pause_set_known(const struct pause_set *s, const char *name);

/* Names paused at `now` as a PostgreSQL text[] literal ({"a","b\"c"}); the caller frees it.
 * NULL on allocation failure. */
char *pause_set_literal(const struct pause_set *s, usec_t now);
