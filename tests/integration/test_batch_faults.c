/* test_batch_faults.c -- One batch's rules under faults (mock-kafka and the real broker): probes, re-sends, back-pressure, order per (topic, key), impossible topics. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "support.h"

#define FAST_KAFKA "message_timeout_ms = 2000; reconnect_backoff_max_ms = 500;"
#define FAST_GROUPS                                         \
        "retry = { base = \"100ms\"; cap = \"500ms\"; };\n" \
        "breaker = { failure_threshold = 2; cooldown = \"1s\"; cooldown_max = \"2s\"; };\n"

/* Static, so the teardown still finds it after a failed test longjmp'd out of its frame. */
static struct ts_mock mock;

static void mock_cmd(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void mock_cmd(const char *fmt, ...) {
        char cmd[512];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(cmd, sizeof(cmd), fmt, ap);
        va_end(ap);
        ts_mock_cmd(&mock, cmd);
        fprintf(stderr, "  mock> %s\n", cmd);
}

static int teardown(void **state) {
        if (mock.pid > 0)
                ts_mock_stop(&mock);
        ts_teardown(state);
        return 0;
}

static int64_t pending(PGconn *c, const char *topic) {
        return ts_pg_int(c,
                         "SELECT count(*) FROM outbox WHERE topic = '%s' AND published_at IS NULL"
                         " AND dead_at IS NULL",
                         topic);
}

/* Waits until no row of `topic` is pending; false after timeout_ms. */
static bool drained_within(PGconn *c, const char *topic, int timeout_ms) {
        int64_t until = ts_now_ms() + timeout_ms;

        while (ts_now_ms() < until) {
                if (pending(c, topic) == 0)
                        return true;
                usleep(100 * 1000);
        }
        return false;
}

/* Consumes both topics from the mock and checks every committed row arrived as written, in per-key
 * order, with nothing dead-lettered unless `dead_ok`. */
static void verify_mock(PGconn *c, const char *const *topics, size_t rows, size_t dead_ok) {
        struct ts_msgs msgs;
        struct ts_verify v;

        ts_consume_from(mock.bootstrap, topics, rows - dead_ok, 30000, 1500, &msgs);
        ts_verify(c, topics, &msgs, true, &v);
        fprintf(stderr,
                "  verify: expected %zu, consumed %zu, missing %zu, duplicates %zu, order violations %zu\n",
                v.expected, v.consumed, v.missing, v.duplicates, v.order_violations);
        assert_int_equal(v.expected, rows - dead_ok);
        assert_int_equal(v.missing, 0);
        assert_int_equal(v.mismatched, 0);
        assert_int_equal(v.unexpected, 0);
        assert_int_equal(v.order_violations, 0);
        ts_msgs_free(&msgs);
}

/* Defect 1: the breaker's probe must not stall the relay behind one broken partition. Topic ta
 * lives on broker 1, tb on broker 2. Broker 1 goes down with one ta row pending: its batches
 * fail, the breaker opens. Twenty tb rows come; ta's partition is left without a leader and the
 * broker comes back. The probes must find tb's rows healthy: all 20 go out while ta still has
 * no leader (a probe of the oldest row alone kept failing on ta for over a minute). */
static void probe_not_stalled_by_one_partition(void **state) {
        PGconn *c = ts_pg_connect();
        char *ta = ts_topic("probe-a"), *tb = ts_topic("probe-b");
        const char *topics[] = { ta, tb, NULL };
        struct ts_relay relay;
        int64_t t0;

        (void)state;
        ts_pg_install_copy(c);
        ts_mock_start_n(&mock, ta, 1, 2);
        mock_cmd("topic-create %s 1 1", tb);
        mock_cmd("leader %s 0 1", ta);
        mock_cmd("leader %s 0 2", tb);
        ts_relay_start_opts(
                &relay,
                &(struct ts_relay_opts){ .bootstrap = mock.bootstrap,
                                         .relay_group = "poll_interval = \"1s\"; batch_timeout = \"8s\";",
                                         .kafka_extra = FAST_KAFKA,
                                         .extra_groups = FAST_GROUPS });
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));
        mock_cmd("broker-down 1");
        ts_pg_exec(c, "SELECT outbox_enqueue('%s', 'a', 'ta row'::text)", ta);
        if (!ts_relay_log_wait(&relay, "circuit breaker opened", 30000)) {
                ts_relay_dump_log(&relay);
                fail_msg("the breaker did not open while ta's only broker was down");
        }
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'b' || g, convert_to('tb row ' || "
                   "g, 'UTF8')"
                   " FROM generate_series(1, 20) g",
                   tb);
        mock_cmd("leader %s 0 -1", ta);
        mock_cmd("broker-up 1");
        t0 = ts_now_ms();
        if (!drained_within(c, tb, 30000)) {
                ts_relay_dump_log(&relay);
                fail_msg("the healthy topic's rows stayed pending behind the broken partition (%lld of 20)",
                         (long long)pending(c, tb));
        }
        fprintf(stderr,
                "probe: 20 healthy rows out %lld ms after the broker came back, ta still leaderless\n",
                (long long)(ts_now_ms() - t0));
        assert_int_equal(pending(c, ta), 1);
        mock_cmd("leader %s 0 1", ta);
        if (!drained_within(c, ta, 60000)) {
                ts_relay_dump_log(&relay);
                fail_msg("the ta row did not follow once its partition had a leader");
        }
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        assert_int_equal(
                ts_pg_int(c,
                          "SELECT count(*) FROM outbox WHERE topic IN ('%s', '%s') AND dead_at IS NOT NULL",
                          ta, tb),
                0);
        verify_mock(c, topics, 21, 0);
        ts_mock_stop(&mock);
        free(ta);
        free(tb);
        PQfinish(c);
}

