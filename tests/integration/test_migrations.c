/* test_migrations.c -- The schema check at start: a table that lacks a migration stops the relay with exit 78 naming the file, --print-sql applies (and re-applies) every migration through psql. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "support.h"

/* A copy of the outbox's columns (identity and defaults), without its indexes or trigger. */
static void bare_table(PGconn *c, const char *name) {
        ts_pg_exec(c,
                   "DROP TABLE IF EXISTS %s; CREATE TABLE %s (LIKE outbox INCLUDING DEFAULTS INCLUDING "
                   "IDENTITY);"
                   " ALTER TABLE %s ADD PRIMARY KEY (id)",
                   name, name, name);
}

/* 004's two indexes on `table` (and 001's pending index first, when `with_001`). */
static void claim_indexes(PGconn *c, const char *table, bool with_001) {
        if (with_001)
                ts_pg_exec(c, "CREATE INDEX ON %s (id) WHERE published_at IS NULL AND dead_at IS NULL",
                           table);
        ts_pg_exec(c,
                   "CREATE INDEX ON %s (topic COLLATE \"C\", id) INCLUDE (key)"
                   " WHERE published_at IS NULL AND dead_at IS NULL;"
                   " CREATE INDEX ON %s (topic, key COLLATE \"C\", id)"
                   " WHERE published_at IS NULL AND dead_at IS NULL",
                   table, table);
}

/* Starts a relay on `table` and returns its exit status; it must stop on its own. */
static int run_on(struct ts_relay *r, const char *table) {
        char extra[128];

        snprintf(extra, sizeof(extra), "table = \"%s\";", table);
        ts_relay_start_opts(
                r,
                &(struct ts_relay_opts){ .relay_group = "poll_interval = \"1s\";", .postgres_extra = extra });
        return ts_relay_stop(r, 0, 30000);
}

/* What an operator sees: exit 78, and the log names the migration and what of it is missing. */
static void expect_missing(struct ts_relay *r, const char *table, const char *migration, const char *what) {
        int status = run_on(r, table);

        if (status != 78 || ts_relay_log_count(r, migration) < 1 || ts_relay_log_count(r, what) < 1) {
                ts_relay_dump_log(r);
                fail_msg("table %s: exit %d, wanted 78 and a line naming %s and '%s'", table, status,
                         migration, what);
        }
        fprintf(stderr, "  %s: exit 78, names %s (%s)\n", table, migration, what);
}

/* A table with 001's index but not 004's: exit 78 naming 004; with them, the relay runs and
 * publishes every row of that table. */
static void missing_004_exits_78(void **state) {
        PGconn *c = ts_pg_connect();
        char *t = ts_topic("sc-004");
        const char *topics[] = { t, NULL };
        struct ts_relay r;
        struct ts_msgs m;

        (void)state;
        bare_table(c, "outbox_sc4");
        ts_pg_exec(
                c,
                "CREATE INDEX ON outbox_sc4 (id) WHERE published_at IS NULL AND dead_at IS NULL"); /* 001 only */
        ts_pg_exec(c,
                   "INSERT INTO outbox_sc4 (topic, key, payload) SELECT '%s', 'k' || (i %% 3),"
                   " convert_to('row ' || i, 'UTF8') FROM generate_series(1, 20) i",
                   t);
        ts_create_topic(t, 1, NULL, NULL);
        expect_missing(&r, "outbox_sc4", "sql/004_claim_skip.sql", "outbox_pending_topic_idx");
        /* nothing was touched */
        assert_int_equal(
                ts_pg_int(c, "SELECT count(*) FROM outbox_sc4 WHERE published_at IS NULL AND attempts = 0"),
                20);

        claim_indexes(c, "outbox_sc4", false);
        ts_relay_start_opts(&r,
                            &(struct ts_relay_opts){ .relay_group = "poll_interval = \"200ms\";",
                                                     .postgres_extra = "table = \"outbox_sc4\";" });
        assert_true(ts_relay_log_wait(&r, "ready", 30000));
        /* it runs without the trigger and 003, and says so once */
        assert_true(ts_relay_log_wait(&r, "runs without", 5000));
        ts_pg_wait(c, 30000, "SELECT count(*) = 0 FROM outbox_sc4");
        ts_consume(topics, 20, 30000, 500, &m);
        assert_int_equal(m.n, 20);
        for (size_t i = 0; i < m.n; i++) {
                char want[32];

                snprintf(want, sizeof(want), "row %zu", i + 1); /* one partition: id order */
                assert_int_equal(m.v[i].value_len, strlen(want));
                assert_memory_equal(m.v[i].value, want, strlen(want));
        }
        assert_int_equal(ts_relay_stop(&r, SIGTERM, 30000), 0);
        ts_msgs_free(&m);
        ts_pg_exec(c, "DROP TABLE outbox_sc4");
        PQfinish(c);
        free(t);
}

/* A missing column, a column of another type, no table at all, and (finish = "mark" with a
 * retention) no index for the retention's deletes: each named. */
