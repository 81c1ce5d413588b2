/* test_schema.c -- schema_check: which migration of sql/ a table lacks, from what the catalog says, as a table of cases. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "schema.h"

/* What the catalog query of pg.c returns for the test bed's table (001-004 applied). */
#define COLUMNS                                                                                             \
        "id bigint\ncreated_at timestamp with time zone\ntopic text\nkey text\npayload bytea\nheaders "     \
        "jsonb\n"                                                                                           \
        "attempts integer\nlast_error text\ndead_at timestamp with time zone\npublished_at timestamp with " \
        "time "                                                                                             \
        "zone"
#define PENDING "WHERE ((published_at IS NULL) AND (dead_at IS NULL))"
#define IDX_PK "btree (id)\n"
#define IDX_001 "btree (id) " PENDING "\n"
#define IDX_003 \
        "btree (id) WHERE (dead_at IS NOT NULL)\nbtree (published_at) WHERE (published_at IS NOT NULL)\n"
#define IDX_003_DEAD "btree (id) WHERE (dead_at IS NOT NULL)\n"
#define IDX_004                                                  \
        "btree (topic COLLATE \"C\", id) INCLUDE (key) " PENDING \
        "\nbtree (topic, key COLLATE \"C\", id) " PENDING
#define IDX_004_TOPIC "btree (topic COLLATE \"C\", id) INCLUDE (key) " PENDING "\n"
#define ALL_INDEXES IDX_PK IDX_001 IDX_003 IDX_004

struct schema_case {
        const char *name;
        bool table;
        const char *columns, *indexes;
        bool trigger, enqueue, requeue, mark;
        int ret;
        const char *missing; /* NULL: nothing missing */
        const char *what; /* a part of v.what */
        const char *note; /* a part of v.notes, or "" for none at all */
};

