/* test_faults.c -- Faults injected into the real servers: every committed row still arrives. */
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

#define ROWS 20000

static void verify_all(PGconn *c, const char *topic, size_t rows, const char *scenario) {
        const char *topics[] = {topic, NULL};
        struct ts_msgs m;
        struct ts_verify v;

        ts_consume(topics, rows, 120000, 2000, &m);
        ts_verify(c, topics, &m, false, &v);
        fprintf(stderr, "%s: %zu committed, %zu consumed, %zu distinct, duplicates %zu, missing %zu\n", scenario,
                v.expected, v.consumed, v.consumed - v.duplicates - v.unexpected, v.duplicates, v.missing);
        assert_int_equal(v.expected, rows);
        assert_int_equal(v.missing, 0);
        assert_int_equal(v.mismatched, 0);
        assert_int_equal(v.unexpected, 0);
        assert_int_equal(v.order_violations, 0);
        ts_msgs_free(&m);
}

/* The broker is stopped for 30 s during a 20,000-row load: the breaker opens, no row burns an
 * attempt or is dead-lettered, the breaker closes after the restart and every row arrives. */
static void kafka_outage(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("fault-kafka");
        const char *topics[] = {topic, NULL};
        struct ts_load *l;
        struct ts_relay relay;

        (void)state;
        ts_pg_install_copy(c);
        ts_relay_start_ex(&relay,
                       "finish = \"mark\"; poll_interval = \"1s\"; batch_timeout = \"10s\";",
                       "message_timeout_ms = 3000;",
                       "breaker = { failure_threshold = 3; cooldown = \"2s\"; cooldown_max = \"5s\"; };\n"
                       "retry = { base = \"100ms\"; cap = \"1s\"; };\n");
        /* Deliveries fail after 3 s instead of the default 5 s so the test sees several. */
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));
        l = ts_load_start(topic, ROWS, 500, 200);
        ts_load_wait(l, 2000);
        ts_testbed("kafka-stop");
        fprintf(stderr, "kafka_outage: broker stopped after %d rows\n", ts_load_written(l));
        if (!ts_relay_log_wait(&relay, "circuit breaker opened", 40000)) {
                ts_relay_dump_log(&relay);
                fail_msg("the breaker did not open");
        }
        /* While it is open nothing burns an attempt: the sum is the same after 25 s. Rows in
         * flight when the broker went away may have spent one attempt in the batch that saw it
         * go (some rows delivered, some not), never more. */
        {
                int64_t attempts_open = ts_pg_int(c, "SELECT coalesce(sum(attempts), 0) FROM outbox WHERE topic = '%s'", topic);

                sleep(25);
                assert_int_equal(ts_pg_int(c, "SELECT coalesce(sum(attempts), 0) FROM outbox WHERE topic = '%s'", topic),
                                 attempts_open);
                fprintf(stderr, "kafka_outage: attempts spent before the breaker opened: %lld\n",
                        (long long)attempts_open);
        }
        assert_int_equal(ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s' AND dead_at IS NOT NULL", topic), 0);
        assert_int_equal(ts_pg_int(c, "SELECT coalesce(max(attempts), 0) FROM outbox WHERE topic = '%s'", topic) <= 1, 1);
        ts_testbed("kafka-start");
        fprintf(stderr, "kafka_outage: broker restarted after %d rows\n", ts_load_written(l));
        assert_int_equal(ts_load_finish(l), ROWS);
        if (!ts_wait_drained(c, topics, 180000)) {
                ts_relay_dump_log(&relay);
                fail_msg("not drained after the broker came back");
        }
        assert_true(ts_relay_log_wait(&relay, "circuit breaker closed", 5000));
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        assert_int_equal(ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s' AND"
                                      " (attempts > 1 OR dead_at IS NOT NULL OR published_at IS NULL)", topic), 0);
        verify_all(c, topic, ROWS, "kafka_outage");
        ts_pg_exec(c, "DELETE FROM outbox WHERE topic = '%s'", topic);
        free(topic);
        PQfinish(c);
}

/* PostgreSQL restarted twice (pg_ctl restart -m fast) during a load: the relay reconnects and
 * drains; duplicates only from batches whose commit was cut off. */