/* Defect 2: a row the broker rejected while a later row of its key was acknowledged must never
 * be sent again behind it. One produce request per message; the first Produce fails with
 * MSG_SIZE_TOO_LARGE; six rows of key k in one transaction. Kafka must hold m2..m6 in order,
 * m1 must be dead-lettered with the order reason, and the log must say so (it held
 * m2 m3 m4 m5 m6 m1, silently). */
static void resend_never_overtakes(void **state) {
        PGconn *c = ts_pg_connect();
        char *t = ts_topic("overtake");
        const char *topics[] = { t, NULL };
        struct ts_relay relay;
        int64_t first;
        PGresult *res;
        char sql[256];

        (void)state;
        ts_pg_install_copy(c);
        ts_mock_start(&mock, t, 1);
        ts_relay_start_opts(
                &relay,
                &(struct ts_relay_opts){ .bootstrap = mock.bootstrap,
                                         .relay_group = "poll_interval = \"1s\"; batch_timeout = \"8s\";",
                                         .kafka_extra = FAST_KAFKA " batch_num_messages = 1; linger_ms = 0;",
                                         .extra_groups = FAST_GROUPS });
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));
        /* A first row, so metadata and the producer id are settled before the fault. */
        ts_pg_exec(c, "SELECT outbox_enqueue('%s', 'warm', 'warm-up'::text)", t);
        assert_true(drained_within(c, t, 20000));
        mock_cmd("errors Produce MSG_SIZE_TOO_LARGE");
        first = ts_pg_int(c,
                          "WITH i AS (INSERT INTO outbox (topic, key, payload) SELECT '%s', 'k',"
                          " convert_to('m' || g, 'UTF8') FROM generate_series(1, 6) g RETURNING id)"
                          " SELECT min(id) FROM i",
                          t);
        if (!drained_within(c, t, 30000)) {
                ts_relay_dump_log(&relay);
                fail_msg("the six rows were not finished");
        }
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        snprintf(sql, sizeof(sql),
                 "SELECT id, last_error FROM outbox WHERE topic = '%s' AND dead_at IS NOT NULL", t);
        res = PQexec(c, sql);
        assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
        for (int i = 0; i < PQntuples(res); i++)
                fprintf(stderr, "  dead: row %s: %s\n", PQgetvalue(res, i, 0), PQgetvalue(res, i, 1));
        if (PQntuples(res) != 1)
                ts_relay_dump_log(&relay);
        assert_int_equal(PQntuples(res), 1);
        assert_int_equal(strtoll(PQgetvalue(res, 0, 0), NULL, 10), first);
        assert_non_null(strstr(PQgetvalue(res, 0, 1), "MSG_SIZE_TOO_LARGE"));
        assert_non_null(strstr(PQgetvalue(res, 0, 1), "would break per-key order"));
        PQclear(res);
        assert_true(ts_relay_log_wait(&relay, "per-key order: 1 rows dead-lettered", 1000));
        verify_mock(c, topics, 7, 1);
        ts_mock_stop(&mock);
        free(t);
        PQfinish(c);
}

/* Defect 4: a full librdkafka queue is back-pressure handled in the loop: the watchdog keeps
 * being served and a double SIGTERM ends the relay at once (WATCHDOG=1 came at 7.5 s gaps and a
 * double SIGTERM took 5.3 s while the queue was full and the brokers down). */