static void missing_001_and_003_exit_78(void **state) {
        PGconn *c = ts_pg_connect();
        struct ts_relay r;
        int status;

        (void)state;
        bare_table(c, "outbox_sc1");
        ts_pg_exec(c, "ALTER TABLE outbox_sc1 DROP COLUMN headers");
        expect_missing(&r, "outbox_sc1", "sql/001_outbox.sql", "column headers (jsonb)");
        ts_pg_exec(c, "ALTER TABLE outbox_sc1 ADD COLUMN headers json");
        expect_missing(&r, "outbox_sc1", "sql/001_outbox.sql",
                       "column headers is json, the relay needs jsonb");
        ts_pg_exec(c, "DROP TABLE outbox_sc1");
        expect_missing(&r, "outbox_sc1", "sql/001_outbox.sql", "the table itself");

        /* the test bed's table has 003; a copy without its published_at index does not */
        bare_table(c, "outbox_sc3");
        claim_indexes(c, "outbox_sc3", true);
        ts_relay_start_opts(&r,
                            &(struct ts_relay_opts){ .relay_group = "finish = \"mark\"; retention = \"1h\";",
                                                     .postgres_extra = "table = \"outbox_sc3\";" });
        status = ts_relay_stop(&r, 0, 30000);
        if (status != 78 || ts_relay_log_count(&r, "sql/003_dead_letters.sql") < 1) {
                ts_relay_dump_log(&r);
                fail_msg("finish = mark without 003's index: exit %d", status);
        }
        ts_pg_exec(c, "DROP TABLE outbox_sc3");
        PQfinish(c);
}

/* A new database `db` with the migrations applied by the README's step, `outbox-relay
 * --print-sql | psql`, twice (an upgrade re-applies everything); its conninfo in `conninfo`. */
static void fresh_database(PGconn *c, const char *db, char *conninfo, size_t size) {
        char cmd[1024];

        ts_pg_exec(c, "DROP DATABASE IF EXISTS \"%s\"", db);
        ts_pg_exec(c, "CREATE DATABASE \"%s\"", db);
        snprintf(cmd, sizeof(cmd), "'%s' --print-sql | psql -X -q -h '%s' -p '%s' -U '%s' -d '%s' >/dev/null",
                 ts_env("OUTBOX_RELAY_BIN"), ts_env("PGHOST"), ts_env("PGPORT"), ts_env("PGUSER"), db);
        for (int i = 0; i < 2; i++) {
                int rc = system(cmd);

                if (rc != 0)
                        fail_msg("pass %d of --print-sql | psql failed (%d)", i + 1, rc);
        }
        snprintf(conninfo, size, "host=%s port=%s user=%s dbname='%s'", ts_env("PGHOST"), ts_env("PGPORT"),
                 ts_env("PGUSER"), db);
}

/* Into an empty database, then the relay starts on it. */
static void print_sql_applies(void **state) {
        PGconn *c = ts_pg_connect();
        struct ts_relay r;
        char conninfo[256];

        (void)state;
        fresh_database(c, "outbox_sc_fresh", conninfo, sizeof(conninfo));
        ts_relay_start_opts(&r, &(struct ts_relay_opts){ .conninfo = conninfo });
        assert_true(ts_relay_log_wait(&r, "ready", 30000));
        /* everything is there: nothing to say about what it runs without */
        assert_int_equal(ts_relay_log_count(&r, "runs without"), 0);
        assert_int_equal(ts_relay_stop(&r, SIGTERM, 30000), 0);
        ts_pg_exec(c, "DROP DATABASE outbox_sc_fresh");
        PQfinish(c);
}

/* A database whose name holds a control character (U+0085) cannot give the derived outbox-source
 * (message_source_invalid): exit 78 saying so and what to set; with relay.source set, it runs. */
static void underivable_source_exits_78(void **state) {
        const char *db = "outbox_sc_\xc2\x85odd";
        PGconn *c = ts_pg_connect();
        struct ts_relay r;
        char conninfo[256];
        int status;

        (void)state;
        fresh_database(c, db, conninfo, sizeof(conninfo));
        ts_relay_start_opts(&r, &(struct ts_relay_opts){ .conninfo = conninfo });
        status = ts_relay_stop(&r, 0, 30000);
        if (status != 78 ||
            ts_relay_log_count(
                    &r,
                    "the outbox-source header of table 'outbox' cannot be derived: a source may hold "
                    "no control characters; set relay.source") != 1) {
                ts_relay_dump_log(&r);
                fail_msg("exit %d, wanted 78 and the reason", status);
        }
        ts_relay_start_opts(&r,
                            &(struct ts_relay_opts){ .conninfo = conninfo,
                                                     .relay_group = "source = \"outbox-sc-odd\";" });
        assert_true(
                ts_relay_log_wait(&r, "messages carry outbox-source 'outbox-sc-odd' (relay.source)", 30000));
        assert_int_equal(ts_relay_stop(&r, SIGTERM, 30000), 0);
        ts_pg_exec(c, "DROP DATABASE \"%s\"", db);
        PQfinish(c);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(missing_004_exits_78, ts_teardown),
                cmocka_unit_test_teardown(missing_001_and_003_exit_78, ts_teardown),
                cmocka_unit_test_teardown(print_sql_applies, ts_teardown),
                cmocka_unit_test_teardown(underivable_source_exits_78, ts_teardown),
        };

        ts_env("PGPORT");
        ts_env("KAFKA_BOOTSTRAP");
        return cmocka_run_group_tests(tests, NULL, NULL);
}
