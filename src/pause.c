/* pause.c -- Sets of topics or (topic, key) pairs not to claim until a growing deadline; pure, clock injected. */
#include "pause.h"

#include <stdlib.h>
#include <string.h>

void pause_set_init(struct pause_set *s, usec_t base, usec_t cap) {
        memset(s, 0, sizeof(*s));
        s->base = base;
        s->cap = cap < base ? base : cap;
}

static void entry_free(struct pause_entry *e) {
        free(e->topic);
        free(e->key);
}

void pause_set_clear(struct pause_set *s) {
        for (size_t i = 0; i < s->n; i++)
                entry_free(&s->v[i]);
        s->n = 0;
}

void pause_set_done(struct pause_set *s) {
        pause_set_clear(s);
        free(s->v);
        memset(s, 0, sizeof(*s));
}

static bool str_eq(const char *a, const char *b) {
        return a == b || (a && b && strcmp(a, b) == 0);
}

static struct pause_entry *find(const struct pause_set *s, const char *topic, const char *key) {
        for (size_t i = 0; i < s->n; i++)
                if (strcmp(s->v[i].topic, topic) == 0 && str_eq(s->v[i].key, key))
                        return &s->v[i];
        return NULL;
}

usec_t pause_set_add(struct pause_set *s, const char *topic, const char *key, usec_t now) {
        struct pause_entry *e = find(s, topic, key);
        usec_t wait;

        if (e && e->until > now)
                return 0;
        if (!e && s->max && s->n >= s->max) {
                /* Full: drop entries whose pause is over before refusing the new one. */
                for (size_t i = 0; i < s->n;)
                        if (s->v[i].until <= now) {
                                entry_free(&s->v[i]);
                                s->v[i] = s->v[--s->n];
                        } else
                                i++;
                if (s->n >= s->max)
                        return 0;
        }
        if (!e) {
                struct pause_entry *grown = realloc(s->v, (s->n + 1) * sizeof(*s->v));
                char *t = strdup(topic), *k = key ? strdup(key) : NULL;

                if (grown)
                        s->v = grown;
                if (!grown || !t || (key && !k)) {
                        free(t);
                        free(k);
                        return 0;
                }
                e = &s->v[s->n++];
                *e = (struct pause_entry){ .topic = t, .key = k };
        }
        /* An expired entry that fails again stays in the set: its strikes make the next
         * pause longer, so what keeps failing is retried less and less often. */
        wait = s->base;
        for (unsigned i = 0; i < e->strikes && wait < s->cap; i++)
                wait = wait > s->cap / 2 ? s->cap : wait * 2;
        if (wait > s->cap)
                wait = s->cap;
        e->strikes++;
        e->until = now + wait;
        return wait;
}

bool pause_set_forget(struct pause_set *s, const char *topic, const char *key) {
        struct pause_entry *e = find(s, topic, key);

        if (!e)
                return false;
        entry_free(e);
        *e = s->v[--s->n];
        return true;
}

bool pause_set_paused(const struct pause_set *s, const char *topic, const char *key, usec_t now) {
        const struct pause_entry *e = find(s, topic, key);

        return e && e->until > now;
}

bool pause_set_known(const struct pause_set *s, const char *topic, const char *key) {
        return find(s, topic, key) != NULL;
}

size_t pause_set_count_active(const struct pause_set *s, usec_t now) {
        size_t n = 0;

        for (size_t i = 0; i < s->n; i++)
                n += s->v[i].until > now;
        return n;
}

size_t pause_set_active(const struct pause_set *s, usec_t now, const char **topics, const char **keys,
                        size_t cap) {
        size_t n = 0;

        for (size_t i = 0; i < s->n && n < cap; i++) {
                if (s->v[i].until <= now)
                        continue;
                topics[n] = s->v[i].topic;
                if (keys)
                        keys[n] = s->v[i].key;
                n++;
        }
        return n;
}