static void queue_full_serves_watchdog_and_signals(void **state) {
        PGconn *c = ts_pg_connect();
        char *t = ts_topic("queue-full");
        struct ts_relay relay;
        struct ts_notify n;
        int pings, status;
        int64_t t0;

        (void)state;
        ts_mock_start(&mock, t, 1);
        ts_notify_open(&n);
        ts_relay_start_opts(
                &relay,
                &(struct ts_relay_opts){
                        .bootstrap = mock.bootstrap,
                        .relay_group = "poll_interval = \"1s\";",
                        .kafka_extra = "queue_buffering_max_messages = 5; reconnect_backoff_max_ms = 500;",
                        .notify_socket = n.path,
                        .watchdog_usec = "2000000" });
        assert_true(ts_notify_wait(&n, "READY=1", 20000));
        mock_cmd("broker-down -1");
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'k' || (g %% 10),"
                   " convert_to('row ' || g, 'UTF8') FROM generate_series(1, 200) g",
                   t);
        ts_notify_drain(&n, 1500); /* the batch reaches the full queue */
        pings = ts_notify_count(&n, "WATCHDOG=1");
        ts_notify_drain(&n, 6000);
        pings = ts_notify_count(&n, "WATCHDOG=1") - pings;
        fprintf(stderr, "queue full: %d watchdog pings in 6 s (WATCHDOG_USEC = 2 s)\n", pings);
        assert_true(pings >= 4);
        assert_int_equal(pending(c, t), 200);
        t0 = ts_now_ms();
        kill(relay.pid, SIGTERM);
        assert_true(ts_notify_wait(&n, "STOPPING=1", 1500));
        kill(relay.pid, SIGTERM);
        status = ts_relay_stop(&relay, SIGTERM, 10000);
        fprintf(stderr, "queue full: double SIGTERM -> exit %d after %lld ms\n", status,
                (long long)(ts_now_ms() - t0));
        assert_true(ts_now_ms() - t0 < 2500);
        assert_int_equal(status, 1);
        /* Nothing was lost: the rows are all still pending. */
        assert_int_equal(pending(c, t), 200);
        ts_notify_close(&n);
        ts_pg_exec(c, "DELETE FROM outbox WHERE topic = '%s'", t);
        ts_mock_stop(&mock);
        free(t);
        PQfinish(c);
}

/* Order lives per (topic, key). A partition of topic ta is out, so ta's keys on it are held
 * back; the same keys in topic tb must go on at once (a held-back key used to be left out of
 * the claim in every topic, for the whole pause). */
static void hold_back_is_per_topic(void **state) {
        PGconn *c = ts_pg_connect();
        char *ta = ts_topic("scope-a"), *tb = ts_topic("scope-b");
        const char *topics[] = { ta, tb, NULL };
        struct ts_relay relay;
        int64_t t0, held;

        (void)state;
        ts_pg_install_copy(c);
        ts_mock_start_n(&mock, ta, 3, 3);
        for (int p = 0; p < 3; p++)
                mock_cmd("leader %s %d %d", ta, p, p + 1);
        mock_cmd("topic-create %s 1 1", tb);
        mock_cmd("leader %s 0 2", tb);
        /* Key pauses last batch_timeout / 2 = 10 s at first. */
        ts_relay_start_opts(
                &relay,
                &(struct ts_relay_opts){ .bootstrap = mock.bootstrap,
                                         .relay_group = "poll_interval = \"1s\"; batch_timeout = \"20s\";",
                                         .kafka_extra = FAST_KAFKA,
                                         .extra_groups = FAST_GROUPS });
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));
        mock_cmd("broker-down 1");
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'k' || g, convert_to('ta ' || g, "
                   "'UTF8')"
                   " FROM generate_series(1, 30) g",
                   ta);
        if (!ts_relay_log_wait(&relay, "holding back", 20000)) {
                ts_relay_dump_log(&relay);
                fail_msg("no key was held back for the dead partition");
        }
        /* The batch that held them back commits its delivered rows right after. */
        for (int i = 0; i < 50 && (held = pending(c, ta)) == 30; i++)
                usleep(100 * 1000);
        assert_true(held > 0 && held < 30);
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'k' || g, convert_to('tb ' || g, "
                   "'UTF8')"
                   " FROM generate_series(1, 30) g",
                   tb);
        t0 = ts_now_ms();
        if (!drained_within(c, tb, 5000)) {
                ts_relay_dump_log(&relay);
                fail_msg("topic tb's rows of keys held back in ta waited (%lld pending)",
                         (long long)pending(c, tb));
        }
        fprintf(stderr, "scope: %lld ta keys held back; tb's 30 rows out in %lld ms\n", (long long)held,
                (long long)(ts_now_ms() - t0));
        mock_cmd("broker-up 1");
        if (!drained_within(c, ta, 60000)) {
                ts_relay_dump_log(&relay);
                fail_msg("ta's held-back rows did not follow");
        }
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        verify_mock(c, topics, 60, 0);
        ts_mock_stop(&mock);
        free(ta);
        free(tb);
        PQfinish(c);
}

