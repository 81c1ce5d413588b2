/* test_mock_faults.c -- Broker faults via mock-kafka and one oversized row on the real broker: all other rows arrive. */
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

/* Settings that let faults resolve within seconds (DESIGN §4: timeout -> retry -> breaker). */
#define FAST_RELAY "finish = \"mark\"; batch_timeout = \"10s\"; poll_interval = \"1s\";"
#define FAST_KAFKA "message_timeout_ms = 3000; reconnect_backoff_max_ms = 500;"
/* librdkafka's per-MessageSet debug lines in the relay's log show that a fault reached the producer. */
#define MSG_DEBUG "debug = \"msg\";"
#define FAST_GROUPS                                      \
        "retry = { base = \"100ms\"; cap = \"1s\"; };\n" \
        "breaker = { cooldown = \"1s\"; cooldown_max = \"3s\"; };\n"

/* ---- mock-kafka ---- */

/* Static, so the teardown still finds it after a failed test longjmp'd out of its frame
 * (ts_teardown keeps a pointer to it). */
static struct ts_mock mock;

/* ts_mock_cmd() with printf formatting; echoes the command to the test's output. */
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

/* ---- a steady writer ---- */

/* Static, so the scenarios' inject functions can wait on it. */
static struct ts_load *load;

/* Waits for the writer (500 rows/s in every scenario) with room for a slow machine. */
static void load_wait(int rows) {
        ts_load_wait(load, rows, 30000);
}

/* ---- teardown ---- */

/* ts_teardown() (which also stops a writer a failed test left) and the mock stopped cleanly
 * (SIGTERM, reaped, pipes closed). */
static int teardown(void **state) {
        if (mock.pid > 0)
                ts_mock_stop(&mock);
        ts_teardown(state);
        load = NULL;
        return 0;
}

/* ---- the mock scenarios ---- */

/* Injects the faults while the load runs; returns how many of `evidence` lines the relay's
 * log must show at least, so a fault that never reached the producer fails the test. */
typedef int (*inject_fn)(void);

/* What a scenario's faults may cost. A duplicate needs a delivery Kafka stored whose ack the
 * relay did not get in time (DESIGN §1.2); an attempt is spent only by a row that failed while
 * its partition took others of the same batch (README, "Attempts and dead letters"). */
struct scenario {
        const char *name;
        int rows;
        int per_second;
        inject_fn inject;
        const char *evidence; /* a relay log line showing the fault hit */
        /* Batches whose deliveries Kafka may have stored without the relay hearing of it in
         * time: 0 when every fault is an error answer that holds up nothing (the mock stores
         * nothing it answers with an error). */
        int lost_acks;
        bool batches_fail; /* the faults outlast message.timeout.ms: some batches fail */
};

/* The relay's default relay.batch_size (etc/outbox-relay.conf); FAST_RELAY keeps it. */
#define DEFAULT_BATCH 2000

/* Starts a mock cluster with the topic, the relay against it and the load; the scenario injects
 * its faults. Then: drained, every row in the mock topic exactly as written, per-key order kept,
 * nothing dead-lettered; duplicates, attempts and breaker openings within what the faults
 * allow. */
