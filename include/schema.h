/* schema.h -- Whether the outbox table has what the relay needs, and which migration of sql/ is missing when it has not: a pure rule over what the catalog says. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* What one look at the catalog found (pg_schema_facts). */
struct schema_facts {
        bool table; /* the table exists */
        const char *columns; /* "name type" lines, format_type() spelling: "id bigint\ntopic text\n…" */
        const char *indexes; /* one line per index, pg_get_indexdef() after "USING ": "btree (id) WHERE …" */
        bool notify_trigger; /* a trigger on the table runs outbox_notify() (001) */
        bool enqueue; /* outbox_enqueue(text, text, bytea, jsonb) exists (002) */
        bool requeue; /* outbox_requeue(bigint[]) exists (003) */
};

struct schema_verdict {
        const char *missing; /* the first migration the relay cannot run without, or NULL */
        char what[320]; /* what of it is missing, when `missing` is set */
        char notes[480]; /* what is missing that the relay runs without ("" when nothing) */
};

/* Judges `f`. `mark` says finish = "mark" with a retention, whose deletes need 003's index on
 * published_at. Returns 0, or -ENOPKG when a migration the relay needs is missing (then
 * v->missing names the file and v->what says what of it). */
int schema_check(const struct schema_facts *f, bool mark, struct schema_verdict *v);