/* Rows whose topic Kafka can never accept (written by plain INSERTs, past outbox_enqueue's
 * check) are dead-lettered at once with the real reason; the rows around them arrive. */
static void impossible_topics_dead_lettered(void **state) {
        PGconn *c = ts_pg_connect();
        char *good = ts_topic("names");
        const char *topics[] = { good, NULL };
        struct ts_relay relay;
        struct ts_msgs msgs;
        struct ts_verify v;
        PGresult *res;

        (void)state;
        ts_pg_install_copy(c);
        ts_pg_exec(c, "DELETE FROM outbox WHERE topic IN ('bad topic!', '') OR length(topic) = 300");
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload) VALUES ('%s', 'k', 'before'),"
                   " ('bad topic!', 'k', 'x'), ('', 'k', 'y'), (repeat('t', 300), 'k', 'z'), ('%s', 'k', "
                   "'after')",
                   good, good);
        ts_relay_start(&relay, "poll_interval = \"1s\";", NULL);
        if (!ts_wait_drained(c, topics, 30000)) {
                ts_relay_dump_log(&relay);
                fail_msg("the good rows did not arrive");
        }
        for (int i = 0; i < 100 &&
             ts_pg_int(c,
                       "SELECT count(*) FROM outbox WHERE (topic IN ('bad topic!', '')"
                       " OR length(topic) = 300) AND dead_at IS NOT NULL") < 3;
             i++)
                usleep(100 * 1000);
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        res = PQexec(c,
                     "SELECT topic, attempts, last_error FROM outbox WHERE (topic IN ('bad topic!', '')"
                     " OR length(topic) = 300) ORDER BY id");
        assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
        assert_int_equal(PQntuples(res), 3);
        for (int i = 0; i < 3; i++) {
                fprintf(stderr, "  dead: '%.20s': attempts %s: %s\n", PQgetvalue(res, i, 0),
                        PQgetvalue(res, i, 1), PQgetvalue(res, i, 2));
                assert_non_null(strstr(PQgetvalue(res, i, 2), "can never exist in Kafka"));
                assert_string_equal(PQgetvalue(res, i, 1), "1");
        }
        assert_non_null(strstr(PQgetvalue(res, 0, 2), "may hold only ASCII letters"));
        assert_non_null(strstr(PQgetvalue(res, 1, 2), "must not be empty"));
        assert_non_null(strstr(PQgetvalue(res, 2, 2), "at most 249 characters"));
        PQclear(res);
        assert_int_equal(ts_pg_int(c,
                                   "SELECT count(*) FROM outbox WHERE (topic IN ('bad topic!', '')"
                                   " OR length(topic) = 300) AND dead_at IS NULL"),
                         0);
        ts_consume(topics, 2, 30000, 1000, &msgs);
        ts_verify(c, topics, &msgs, false, &v);
        assert_int_equal(v.expected, 2);
        assert_int_equal(v.missing + v.mismatched + v.unexpected + v.order_violations + v.duplicates, 0);
        ts_msgs_free(&msgs);
        ts_pg_exec(c, "DELETE FROM outbox WHERE topic IN ('bad topic!', '') OR length(topic) = 300");
        free(good);
        PQfinish(c);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(probe_not_stalled_by_one_partition, teardown),
                cmocka_unit_test_teardown(resend_never_overtakes, teardown),
                cmocka_unit_test_teardown(queue_full_serves_watchdog_and_signals, teardown),
                cmocka_unit_test_teardown(hold_back_is_per_topic, teardown),
                cmocka_unit_test_teardown(impossible_topics_dead_lettered, teardown),
        };

        signal(SIGPIPE, SIG_IGN);
        ts_env("PGPORT");
        ts_env("KAFKA_BOOTSTRAP");
        ts_env("MOCK_KAFKA_BIN");
        return cmocka_run_group_tests(tests, NULL, NULL);
}
