/* test_pooler.c -- Behind a connection pooler in transaction mode (PgBouncer) the relay cannot keep a session of its own: it says so at error level and in STATUS=, publishes nothing, loses nothing, and a relay connected directly then publishes every row in key order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>

#include <cmocka.h>

#include "support.h"

#define ROWS 300
#define KEYS 10

/* The PgBouncer that `testbed.sh pgbouncer-start` started: its conninfo. */
static void pgbouncer_conninfo(char *buf, size_t size) {
        char path[512];
        int port = 0;
        FILE *f;

        snprintf(path, sizeof(path), "%s/pgbouncer/port", ts_env("TESTBED_DIR"));
        f = fopen(path, "r");
        if (!f || fscanf(f, "%d", &port) != 1)
                fail_msg("no PgBouncer port in %s", path);
        fclose(f);
        snprintf(buf, size, "host=127.0.0.1 port=%d dbname=%s user=%s", port, ts_env("PGDATABASE"),
                 ts_env("PGUSER"));
}

/* Waits until a STATUS= line holding `needle` arrived. */
static bool status_wait(struct ts_notify *n, const char *needle, int timeout_ms) {
        int64_t until = ts_now_ms() + timeout_ms;

        for (;;) {
                if (n->log && strstr(n->log, needle))
                        return true;
                if (ts_now_ms() > until)
                        return false;
                ts_notify_drain(n, 100);
        }
}

static void transaction_pooler_is_named(void **state) {
        PGconn *c = ts_pg_connect();
        char *t = ts_topic("pooler");
        const char *topics[] = { t, NULL };
        char conninfo[256];
        struct ts_relay r;
        struct ts_notify n;
        struct ts_msgs m;
        struct ts_verify v;
        int status;

        (void)state;
        ts_pg_install_copy(c);
        ts_create_topic(t, 3, NULL, NULL);
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload, headers) SELECT '%s', 'key-' || (i %% %d),"
                   " convert_to('event ' || i, 'UTF8'), jsonb_build_object('n', i::text)"
                   " FROM generate_series(1, %d) i",
                   t, KEYS, ROWS);

        ts_testbed("pgbouncer-start");
        pgbouncer_conninfo(conninfo, sizeof(conninfo));
        ts_notify_open(&n);
        ts_relay_start_opts(&r,
                            &(struct ts_relay_opts){ .conninfo = conninfo,
                                                     .relay_group = "poll_interval = \"200ms\";",
                                                     .notify_socket = n.path });
        /* The error names the cause and the way out, at error level (the journal's priority 3). */
        if (!ts_relay_log_wait(&r,
                               "; the server session is shared with other clients: is the relay behind a "
                               "connection pooler in transaction mode? It needs a session of its own",
                               20000) ||
            ts_relay_log_count(&r, "<3>cannot connect to PostgreSQL: ") < 1) {
                ts_relay_dump_log(&r);
                fail_msg("no error naming the pooler");
        }
        /* systemctl status says it too. */
        if (!status_wait(&n, "database session shared (a pooler in transaction mode?)", 10000))
                fail_msg("no STATUS= naming the shared session; received:\n%s", n.log ? n.log : "");
        /* It keeps trying (the setup may change under it), and publishes nothing meanwhile. */
        ts_relay_log_wait_n(&r, "pooler in transaction mode", 3, 20000);
        ts_notify_drain(&n, 500);
        assert_int_equal(ts_notify_count(&n, "READY=1"), 0);
        assert_int_equal(ts_pg_int(c,
                                   "SELECT count(*) FROM outbox WHERE topic = '%s'"
                                   " AND published_at IS NULL AND dead_at IS NULL AND attempts = 0",
                                   t),
                         ROWS);
        status = ts_relay_stop(&r, SIGTERM, 30000);
        if (status != 0) {
                ts_relay_dump_log(&r);
                fail_msg("the relay behind the pooler stopped with %d, wanted 0", status);
        }
        /* every error it logged is that one */
        assert_int_equal(ts_relay_log_count(&r, "<3>"), ts_relay_log_count(&r, "pooler in transaction mode"));
        fprintf(stderr, "  behind PgBouncer: %d errors naming the pooler, %d rows left pending\n",
                ts_relay_log_count(&r, "pooler in transaction mode"), ROWS);
        ts_notify_close(&n);
        ts_testbed("pgbouncer-stop");

        /* The operator connects it directly: every row arrives, as written, in key order. */
        ts_relay_start_opts(&r, &(struct ts_relay_opts){ .relay_group = "poll_interval = \"200ms\";" });
        assert_true(ts_wait_drained(c, topics, 60000));
        ts_consume(topics, ROWS, 60000, 1000, &m);
        assert_int_equal(ts_relay_stop(&r, SIGTERM, 30000), 0);
        assert_int_equal(ts_relay_log_count(&r, "pooler"), 0);
        ts_verify(c, topics, &m, false, &v);
        ts_verify_assert(&v, ROWS, 0);
        fprintf(stderr, "  connected directly: committed %zu, consumed %zu, lost %zu, order violations %zu\n",
                v.expected, v.consumed, v.missing, v.order_violations);
        ts_msgs_free(&m);
        free(t);
        PQfinish(c);
}

/* A failed test leaves no PgBouncer behind for the next run on this test bed. */
static int teardown(void **state) {
        ts_testbed("pgbouncer-stop");
        return ts_teardown(state);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(transaction_pooler_is_named, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
