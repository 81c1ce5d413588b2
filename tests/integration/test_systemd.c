/* test_systemd.c -- Life under systemd without systemd: notify protocol, drain on SIGTERM, SIGKILL, reload. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "support.h"

/* READY=1 only once PostgreSQL is connected (a relay that cannot reach it stays unready);
 * WATCHDOG=1 at half of WATCHDOG_USEC; SIGHUP gives RELOADING=1 then READY=1; SIGTERM gives
 * STOPPING=1 and exit 0. */
static void notify_protocol(void **state) {
        struct ts_notify n;
        struct ts_relay relay;
        char bad[256];
        int64_t t0;
        int pings;

        (void)state;
        /* No database: no READY, but the relay keeps trying (and says so). */
        ts_notify_open(&n);
        snprintf(bad, sizeof(bad), "host=127.0.0.1 port=1 dbname=outbox user=postgres connect_timeout=2");
        ts_relay_start_opts(&relay,
                            &(struct ts_relay_opts){ .conninfo = bad,
                                                     .notify_socket = n.path,
                                                     .relay_group = "poll_interval = \"1s\";" });
        assert_false(ts_notify_wait(&n, "READY=1", 3000));
        assert_true(ts_relay_log_wait(&relay, "cannot connect to PostgreSQL", 1000));
        assert_true(ts_notify_count(&n, "EXTEND_TIMEOUT_USEC=") >= 1);
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 10000), 0);
        assert_true(ts_notify_wait(&n, "STOPPING=1", 1000) || ts_notify_count(&n, "STOPPING=1") == 1);
        ts_notify_close(&n);

        /* With the database: READY, then the watchdog every second for WATCHDOG_USEC=2s. */
        ts_notify_open(&n);
        ts_relay_start_opts(&relay,
                            &(struct ts_relay_opts){ .notify_socket = n.path,
                                                     .watchdog_usec = "2000000",
                                                     .relay_group = "poll_interval = \"1s\";" });
        t0 = ts_now_ms();
        assert_true(ts_notify_wait(&n, "READY=1", 20000));
        assert_true(ts_relay_log_wait(&relay, "connected to PostgreSQL", 1000));
        fprintf(stderr, "notify: READY=1 after %lld ms\n", (long long)(ts_now_ms() - t0));
        pings = ts_notify_count(&n, "WATCHDOG=1");
        ts_notify_drain(&n, 4500);
        pings = ts_notify_count(&n, "WATCHDOG=1") - pings;
        fprintf(stderr, "notify: %d WATCHDOG=1 in 4.5 s with WATCHDOG_USEC=2000000\n", pings);
        /* One ping a second; the loop wakes at least every 200 ms. */
        assert_true(pings >= 3 && pings <= 6);
        assert_true(ts_notify_count(&n, "STATUS=published ") >= 1);

        kill(relay.pid, SIGHUP);
        assert_true(ts_notify_wait(&n, "RELOADING=1", 5000));
        assert_true(ts_notify_wait(&n, "READY=1", 5000));
        {
                /* READY=1 again, after RELOADING=1 (not only the one from the start). */
                const char *rl = strstr(n.log, "RELOADING=1");

                if (!rl)
                        fail_msg("no RELOADING=1 after SIGHUP; received:\n%s", n.log);
                if (!strstr(rl, "READY=1"))
                        fail_msg("no READY=1 after RELOADING=1; received:\n%s", n.log);
        }
        assert_true(ts_relay_log_wait(&relay, "configuration reloaded", 2000));

        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        assert_true(ts_notify_count(&n, "STOPPING=1") == 1 || ts_notify_wait(&n, "STOPPING=1", 1000));
        ts_notify_close(&n);
}