static void postgres_restarts(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("fault-pg");
        const char *topics[] = {topic, NULL};
        struct ts_relay relay;

        (void)state;
        ts_pg_install_copy(c);
        ts_pg_exec(c, "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'key-' || (g %% 200),"
                      " convert_to('event ' || g, 'UTF8') FROM generate_series(1, %d) g", topic, ROWS);
        PQfinish(c);
        ts_relay_start(&relay, "poll_interval = \"1s\"; batch_size = 200;",
                       "retry = { base = \"100ms\"; cap = \"1s\"; };\n");
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));
        usleep(300000);
        ts_testbed("pg-restart");
        assert_true(ts_relay_log_wait(&relay, "connected to PostgreSQL again", 30000));
        usleep(300000);
        ts_testbed("pg-restart");
        c = ts_pg_connect();
        if (!ts_wait_drained(c, topics, 120000)) {
                ts_relay_dump_log(&relay);
                fail_msg("not drained after the restarts");
        }
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        assert_int_equal(ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s'", topic), 0);
        verify_all(c, topic, ROWS, "postgres_restarts");
        free(topic);
        PQfinish(c);
}

/* A topic Kafka refuses (authorization, through mock-kafka): its rows stay pending with the
 * reason and spend no attempt, the error is logged, other topics keep flowing; once the topic
 * is allowed again its rows follow. */
static void refused_topic(void **state) {
        PGconn *c = ts_pg_connect();
        char *good = ts_topic("fault-good"), *denied = ts_topic("fault-denied");
        const char *good_topics[] = {good, NULL}, *all_topics[] = {good, denied, NULL};
        struct ts_mock m;
        struct ts_relay relay;
        struct ts_msgs msgs;
        struct ts_verify v;
        char cmd[256];

        (void)state;
        ts_pg_install_copy(c);
        ts_mock_start(&m, good, 3);
        snprintf(cmd, sizeof(cmd), "topic-create %s 3", denied);
        ts_mock_cmd(&m, cmd);
        snprintf(cmd, sizeof(cmd), "topic-error %s TOPIC_AUTHORIZATION_FAILED", denied);
        ts_mock_cmd(&m, cmd);
        ts_relay_start_opts(&relay, &(struct ts_relay_opts){
                .bootstrap = m.bootstrap, .relay_group = "poll_interval = \"1s\"; batch_size = 100;",
                .kafka_extra = "message_timeout_ms = 3000; reconnect_backoff_max_ms = 500;"});
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));
        for (int round = 0; round < 5; round++)
                ts_pg_exec(c, "INSERT INTO outbox (topic, key, payload) SELECT"
                              " CASE WHEN g %% 3 = 0 THEN '%s' ELSE '%s' END, 'k' || (g %% 7), convert_to('r%d-' || g, 'UTF8')"
                              " FROM generate_series(1, 300) g", denied, good, round);
        if (!ts_wait_drained(c, good_topics, 60000)) {
                ts_relay_dump_log(&relay);
                fail_msg("the allowed topic did not flow past the refused one");
        }
        snprintf(cmd, sizeof(cmd), "topic '%s' refused by Kafka", denied);
        assert_true(ts_relay_log_wait(&relay, cmd, 1000));
        assert_int_equal(ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s' AND dead_at IS NULL"
                                      " AND published_at IS NULL AND attempts = 0", denied), 500);
        /* (librdkafka 2.0.2 reports the mock's refusal as message timeouts of a topic without
         * partitions; the relay sees a topic that takes nothing while others do.) */
        assert_int_equal(ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s' AND last_error IS NOT NULL",
                                   denied) > 0, 1);
        /* The operator fixes the ACL: the rows follow at the next check. */
        snprintf(cmd, sizeof(cmd), "topic-error %s NO_ERROR", denied);
        ts_mock_cmd(&m, cmd);
        if (!ts_wait_drained(c, all_topics, 90000)) {
                ts_relay_dump_log(&relay);
                fail_msg("the refused topic's rows did not follow once allowed");
        }
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        ts_consume_from(m.bootstrap, all_topics, 1500, 60000, 1500, &msgs);
        ts_verify(c, all_topics, &msgs, false, &v);
        fprintf(stderr, "refused_topic: %zu committed, %zu consumed, duplicates %zu, missing %zu\n", v.expected,
                v.consumed, v.duplicates, v.missing);
        assert_int_equal(v.expected, 1500);
        assert_int_equal(v.missing + v.mismatched + v.unexpected + v.order_violations, 0);
        assert_int_equal(ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic IN ('%s', '%s') AND dead_at IS NOT NULL",
                                   good, denied), 0);
        ts_msgs_free(&msgs);
        ts_mock_stop(&m);
        free(good);
        free(denied);
        PQfinish(c);
}

/* One partition's leader down (three mock brokers, one leader each) while rows keep coming:
 * the keys of that partition are held back, the other partitions keep flowing, nothing is
 * dead-lettered, and everything arrives once the broker is back. */