static void mock_scenario(const struct scenario *s) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("mock-fault");
        const char *topics[] = { topic, NULL };
        struct ts_relay relay;
        struct ts_relay_log_stats st;
        struct ts_msgs msgs;
        struct ts_verify v;
        int64_t t0 = ts_now_ms(), attempts, dead;
        long long dup_max;
        int evidence_min, evidence;

        ts_pg_install_copy(c);
        /* One broker; the topic (3 partitions) exists before the relay asks for its metadata. */
        ts_mock_start(&mock, topic, 3);
        ts_relay_start_opts(&relay,
                            &(struct ts_relay_opts){ .bootstrap = mock.bootstrap,
                                                     .relay_group = FAST_RELAY,
                                                     .kafka_extra = FAST_KAFKA " " MSG_DEBUG,
                                                     .extra_groups = FAST_GROUPS,
                                                     .log_level = "debug" });
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));
        load = ts_load_start(topic, s->rows, s->per_second, 100);
        evidence_min = s->inject();
        assert_int_equal(ts_load_finish(load), s->rows);
        load = NULL;
        if (!ts_wait_drained(c, topics, 60000)) {
                ts_relay_dump_log(&relay);
                fail_msg("%s: not drained 60 s after the load", s->name);
        }
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);

        dead = ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s' AND dead_at IS NOT NULL", topic);
        attempts = ts_pg_int(c, "SELECT coalesce(sum(attempts), 0) FROM outbox WHERE topic = '%s'", topic);
        evidence = ts_relay_log_count(&relay, s->evidence);
        ts_relay_log_stats(&relay, &st);
        /* Only rows the relay saw fail can come twice, and at most a batch per lost ack. */
        dup_max = ts_relay_log_resendable(&st);
        if (dup_max > (long long)s->lost_acks * DEFAULT_BATCH)
                dup_max = (long long)s->lost_acks * DEFAULT_BATCH;
        ts_consume_from(mock.bootstrap, topics, (size_t)s->rows, 60000, 1500, &msgs);
        ts_verify(c, topics, &msgs, false, &v);
        fprintf(stderr,
                "%s: %zu committed, %zu consumed, %zu distinct, duplicates %zu (at most %lld), missing %zu,"
                " dead-lettered %lld, attempts spent %lld (at most %lld), '%s' %d (want >= %d),"
                " batches with nothing delivered %d (%lld rows), batches partly delivered %d,"
                " breaker opened %d, probes failed %d, %lld ms (log %s)\n",
                s->name, v.expected, v.consumed, v.consumed - v.duplicates - v.unexpected, v.duplicates,
                dup_max, v.missing, (long long)dead, (long long)attempts, st.partial_failed_rows, s->evidence,
                evidence, evidence_min, st.failed_batches, st.failed_batch_rows, st.partial_batches,
                st.breaker_opened, st.breaker_reopened, (long long)(ts_now_ms() - t0), relay.log);
        if (dead != 0 || v.missing || v.mismatched || v.unexpected || v.order_violations)
                ts_relay_dump_log(&relay);
        assert_true(evidence >= evidence_min);
        assert_int_equal(dead, 0);
        assert_int_equal(v.expected, s->rows);
        assert_int_equal(v.missing, 0);
        assert_int_equal(v.mismatched, 0);
        assert_int_equal(v.unexpected, 0);
        assert_int_equal(v.order_violations, 0);
        assert_true((long long)v.duplicates <= dup_max);
        /* No attempt is spent in a batch that delivered nothing: only rows of partly delivered
         * batches may have spent one. */
        assert_true(attempts <= st.partial_failed_rows);
        if (s->batches_fail)
                assert_true(st.failed_batches + st.partial_batches >= 1);
        else
                assert_int_equal(st.failed_batches + st.partial_batches, 0);
        /* Every failed batch takes message.timeout.ms (3 s): no fault here lasts long enough for
         * the 5 consecutive failures that open the breaker (and the 20-batch window never fills
         * half with failures). */
        assert_int_equal(st.breaker_opened + st.breaker_reopened, 0);
        ts_msgs_free(&msgs);
        ts_mock_stop(&mock);
        ts_pg_exec(c, "DELETE FROM outbox WHERE topic = '%s'", topic);
        free(topic);
        PQfinish(c);
}

/* NOT_ENOUGH_REPLICAS on Produce, three bursts during the load (librdkafka retries them). */
static int inject_not_enough_replicas(void) {
        load_wait(300);
        mock_cmd("errors Produce NOT_ENOUGH_REPLICAS NOT_ENOUGH_REPLICAS NOT_ENOUGH_REPLICAS");
        load_wait(1500);
        mock_cmd("errors Produce NOT_ENOUGH_REPLICAS NOT_ENOUGH_REPLICAS NOT_ENOUGH_REPLICAS"
                 " NOT_ENOUGH_REPLICAS NOT_ENOUGH_REPLICAS");
        load_wait(2500);
        mock_cmd("errors Produce NOT_ENOUGH_REPLICAS NOT_ENOUGH_REPLICAS NOT_ENOUGH_REPLICAS");
        return 11;
}

static void not_enough_replicas(void **state) {
        (void)state;
        /* librdkafka retries them within message.timeout.ms: no batch fails, nothing is stored
         * twice (an error answer stores nothing). */
        mock_scenario(&(struct scenario){ "not_enough_replicas", 3000, 500, inject_not_enough_replicas,
                                          "encountered error: Broker: Not enough in-sync replicas", 0,
                                          false });
}

/* REQUEST_TIMED_OUT answered at once, then twice only after 3 s (= message.timeout.ms). The
 * broker-scoped errors come last: once broker 1 has an error stack for Produce, even an empty
 * one, the mock never looks at the cluster-wide stack for it again (librdkafka 2.0.2). */
