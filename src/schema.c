/* schema.c -- Whether the outbox table has what the relay needs: the columns and indexes of each migration in sql/, and the first one missing. */
#include "schema.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

/* The pending rows' predicate, as pg_get_indexdef() writes it. */
#define PENDING "WHERE ((published_at IS NULL) AND (dead_at IS NULL))"

static const struct {
        const char *name, *type;
} columns[] = {
        { "id", "bigint" },
        { "created_at", "timestamp with time zone" },
        { "topic", "text" },
        { "key", "text" },
        { "payload", "bytea" },
        { "headers", "jsonb" },
        { "attempts", "integer" },
        { "last_error", "text" },
        { "dead_at", "timestamp with time zone" },
        { "published_at", "timestamp with time zone" },
};

/* The indexes the relay's statements are written for, by migration. `needed`: the relay cannot
 * run without it (0 never, 1 always, 2 with finish = "mark" and a retention). */
static const struct {
        const char *migration, *index, *def;
        int needed;
} indexes[] = {
        { "001_outbox.sql", "outbox_pending_idx", "btree (id) " PENDING, 1 },
        { "003_dead_letters.sql", "outbox_dead_idx", "btree (id) WHERE (dead_at IS NOT NULL)", 0 },
        { "003_dead_letters.sql", "outbox_published_idx",
          "btree (published_at) WHERE (published_at IS NOT NULL)", 2 },
        { "004_claim_skip.sql", "outbox_pending_topic_idx",
          "btree (topic COLLATE \"C\", id) INCLUDE (key) " PENDING, 1 },
        { "004_claim_skip.sql", "outbox_pending_key_idx", "btree (topic, key COLLATE \"C\", id) " PENDING,
          1 },
};

/* The first line of `lines` (newline-separated) that equals `head` (whole) or starts with it;
 * its length in *len. NULL when there is none. */
static const char *find_line(const char *lines, const char *head, bool whole, size_t *len) {
        size_t n = strlen(head);

        for (const char *p = lines ? lines : ""; *p;) {
                const char *end = strchr(p, '\n');

                *len = end ? (size_t)(end - p) : strlen(p);
                if ((whole ? *len == n : *len > n) && memcmp(p, head, n) == 0)
                        return p;
                if (!end)
                        break;
                p = end + 1;
        }
        return NULL;
}

static bool has_line(const char *lines, const char *want) {
        size_t len;

        return find_line(lines, want, true, &len) != NULL;
}

/* The type `lines` gives column `name`, copied into buf ("" when there is no such column). */
static const char *column_type(const char *lines, const char *name, char *buf, size_t size) {
        char head[72];
        const char *line;
        size_t len, n = (size_t)snprintf(head, sizeof(head), "%s ", name);

        line = find_line(lines, head, false, &len);
        snprintf(buf, size, "%.*s", line ? (int)(len - n) : 0, line ? line + n : "");
        return buf;
}

/* Appends `text` to what the relay runs without. */
static void note(struct schema_verdict *v, const char *text) {
        size_t used = strlen(v->notes);

        if (used < sizeof(v->notes))
                snprintf(v->notes + used, sizeof(v->notes) - used, "%s%s", used ? "; " : "", text);
}

int schema_check(const struct schema_facts *f, bool mark, struct schema_verdict *v) {
        char type[96];

        *v = (struct schema_verdict){ 0 };
        if (!f->table) {
                v->missing = "001_outbox.sql";
                snprintf(v->what, sizeof(v->what), "the table itself");
                return -ENOPKG;
        }
        for (size_t i = 0; i < ELEMENTSOF(columns); i++) {
                column_type(f->columns, columns[i].name, type, sizeof(type));
                if (strcmp(type, columns[i].type) == 0)
                        continue;
                v->missing = "001_outbox.sql";
                if (!type[0])
                        snprintf(v->what, sizeof(v->what), "column %s (%s)", columns[i].name,
                                 columns[i].type);
                else
                        snprintf(v->what, sizeof(v->what), "column %s is %s, the relay needs %s",
                                 columns[i].name, type, columns[i].type);
                return -ENOPKG;
        }
        for (size_t i = 0; i < ELEMENTSOF(indexes); i++) {
                if (has_line(f->indexes, indexes[i].def))
                        continue;
                if (indexes[i].needed == 1 || (indexes[i].needed == 2 && mark)) {
                        v->missing = indexes[i].migration;
                        snprintf(v->what, sizeof(v->what), "index %s: %s", indexes[i].index, indexes[i].def);
                        return -ENOPKG;
                }
                snprintf(type, sizeof(type), "index %s (%s)", indexes[i].index, indexes[i].migration);
                note(v, type);
        }
        if (!f->notify_trigger)
                note(v,
                     "the trigger running outbox_notify() (001_outbox.sql): rows are found only every "
                     "poll_interval");
        if (!f->enqueue)
                note(v, "function outbox_enqueue() (002_enqueue.sql)");
        if (!f->requeue)
                note(v, "function outbox_requeue() (003_dead_letters.sql)");
        return 0;
}
