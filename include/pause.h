/* pause.h -- Sets of topics or (topic, key) pairs not to claim until a growing deadline; pure, clock injected. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "util.h"

struct pause_entry {
        char *topic;
        char *key; /* NULL in a set of whole topics */
        usec_t until;
        unsigned strikes; /* pauses in a row: each one lasts twice as long, up to the cap */
};

struct pause_set {
        struct pause_entry *v;
        size_t n;
        usec_t base; /* first pause */
        usec_t cap; /* longest pause */
        size_t max; /* most entries held (0 = no limit); past it, new ones are not paused */
};

void pause_set_init(struct pause_set *s, usec_t base, usec_t cap);
void pause_set_done(struct pause_set *s);

/* Pauses `topic` (key NULL) or the pair (topic, key) from `now`. Returns the length of the new
 * pause, or 0 if it was already paused (or memory ran out, or the set is full: then it is simply
 * not paused, and will be claimed and fail again). */
usec_t pause_set_add(struct pause_set *s, const char *topic, const char *key, usec_t now);

/* Forgets the entry (it was delivered again), so its next pause starts short. Returns true if it
 * was in the set. */
bool pause_set_forget(struct pause_set *s, const char *topic, const char *key);

/* Forgets everything. */
void pause_set_clear(struct pause_set *s);

bool pause_set_paused(const struct pause_set *s, const char *topic, const char *key, usec_t now);

/* In the set at all, paused now or expired but not yet forgotten. */
bool pause_set_known(const struct pause_set *s, const char *topic, const char *key);

/* Entries paused at `now`: their topics into topics[] and keys into keys[] (when keys is not
 * NULL), at most `cap`; the strings stay owned by the set. Returns the count. */
size_t pause_set_active(const struct pause_set *s, usec_t now, const char **topics, const char **keys,
                        size_t cap);

/* How many entries are paused at `now` (expired ones, kept for their strikes, do not count). */
size_t pause_set_count_active(const struct pause_set *s, usec_t now);