static const struct schema_case cases[] = {
        { "everything of 001-004", true, COLUMNS, ALL_INDEXES, true, true, true, false, 0, NULL, NULL, "" },
        { "everything, finish = mark", true, COLUMNS, ALL_INDEXES, true, true, true, true, 0, NULL, NULL,
          "" },
        { "no table", false, NULL, NULL, false, false, false, false, -ENOPKG, "001_outbox.sql",
          "the table itself", NULL },
        { "no columns at all (a table of another shape)", true, "a integer", "", false, false, false, false,
          -ENOPKG, "001_outbox.sql", "column id (bigint)", NULL },
        { "headers missing", true,
          "id bigint\ncreated_at timestamp with time zone\ntopic text\nkey text\npayload bytea\n"
          "attempts integer\nlast_error text\ndead_at timestamp with time zone\n"
          "published_at timestamp with time zone",
          ALL_INDEXES, true, true, true, false, -ENOPKG, "001_outbox.sql", "column headers (jsonb)", NULL },
        { "headers as json", true,
          "id bigint\ncreated_at timestamp with time zone\ntopic text\nkey text\npayload bytea\nheaders "
          "json\n"
          "attempts integer\nlast_error text\ndead_at timestamp with time zone\n"
          "published_at timestamp with time zone",
          ALL_INDEXES, true, true, true, false, -ENOPKG, "001_outbox.sql",
          "column headers is json, the relay needs jsonb", NULL },
        { "a column that only starts like one (keys)", true,
          "id bigint\ncreated_at timestamp with time zone\ntopic text\nkeys text\npayload bytea\nheaders "
          "jsonb\n"
          "attempts integer\nlast_error text\ndead_at timestamp with time zone\n"
          "published_at timestamp with time zone",
          ALL_INDEXES, true, true, true, false, -ENOPKG, "001_outbox.sql", "column key (text)", NULL },
        { "id as integer", true,
          "id integer\ncreated_at timestamp with time zone\ntopic text\nkey text\npayload bytea\nheaders "
          "jsonb\n"
          "attempts integer\nlast_error text\ndead_at timestamp with time zone\n"
          "published_at timestamp with time zone",
          ALL_INDEXES, true, true, true, false, -ENOPKG, "001_outbox.sql", "column id is integer", NULL },
        { "extra columns are the application's", true, COLUMNS "\ntenant uuid", ALL_INDEXES, true, true, true,
          false, 0, NULL, NULL, "" },
        { "no pending index", true, COLUMNS, IDX_PK IDX_003 IDX_004, true, true, true, false, -ENOPKG,
          "001_outbox.sql", "outbox_pending_idx", NULL },
        { "pending index without its predicate", true, COLUMNS, IDX_PK "btree (id)\n" IDX_003 IDX_004, true,
          true, true, false, -ENOPKG, "001_outbox.sql", "outbox_pending_idx", NULL },
        { "no 004", true, COLUMNS, IDX_PK IDX_001 IDX_003, true, true, true, false, -ENOPKG,
          "004_claim_skip.sql", "outbox_pending_topic_idx", NULL },
        { "004 half built", true, COLUMNS, IDX_PK IDX_001 IDX_003 IDX_004_TOPIC, true, true, true, false,
          -ENOPKG, "004_claim_skip.sql", "outbox_pending_key_idx", NULL },
        { "004's topic index without COLLATE \"C\"", true, COLUMNS,
          IDX_PK IDX_001 IDX_003 "btree (topic, id) INCLUDE (key) " PENDING
                                 "\nbtree (topic, key COLLATE \"C\", id) " PENDING,
          true, true, true, false, -ENOPKG, "004_claim_skip.sql", "outbox_pending_topic_idx", NULL },
        { "no 003, finish = delete: runs, says so", true, COLUMNS, IDX_PK IDX_001 IDX_004, true, true, false,
          false, 0, NULL, NULL, "outbox_published_idx (003_dead_letters.sql)" },
        { "no 003, finish = mark with a retention: missing", true, COLUMNS, IDX_PK IDX_001 IDX_004, true,
          true, false, true, -ENOPKG, "003_dead_letters.sql", "outbox_published_idx", NULL },
        { "003's dead index only missing, finish = mark: runs", true, COLUMNS,
          IDX_PK IDX_001 IDX_004 "\nbtree (published_at) WHERE (published_at IS NOT NULL)", true, true, true,
          true, 0, NULL, NULL, "outbox_dead_idx" },
        { "no 001 before 004: 001 named first", true, COLUMNS, IDX_PK, true, true, true, false, -ENOPKG,
          "001_outbox.sql", NULL, NULL },
        { "no trigger: runs, polls", true, COLUMNS, ALL_INDEXES, false, true, true, false, 0, NULL, NULL,
          "outbox_notify()" },
        { "no 002: runs", true, COLUMNS, ALL_INDEXES, true, false, true, false, 0, NULL, NULL,
          "outbox_enqueue()" },
        { "no requeue: runs", true, COLUMNS, ALL_INDEXES, true, true, false, false, 0, NULL, NULL,
          "outbox_requeue()" },
        { "nothing but the columns and 001/004's indexes: every note", true, COLUMNS, IDX_001 IDX_004, false,
          false, false, false, 0, NULL, NULL, "outbox_dead_idx" },
        { "an index list without a final newline still matches", true, COLUMNS,
          IDX_001 IDX_003_DEAD "btree (published_at) WHERE (published_at IS NOT NULL)\n" IDX_004, true, true,
          true, true, 0, NULL, NULL, "" },
};

static void check_cases(void **state) {
        (void)state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                const struct schema_case *c = &cases[i];
                struct schema_facts f = { .table = c->table,
                                          .columns = c->columns,
                                          .indexes = c->indexes,
                                          .notify_trigger = c->trigger,
                                          .enqueue = c->enqueue,
                                          .requeue = c->requeue };
                struct schema_verdict v;
                int r = schema_check(&f, c->mark, &v);

                print_message("# case: %s -> %d %s %s | %s\n", c->name, r, v.missing ? v.missing : "-",
                              v.missing ? v.what : "", v.notes);
                assert_int_equal(r, c->ret);
                if (c->missing) {
                        assert_non_null(v.missing);
                        assert_string_equal(v.missing, c->missing);
                        if (c->what)
                                assert_non_null(strstr(v.what, c->what));
                } else {
                        assert_null(v.missing);
                }
                if (c->note && !c->note[0])
                        assert_string_equal(v.notes, "");
                else if (c->note)
                        assert_non_null(strstr(v.notes, c->note));
        }
}

/* Every note at once still fits, cut at the buffer and terminated. */
static void notes_bounded(void **state) {
        struct schema_facts f = { .table = true, .columns = COLUMNS, .indexes = IDX_001 IDX_004 };
        struct schema_verdict v;

        (void)state;
        assert_int_equal(schema_check(&f, false, &v), 0);
        assert_true(strlen(v.notes) < sizeof(v.notes));
        assert_non_null(strstr(v.notes, "outbox_requeue()"));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(check_cases),
                cmocka_unit_test(notes_bounded),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