static int inject_request_timeouts(void) {
        load_wait(300);
        mock_cmd("errors Produce REQUEST_TIMED_OUT REQUEST_TIMED_OUT REQUEST_TIMED_OUT");
        load_wait(1200);
        mock_cmd("errors Produce REQUEST_TIMED_OUT REQUEST_TIMED_OUT");
        load_wait(2000);
        mock_cmd("broker-errors 1 Produce REQUEST_TIMED_OUT 3000 REQUEST_TIMED_OUT 3000");
        /* The five immediate errors must show; a delayed answer can arrive after its messages
         * already timed out and were purged, and then librdkafka does not log it. */
        return 5;
}

static void request_timeouts(void **state) {
        (void)state;
        /* The error answers store nothing, but the two late ones hold up the answers queued
         * behind them on the connection (librdkafka 2.0.2 sends one Produce request per
         * partition): those requests were stored and time out in flight, one batch's worth at
         * most, and that batch fails. */
        mock_scenario(&(struct scenario){ "request_timeouts", 3000, 500, inject_request_timeouts,
                                          "encountered error: Broker: Request timed out", 1, true });
}

/* Every response delayed by 5 s (longer than message.timeout.ms) for 10 s, then none: batches
 * fail although the broker stored them, so their rows are published again. */
static int inject_latency(void) {
        load_wait(500);
        mock_cmd("rtt 1 5000");
        sleep(10);
        mock_cmd("rtt 1 0");
        return 1;
}

static void broker_latency(void **state) {
        (void)state;
        /* Every batch produced during the 10 s (each fails after 3 s; at most 4) was stored and
         * may come again. */
        mock_scenario(&(struct scenario){ "broker_latency", 3000, 500, inject_latency, "nothing delivered", 4,
                                          true });
}

/* The broker goes down while rows are being published and comes back 8 s later. */
static int inject_broker_down(void) {
        load_wait(1000);
        mock_cmd("broker-down 1");
        sleep(8);
        mock_cmd("broker-up 1");
        return 1;
}

static void broker_down(void **state) {
        (void)state;
        /* A request in flight when the broker went down, and one answered too late when it came
         * back. */
        mock_scenario(&(struct scenario){ "broker_down", 4000, 500, inject_broker_down, "nothing delivered",
                                          2, true });
}

/* ---- innocent neighbours on the real broker ---- */

/* The most messages in one MessageSet the broker refused as too large (librdkafka's debug line
 * "MessageSet with N message(s) ... encountered error: Broker: Message size too large"). */
static int largest_refused_set(const struct ts_relay *r) {
        FILE *f = fopen(r->log, "r");
        char line[4096];
        int most = 0;

        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f)) {
                const char *p = strstr(line, "MessageSet with ");
                int n;

                if (p && strstr(line, "encountered error: Broker: Message size too large") &&
                    sscanf(p, "MessageSet with %d", &n) == 1 && n > most)
                        most = n;
        }
        fclose(f);
        return most;
}

/* One round: a topic with max.message.bytes=20000, 500 rows of ~100 bytes (keys k0..k49) and
 * one 60000-byte incompressible row of key k7 in the middle (below librdkafka's 1 MB
 * message.max.bytes, so only the broker refuses it). Exactly that row is dead-lettered with the
 * reason; every other row arrives once, as written, in key order, without spending an attempt.
 * `shared`: the big row must have shared its refused produce request with innocent rows. */