/* STATUS= says so when the breaker opens (broker down, through mock-kafka). */
static void status_shows_breaker(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("sd-breaker");
        struct ts_notify n;
        struct ts_mock m;
        struct ts_relay relay;

        (void)state;
        ts_mock_start(&m, topic, 3);
        ts_notify_open(&n);
        ts_relay_start_opts(
                &relay,
                &(struct ts_relay_opts){
                        .notify_socket = n.path,
                        .bootstrap = m.bootstrap,
                        .relay_group = "poll_interval = \"1s\"; batch_timeout = \"8s\";",
                        .kafka_extra = "message_timeout_ms = 1500; reconnect_backoff_max_ms = 500;",
                        .extra_groups = "breaker = { failure_threshold = 2; cooldown = \"30s\"; };\n"
                                        "retry = { base = \"50ms\"; cap = \"200ms\"; };" });
        assert_true(ts_notify_wait(&n, "READY=1", 20000));
        ts_mock_cmd(&m, "broker-down -1");
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'k' || g, 'x' FROM "
                   "generate_series(1, 10) g",
                   topic);
        assert_true(ts_relay_log_wait(&relay, "circuit breaker opened", 30000));
        ts_notify_drain(&n, 2500);
        assert_non_null(strstr(n.log, "breaker open"));
        fprintf(stderr, "status: %s\n", strstr(n.log, "STATUS=published"));
        /* No row spent an attempt or was dead-lettered while Kafka was away. */
        assert_int_equal(ts_pg_int(c,
                                   "SELECT count(*) FROM outbox WHERE topic = '%s' AND (attempts > 0 OR "
                                   "dead_at IS NOT NULL)",
                                   topic),
                         0);
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        ts_mock_stop(&m);
        ts_notify_close(&n);
        ts_pg_exec(c, "DELETE FROM outbox WHERE topic = '%s'", topic);
        free(topic);
        PQfinish(c);
}

static void fill(PGconn *c, const char *topic, int rows) {
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload, headers) SELECT '%s', 'key-' || (g %% 500),"
                   " convert_to('event ' || g, 'UTF8'), jsonb_build_object('n', g::text)"
                   " FROM generate_series(1, %d) g",
                   topic, rows);
}

/* SIGTERM during a 50,000-row load: exit 0 within drain_timeout, nothing lost, no duplicate. */
static void sigterm_drains(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("sd-sigterm");
        const char *topics[] = { topic, NULL };
        struct ts_relay relay;
        struct ts_msgs m;
        struct ts_verify v;
        int64_t left, t0, took;
        int rc;

        (void)state;
        ts_pg_install_copy(c);
        fill(c, topic, 50000);
        ts_relay_start(&relay, "poll_interval = \"1s\"; batch_size = 500; drain_timeout = \"10s\";", NULL);
        ts_pg_wait(c, 60000, "SELECT count(*) <= 35000 FROM outbox WHERE topic = '%s'", topic);
        t0 = ts_now_ms();
        rc = ts_relay_stop(&relay, SIGTERM, 15000);
        took = ts_now_ms() - t0;
        left = ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s'", topic);
        fprintf(stderr, "sigterm: exit %d after %lld ms, %lld rows still pending\n", rc, (long long)took,
                (long long)left);
        assert_int_equal(rc, 0);
        assert_true(took < 10000);
        assert_true(left > 0); /* it stopped mid-load, for real */

        ts_relay_start(&relay, "poll_interval = \"1s\"; batch_size = 500;", NULL);
        assert_true(ts_wait_drained(c, topics, 120000));
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        ts_consume(topics, 50000, 120000, 2000, &m);
        ts_verify(c, topics, &m, false, &v);
        fprintf(stderr, "sigterm: lost %zu, duplicates %zu\n", v.missing, v.duplicates);
        assert_int_equal(v.expected, 50000);
        assert_int_equal(v.missing, 0);
        assert_int_equal(v.duplicates, 0);
        assert_int_equal(v.mismatched + v.unexpected + v.order_violations, 0);
        ts_msgs_free(&m);
        free(topic);
        PQfinish(c);
}

