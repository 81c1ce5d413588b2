/* pause.c -- Sets of names (topics, keys) not to claim until a growing deadline; pure, clock injected. */
#include "pause.h"

#include <stdlib.h>
#include <string.h>

void pause_set_init(struct pause_set *s, usec_t base, usec_t cap) {
        memset(s, 0, sizeof(*s));
        s->base = base;
        s->cap = cap < base ? base : cap;
}

void pause_set_done(struct pause_set *s) {
        for (size_t i = 0; i < s->n; i++)
                free(s->v[i].name);
        free(s->v);
        memset(s, 0, sizeof(*s));
}

static struct pause_entry *find(const struct pause_set *s, const char *name) {
        for (size_t i = 0; i < s->n; i++)
                if (strcmp(s->v[i].name, name) == 0)
                        return &s->v[i];
        return NULL;
}

usec_t pause_set_add(struct pause_set *s, const char *name, usec_t now) {
        struct pause_entry *e = find(s, name);
        usec_t wait;

        if (e && e->until > now)
                return 0;
        if (!e && s->max && s->n >= s->max) {
                /* Full: drop entries whose pause is over before refusing the new name. */
                for (size_t i = 0; i < s->n;)
                        if (s->v[i].until <= now) {
                                free(s->v[i].name);
                                s->v[i] = s->v[--s->n];
                        } else
                                i++;
                if (s->n >= s->max)
                        return 0;
        }
        if (!e) {
                struct pause_entry *grown = realloc(s->v, (s->n + 1) * sizeof(*s->v));
                char *copy = strdup(name);

                if (grown)
                        s->v = grown;
                if (!grown || !copy) {
                        free(copy);
                        return 0;
                }
                e = &s->v[s->n++];
                *e = (struct pause_entry){.name = copy};
        }
        /* An expired entry that fails again stays in the set: its strikes make the next
         * pause longer, so a name that keeps failing is retried less and less often. */
        wait = s->base;
        for (unsigned i = 0; i < e->strikes && wait < s->cap; i++)
                wait = wait > s->cap / 2 ? s->cap : wait * 2;
        if (wait > s->cap)
                wait = s->cap;
        e->strikes++;
        e->until = now + wait;
        return wait;
}

bool pause_set_forget(struct pause_set *s, const char *name) {
        struct pause_entry *e = find(s, name);

        if (!e)
                return false;
        free(e->name);
        *e = s->v[--s->n];
        return true;
}

bool pause_set_paused(const struct pause_set *s, const char *name, usec_t now) {
        const struct pause_entry *e = find(s, name);

        return e && e->until > now;
}

bool pause_set_known(const struct pause_set *s, const char *name) {
        return find(s, name) != NULL;
}

char *pause_set_literal(const struct pause_set *s, usec_t now) {
        size_t cap = 3, len = 0;
        char *out;

        for (size_t i = 0; i < s->n; i++)
                cap += 2 * strlen(s->v[i].name) + 3;
        out = malloc(cap);
        if (!out)
                return NULL;
        out[len++] = '{';
        for (size_t i = 0; i < s->n; i++) {
                if (s->v[i].until <= now)
                        continue;
                if (len > 1)
                        out[len++] = ',';
                out[len++] = '"';
                for (const char *c = s->v[i].name; *c; c++) {
                        if (*c == '"' || *c == '\\')
                                out[len++] = '\\';
                        out[len++] = *c;
                }
                out[len++] = '"';
        }
        out[len++] = '}';
        out[len] = 0;
        return out;
}