static void neighbours_round(const char *name, const char *kafka_extra, bool shared) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("innocent");
        const char *topics[] = { topic, NULL };
        struct ts_relay relay;
        struct ts_msgs msgs;
        struct ts_verify v;
        int64_t big, innocent_attempts, t0 = ts_now_ms();
        int refused_set;
        PGresult *res;
        char sql[300];

        ts_pg_install_copy(c);
        ts_create_topic(topic, 3, "max.message.bytes", "20000");
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload, headers) SELECT '%s', 'k' || (g %% 50),"
                   " convert_to(rpad('row ' || g || ' ', 100, 'abcdefghij'), 'UTF8'), "
                   "jsonb_build_object('n', g::text)"
                   " FROM generate_series(1, 250) g",
                   topic);
        big = ts_pg_int(c,
                        "SELECT outbox_enqueue('%s', 'k7',"
                        " (SELECT string_agg(set_byte('\\x00'::bytea, 0, (random() * 255)::int), ''::bytea)"
                        "  FROM generate_series(1, 60000)), '{\"big\": \"yes\"}')",
                        topic);
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload, headers) SELECT '%s', 'k' || (g %% 50),"
                   " convert_to(rpad('row ' || g || ' ', 100, 'abcdefghij'), 'UTF8'), "
                   "jsonb_build_object('n', g::text)"
                   " FROM generate_series(251, 500) g",
                   topic);
        assert_int_equal(ts_pg_int(c, "SELECT length(payload) FROM outbox WHERE id = %lld", (long long)big),
                         60000);

        /* All 501 rows are pending before the relay starts: its first batch holds them all. */
        ts_relay_start_opts(
                &relay,
                &(struct ts_relay_opts){ .relay_group = "finish = \"mark\"; poll_interval = \"1s\";",
                                         .kafka_extra = kafka_extra,
                                         .log_level = "debug" });
        if (!ts_wait_drained(c, topics, 60000)) {
                ts_relay_dump_log(&relay);
                fail_msg("%s: not drained within 60 s", name);
        }
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);

        snprintf(sql, sizeof(sql),
                 "SELECT id, last_error, attempts FROM outbox WHERE topic = '%s'"
                 " AND dead_at IS NOT NULL ORDER BY id",
                 topic);
        res = PQexec(c, sql);
        assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
        for (int i = 0; i < PQntuples(res); i++)
                fprintf(stderr, "%s: row %s dead-lettered (attempts %s): %s\n", name, PQgetvalue(res, i, 0),
                        PQgetvalue(res, i, 2), PQgetvalue(res, i, 1));
        if (PQntuples(res) != 1)
                ts_relay_dump_log(&relay);
        assert_int_equal(PQntuples(res), 1);
        assert_int_equal(strtoll(PQgetvalue(res, 0, 0), NULL, 10), big);
        assert_non_null(strstr(PQgetvalue(res, 0, 1), "MSG_SIZE_TOO_LARGE"));
        PQclear(res);
        innocent_attempts = ts_pg_int(c,
                                      "SELECT coalesce(sum(attempts), 0) FROM outbox WHERE topic = '%s'"
                                      " AND dead_at IS NULL",
                                      topic);
        refused_set = largest_refused_set(&relay);

        ts_consume(topics, 500, 60000, 1500, &msgs);
        ts_verify(c, topics, &msgs, true, &v);
        fprintf(stderr,
                "%s: %zu expected, %zu consumed, duplicates %zu, missing %zu, attempts spent by the innocent "
                "%lld,"
                " largest refused MessageSet %d message(s), %lld ms (log %s)\n",
                name, v.expected, v.consumed, v.duplicates, v.missing, (long long)innocent_attempts,
                refused_set, (long long)(ts_now_ms() - t0), relay.log);
        if (v.missing || v.mismatched || v.unexpected || v.order_violations || v.duplicates)
                ts_relay_dump_log(&relay);
        assert_int_equal(v.expected, 500);
        assert_int_equal(v.missing, 0);
        assert_int_equal(v.mismatched, 0);
        assert_int_equal(v.unexpected, 0);
        assert_int_equal(v.order_violations, 0);
        /* No crash, no lost connection: no duplicates either (DESIGN §1.2). */
        assert_int_equal(v.duplicates, 0);
        assert_int_equal(innocent_attempts, 0);
        /* The refusal really happened at the broker (and, when asked for, hit innocent rows too). */
        assert_true(refused_set >= 1);
        if (shared)
                assert_true(refused_set > 1);
        ts_msgs_free(&msgs);
        ts_pg_exec(c, "DELETE FROM outbox WHERE topic = '%s'", topic);
        free(topic);
        PQfinish(c);
}

/* DESIGN §4 "innocent neighbours", in two rounds. With batch_size = 16000 librdkafka's batches of
 * small rows stay below the topic's limit and the 60000-byte row travels alone; the partition's
 * next in-flight request then fails with OUT_OF_ORDER_SEQUENCE_NUMBER and librdkafka recovers it.
 * With librdkafka's default batch size the big row shares its (lz4) MessageSet with innocent rows
 * of its partition, the broker refuses all of them, and the relay must isolate the culprit. */
static void innocent_neighbours(void **state) {
        (void)state;
        neighbours_round("innocent_neighbours(batch_size=16000)", "batch_size = 16000; " MSG_DEBUG, false);
        neighbours_round("innocent_neighbours(shared request)", MSG_DEBUG, true);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(not_enough_replicas, teardown),
                cmocka_unit_test_teardown(request_timeouts, teardown),
                cmocka_unit_test_teardown(broker_latency, teardown),
                cmocka_unit_test_teardown(broker_down, teardown),
                cmocka_unit_test_teardown(innocent_neighbours, teardown),
        };

        /* A mock that died must not kill the test run through a write to its pipe. */
        signal(SIGPIPE, SIG_IGN);
        ts_env("PGPORT");
        ts_env("KAFKA_BOOTSTRAP");
        ts_env("MOCK_KAFKA_BIN");
        return cmocka_run_group_tests(tests, NULL, NULL);
}