static void partition_outage(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("fault-partition");
        const char *topics[] = {topic, NULL};
        struct ts_load *l;
        struct ts_mock m;
        struct ts_relay relay;
        struct ts_msgs msgs;
        struct ts_verify v;
        char cmd[256];
        int64_t written_at_down, pending_at_up, written_at_up;

        (void)state;
        ts_pg_install_copy(c);
        ts_mock_start_n(&m, topic, 3, 3);
        for (int p = 0; p < 3; p++) {
                snprintf(cmd, sizeof(cmd), "leader %s %d %d", topic, p, p + 1);
                ts_mock_cmd(&m, cmd);
        }
        ts_relay_start_opts(&relay, &(struct ts_relay_opts){
                .bootstrap = m.bootstrap,
                .relay_group = "poll_interval = \"1s\"; batch_size = 500; batch_timeout = \"6s\";",
                .kafka_extra = "message_timeout_ms = 2000; reconnect_backoff_max_ms = 500;",
                .extra_groups = "retry = { base = \"100ms\"; cap = \"1s\"; };"});
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));
        l = ts_load_start(topic, 6000, 300, 200);
        ts_load_wait(l, 600);
        ts_mock_cmd(&m, "broker-down 1");
        written_at_down = ts_load_written(l);
        sleep(15);
        written_at_up = ts_load_written(l);
        pending_at_up = ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s' AND published_at IS NULL"
                                     " AND dead_at IS NULL", topic);
        ts_mock_cmd(&m, "broker-up 1");
        fprintf(stderr, "partition_outage: %lld rows written during 15 s with one of 3 partitions down, "
                        "%lld pending when it came back\n",
                (long long)(written_at_up - written_at_down), (long long)pending_at_up);
        /* About a third belongs to the dead partition; the rest must have flowed. */
        assert_true(pending_at_up < (written_at_up - written_at_down) * 6 / 10);
        assert_true(ts_relay_log_wait(&relay, "holding back", 1000));
        assert_int_equal(ts_load_finish(l), 6000);
        if (!ts_wait_drained(c, topics, 90000)) {
                ts_relay_dump_log(&relay);
                fail_msg("not drained after the partition came back");
        }
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        assert_int_equal(ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s' AND dead_at IS NOT NULL", topic), 0);
        ts_consume_from(m.bootstrap, topics, 6000, 60000, 1500, &msgs);
        ts_verify(c, topics, &msgs, false, &v);
        fprintf(stderr, "partition_outage: %zu committed, %zu consumed, duplicates %zu, missing %zu\n", v.expected,
                v.consumed, v.duplicates, v.missing);
        assert_int_equal(v.expected, 6000);
        assert_int_equal(v.missing + v.mismatched + v.unexpected + v.order_violations, 0);
        ts_msgs_free(&msgs);
        ts_mock_stop(&m);
        ts_pg_exec(c, "DELETE FROM outbox WHERE topic = '%s'", topic);
        free(topic);
        PQfinish(c);
}

/* A statement that fails in the database (the table locked past statement_timeout) is the
 * database's trouble: the relay backs off and retries, the Kafka breaker stays closed, and the
 * row goes out once the lock is gone. */
static void database_errors_not_kafka(void **state) {
        PGconn *c = ts_pg_connect(), *locker = ts_pg_connect();
        char *topic = ts_topic("fault-dberr");
        const char *topics[] = {topic, NULL};
        struct ts_relay relay;

        (void)state;
        ts_relay_start_opts(&relay, &(struct ts_relay_opts){
                .relay_group = "poll_interval = \"200ms\";",
                .postgres_extra = "statement_timeout = \"300ms\";",
                .extra_groups = "breaker = { failure_threshold = 2; cooldown = \"30s\"; };\n"
                                "retry = { base = \"100ms\"; cap = \"500ms\"; };\n"});
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));
        ts_pg_exec(locker, "BEGIN; LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE");
        assert_true(ts_relay_log_wait(&relay, "canceling statement due to statement timeout", 10000));
        sleep(3);
        ts_pg_exec(locker, "ROLLBACK");
        ts_pg_exec(c, "SELECT outbox_enqueue('%s', 'k', 'after the lock'::text)", topic);
        assert_true(ts_wait_drained(c, topics, 20000));
        assert_true(ts_relay_log_wait(&relay, "the batch failed in the database", 10));
        assert_false(ts_relay_log_wait(&relay, "circuit breaker opened", 10));
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        free(topic);
        PQfinish(locker);
        PQfinish(c);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(postgres_restarts, ts_teardown),
                cmocka_unit_test_teardown(kafka_outage, ts_teardown),
                cmocka_unit_test_teardown(refused_topic, ts_teardown),
                cmocka_unit_test_teardown(partition_outage, ts_teardown),
                cmocka_unit_test_teardown(database_errors_not_kafka, ts_teardown),
        };

        ts_env("TESTBED_DIR");
        ts_env("MOCK_KAFKA_BIN");
        ts_env("KAFKA_BOOTSTRAP");
        return cmocka_run_group_tests(tests, NULL, NULL);
}