/* SIGKILL during the same load, then a restart: nothing lost, duplicates at most one batch. */
static void sigkill_restart(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("sd-sigkill");
        const char *topics[] = { topic, NULL };
        struct ts_relay relay;
        struct ts_msgs m;
        struct ts_verify v;

        (void)state;
        ts_pg_install_copy(c);
        fill(c, topic, 50000);
        ts_relay_start(&relay, "poll_interval = \"1s\"; batch_size = 500;", NULL);
        ts_pg_wait(c, 60000, "SELECT count(*) <= 35000 FROM outbox WHERE topic = '%s'", topic);
        assert_int_equal(ts_relay_stop(&relay, SIGKILL, 5000), 128 + SIGKILL);
        ts_relay_start(&relay, "poll_interval = \"1s\"; batch_size = 500;", NULL);
        assert_true(ts_wait_drained(c, topics, 120000));
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        ts_consume(topics, 50000, 120000, 2000, &m);
        ts_verify(c, topics, &m, false, &v);
        fprintf(stderr, "sigkill: lost %zu, duplicates %zu (batch size 500)\n", v.missing, v.duplicates);
        assert_int_equal(v.expected, 50000);
        assert_int_equal(v.missing, 0);
        assert_true(v.duplicates <= 500);
        assert_int_equal(v.mismatched + v.unexpected + v.order_violations, 0);
        ts_msgs_free(&m);
        free(topic);
        PQfinish(c);
}

static void write_file(const char *path, const char *text) {
        FILE *f = fopen(path, "w");

        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

/* SIGHUP with a broken file keeps the old settings and names FILE:LINE; a valid file applies
 * live settings and names the ones that need a restart. */
static void reload(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("sd-reload");
        const char *topics[] = { topic, NULL };
        struct ts_relay relay;
        char conf[2048], expect[512];

        (void)state;
        ts_relay_start(&relay, "poll_interval = \"1s\";", NULL);
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));

        snprintf(conf, sizeof(conf),
                 "postgres = { conninfo = \"%s\"; };\n"
                 "kafka = { bootstrap_servers = \"%s\"; };\n"
                 "relay = { batch_size = 0; };\n" TS_HTTP_GROUP,
                 ts_conninfo(), ts_env("KAFKA_BOOTSTRAP"));
        write_file(relay.conf, conf);
        kill(relay.pid, SIGHUP);
        snprintf(expect, sizeof(expect),
                 "reload failed, keeping the running settings: %s:3: relay.batch_size", relay.conf);
        if (!ts_relay_log_wait(&relay, expect, 5000)) {
                ts_relay_dump_log(&relay);
                fail_msg("no FILE:LINE error for the broken reload");
        }
        ts_pg_exec(c, "SELECT outbox_enqueue('%s', 'k', 'after a bad reload'::text)", topic);
        assert_true(ts_wait_drained(c, topics, 10000));

        snprintf(conf, sizeof(conf),
                 "postgres = { conninfo = \"%s application_name=changed\"; };\n"
                 "kafka = { bootstrap_servers = \"%s\"; };\n"
                 "relay = { poll_interval = \"1s\"; batch_size = 7; };\n"
                 "log = { level = \"debug\"; };\n" TS_HTTP_GROUP,
                 ts_conninfo(), ts_env("KAFKA_BOOTSTRAP"));
        write_file(relay.conf, conf);
        kill(relay.pid, SIGHUP);
        assert_true(ts_relay_log_wait(&relay, "configuration reloaded", 5000));
        assert_true(ts_relay_log_wait(
                &relay, "postgres.conninfo changed; that takes effect only after a restart", 1000));
        ts_pg_exec(c, "SELECT outbox_enqueue('%s', 'k', 'after a good reload'::text)", topic);
        assert_true(ts_wait_drained(c, topics, 10000));
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        ts_pg_exec(c, "DELETE FROM outbox WHERE topic = '%s'", topic);
        free(topic);
        PQfinish(c);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(notify_protocol, ts_teardown),
                cmocka_unit_test_teardown(status_shows_breaker, ts_teardown),
                cmocka_unit_test_teardown(reload, ts_teardown),
                cmocka_unit_test_teardown(sigterm_drains, ts_teardown),
                cmocka_unit_test_teardown(sigkill_restart, ts_teardown),
        };

        ts_env("PGPORT");
        ts_env("KAFKA_BOOTSTRAP");
        ts_env("MOCK_KAFKA_BIN");
        return cmocka_run_group_tests(tests, NULL, NULL);
}
