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
/* The relay's default relay.batch_size (etc/outbox-relay.conf). */
#define DEFAULT_BATCH 2000

/* Everything committed arrived as written, in key order, and at most `max_duplicates` twice. */
static void verify_all(PGconn *c, const char *topic, size_t rows, const char *scenario,
                       long long max_duplicates) {
        const char *topics[] = { topic, NULL };
        struct ts_msgs m;
        struct ts_verify v;

        ts_consume(topics, rows, 120000, 2000, &m);
        ts_verify(c, topics, &m, false, &v);
        fprintf(stderr,
                "%s: %zu committed, %zu consumed, %zu distinct, duplicates %zu (at most %lld), missing %zu\n",
                scenario, v.expected, v.consumed, v.consumed - v.duplicates - v.unexpected, v.duplicates,
                max_duplicates, v.missing);
        assert_int_equal(v.expected, rows);
        assert_int_equal(v.missing, 0);
        assert_int_equal(v.mismatched, 0);
        assert_int_equal(v.unexpected, 0);
        assert_int_equal(v.order_violations, 0);
        assert_true((long long)v.duplicates <= max_duplicates);
        ts_msgs_free(&m);
}

static long long min_ll(long long a, long long b) {
        return a < b ? a : b;
}

/* The broker is stopped for 30 s during a 20,000-row load: the breaker opens, no row burns an
 * attempt or is dead-lettered, the breaker closes after the restart and every row arrives. */
static void kafka_outage(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("fault-kafka");
        const char *topics[] = { topic, NULL };
        struct ts_load *l;
        struct ts_relay relay;
        struct ts_relay_log_stats st;
        int64_t attempts;

        (void)state;
        ts_pg_install_copy(c);
        ts_relay_start_ex(&relay, "finish = \"mark\"; poll_interval = \"1s\"; batch_timeout = \"10s\";",
                          "message_timeout_ms = 3000;",
                          "breaker = { failure_threshold = 3; cooldown = \"2s\"; cooldown_max = \"5s\"; };\n"
                          "retry = { base = \"100ms\"; cap = \"1s\"; };\n");
        /* Deliveries fail after 3 s instead of the default 5 s so the test sees several. */
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));
        l = ts_load_start(topic, ROWS, 500, 200);
        ts_load_wait(l, 2000, 30000);
        ts_testbed("kafka-stop");
        fprintf(stderr, "kafka_outage: broker stopped after %d rows\n", ts_load_written(l));
        if (!ts_relay_log_wait(&relay, "circuit breaker opened", 40000)) {
                ts_relay_dump_log(&relay);
                fail_msg("the breaker did not open");
        }
        /* While it is open nothing burns an attempt: the sum is the same after 25 s. Rows in
         * flight when the broker went away may have spent one attempt in the batch that saw it
         * go (some rows delivered, some not). */
        {
                int64_t attempts_open = ts_pg_int(
                        c, "SELECT coalesce(sum(attempts), 0) FROM outbox WHERE topic = '%s'", topic);

                sleep(25);
                assert_int_equal(ts_pg_int(c,
                                           "SELECT coalesce(sum(attempts), 0) FROM outbox WHERE topic = '%s'",
                                           topic),
                                 attempts_open);
                fprintf(stderr, "kafka_outage: attempts spent before the breaker opened: %lld\n",
                        (long long)attempts_open);
        }
        assert_int_equal(
                ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s' AND dead_at IS NOT NULL", topic),
                0);
        /* Each batch in flight when the broker went away (relay.pipelines = 2 of them, the
         * default) may have seen its rows fail while others of their partition went through:
         * at most one attempt per batch at the edge of the outage, two in all. */
        assert_int_equal(
                ts_pg_int(c, "SELECT coalesce(max(attempts), 0) FROM outbox WHERE topic = '%s'", topic) <= 2,
                1);
        ts_testbed("kafka-start");
        fprintf(stderr, "kafka_outage: broker restarted after %d rows\n", ts_load_written(l));
        assert_int_equal(ts_load_finish(l), ROWS);
        if (!ts_wait_drained(c, topics, 180000)) {
                ts_relay_dump_log(&relay);
                fail_msg("not drained after the broker came back");
        }
        assert_true(ts_relay_log_wait(&relay, "circuit breaker closed", 5000));
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        assert_int_equal(ts_pg_int(c,
                                   "SELECT count(*) FROM outbox WHERE topic = '%s' AND"
                                   " (attempts > 2 OR dead_at IS NOT NULL OR published_at IS NULL)",
                                   topic),
                         0);
        ts_relay_log_stats(&relay, &st);
        attempts = ts_pg_int(c, "SELECT coalesce(sum(attempts), 0) FROM outbox WHERE topic = '%s'", topic);
        fprintf(stderr,
                "kafka_outage: attempts spent %lld (rows failed in batches that delivered others %lld),"
                " batches with nothing delivered %d, breaker opened %d, probes failed %d, closed %d,"
                " rows that may come twice %lld\n",
                (long long)attempts, st.partial_failed_rows, st.failed_batches, st.breaker_opened,
                st.breaker_reopened, st.breaker_closed, ts_relay_log_resendable(&st));
        /* An attempt is spent only by a row that failed while its partition took others in the
         * same batch; batches that delivered nothing (the outage) spend none. */
        assert_true(attempts <= st.partial_failed_rows);
        /* 25 s open with cool-downs of 2 s .. 5 s: probes ran and failed, one closed it. */
        assert_true(st.breaker_opened >= 1);
        assert_true(st.breaker_reopened >= 2);
        assert_true(st.breaker_closed >= 1);
        /* Duplicates only from deliveries whose ack was lost (DESIGN §1.2): the batch in flight
         * when the broker went away and the one when it came back, and only rows the relay saw
         * fail. The clean stop adds none. */
        verify_all(c, topic, ROWS, "kafka_outage", min_ll(ts_relay_log_resendable(&st), 2 * DEFAULT_BATCH));
        ts_pg_exec(c, "DELETE FROM outbox WHERE topic = '%s'", topic);
        free(topic);
        PQfinish(c);
}

/* Rows of the topic not yet published (finish = "delete": still in the table, not dead). */
static int64_t pending(PGconn *c, const char *topic) {
        return ts_pg_int(c,
                         "SELECT count(*) FROM outbox WHERE topic = '%s'"
                         " AND published_at IS NULL AND dead_at IS NULL",
                         topic);
}

/* Holds back the DELETE that finishes a batch, not the claims: a new session takes the table in
 * SHARE mode (as a CREATE INDEX without CONCURRENTLY does; claims take ROW SHARE, which it lets
 * through) and returns once a relay's finish waits for it. The session gives the lock up when
 * closed, or after 20 s idle in its transaction, so a test failing with the lock held does not
 * hold up the tests after it. */
static PGconn *hold_finishes(PGconn *c) {
        PGconn *locker = ts_pg_connect();

        ts_pg_exec(locker, "SET idle_in_transaction_session_timeout = '20s'");
        ts_pg_exec(locker, "BEGIN; LOCK TABLE outbox IN SHARE MODE");
        ts_pg_wait(c, 30000,
                   "SELECT count(*) > 0 FROM pg_locks WHERE relation = 'outbox'::regclass"
                   " AND mode = 'RowExclusiveLock' AND NOT granted");
        return locker;
}

/* PostgreSQL restarted twice (pg_ctl restart -m fast) while the relay works through a backlog
 * with batches waiting to finish: it reconnects each time and drains; duplicates only from the
 * batches whose finish was cut off. */
static void postgres_restarts(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("fault-pg");
        const char *topics[] = { topic, NULL };
        struct ts_relay relay;
        struct ts_relay_log_stats st;
        /* relay.pipelines = 2, the default: two batches in flight at most. */
        const int half = ROWS / 2, batch = 200, pipelines = 2;

        (void)state;
        ts_pg_install_copy(c);
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'key-' || (g %% 200),"
                   " convert_to('event ' || g, 'UTF8') FROM generate_series(1, %d) g",
                   topic, half);
        ts_relay_start(&relay, "poll_interval = \"1s\"; batch_size = 200;",
                       "retry = { base = \"100ms\"; cap = \"1s\"; };\n");
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));
        for (int round = 1; round <= 2; round++) {
                int64_t before, after, start = pending(c, topic);
                PGconn *locker;

                /* Restart while the relay is busy: it has published some of the backlog, and
                 * rows are still waiting. A fast relay can finish what is left before the
                 * restart script stops the server, so the test holds the batches' finish back
                 * (hold_finishes). The server then goes down with rows pending and a batch that
                 * Kafka took waiting to finish, whatever the machine's speed. (In two runs out of
                 * several that batch still committed: the shutdown ends every session, and the
                 * lock's holder can go first.) */
                ts_pg_wait(c, 60000, "SELECT count(*) <= %lld FROM outbox WHERE topic = '%s'",
                           (long long)(start - 1000), topic);
                locker = hold_finishes(c);
                before = pending(c, topic);
                PQfinish(c);
                ts_testbed("pg-restart");
                PQfinish(locker);
                c = ts_pg_connect();
                after = pending(c, topic);
                fprintf(stderr,
                        "postgres_restarts: restart %d with %lld rows pending (%lld right after it)\n", round,
                        (long long)before, (long long)after);
                /* Rows were pending when the server went down: the lock held their batch's
                 * finish until then. `after` is read once the relay is back at work, so it is
                 * printed, not asserted. */
                assert_true(before > 0);
                ts_relay_log_wait_n(&relay, "connected to PostgreSQL again", round, 30000);
                if (round == 1)
                        ts_pg_exec(
                                c,
                                "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'key-' || (g %% 200),"
                                " convert_to('event ' || g, 'UTF8') FROM generate_series(%d, %d) g",
                                topic, half + 1, ROWS);
        }
        if (!ts_wait_drained(c, topics, 120000)) {
                ts_relay_dump_log(&relay);
                fail_msg("not drained after the restarts");
        }
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        assert_int_equal(ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s'", topic), 0);
        ts_relay_log_stats(&relay, &st);
        fprintf(stderr,
                "postgres_restarts: connection lost %d times, back %d times, batches rolled back %d"
                " (%lld rows)\n",
                st.db_lost, st.db_back, st.rolled_back_batches, st.rolled_back_rows);
        assert_int_equal(st.db_back, 2);
        /* Each restart can cut off at most the batches in flight, after Kafka took them. */
        verify_all(c, topic, ROWS, "postgres_restarts",
                   min_ll(ts_relay_log_resendable(&st), 2 * pipelines * batch));
        free(topic);
        PQfinish(c);
}

/* A topic Kafka refuses (authorization, through mock-kafka): its rows stay pending with the
 * reason and spend no attempt, the error is logged, other topics keep flowing; once the topic
 * is allowed again its rows follow. Nothing is sent twice: a refused row never reached Kafka. */
static void refused_topic(void **state) {
        PGconn *c = ts_pg_connect();
        char *good = ts_topic("fault-good"), *denied = ts_topic("fault-denied");
        const char *good_topics[] = { good, NULL }, *all_topics[] = { good, denied, NULL };
        struct ts_mock m;
        struct ts_relay relay;
        struct ts_relay_log_stats st_paused, st;
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
        /* finish = "mark", so the attempts of published rows can still be read at the end. */
        ts_relay_start_opts(
                &relay,
                &(struct ts_relay_opts){
                        .bootstrap = m.bootstrap,
                        .relay_group = "finish = \"mark\"; poll_interval = \"1s\"; batch_size = 2000;",
                        .kafka_extra = "message_timeout_ms = 3000; reconnect_backoff_max_ms = 500;" });
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));
        /* One statement, so one batch holds all of them: every refused row gets its reason. */
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload) SELECT"
                   " CASE WHEN g %% 3 = 0 THEN '%s' ELSE '%s' END, 'k' || (g %% 7), convert_to('r-' || g, "
                   "'UTF8')"
                   " FROM generate_series(1, 1500) g",
                   denied, good);
        if (!ts_wait_drained(c, good_topics, 60000)) {
                ts_relay_dump_log(&relay);
                fail_msg("the allowed topic did not flow past the refused one");
        }
        snprintf(cmd, sizeof(cmd), "topic '%s' refused by Kafka", denied);
        assert_true(ts_relay_log_wait(&relay, cmd, 5000));
        /* (librdkafka 2.0.2 reports the mock's refusal as message timeouts of a topic without
         * partitions; the relay sees a topic that takes nothing while others do.) */
        assert_int_equal(ts_pg_int(c,
                                   "SELECT count(*) FROM outbox WHERE topic = '%s' AND dead_at IS NULL"
                                   " AND published_at IS NULL AND attempts = 0 AND last_error IS NOT NULL",
                                   denied),
                         500);
        /* While it is paused, more rows of the allowed topic go out without waiting for the
         * refused ones: no batch has failed rows in it any more. */
        ts_relay_log_stats(&relay, &st_paused);
        for (int round = 0; round < 3; round++)
                ts_pg_exec(c,
                           "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'k' || (g %% 7),"
                           " convert_to('more%d-' || g, 'UTF8') FROM generate_series(1, 200) g",
                           good, round);
        if (!ts_wait_drained(c, good_topics, 30000)) {
                ts_relay_dump_log(&relay);
                fail_msg("the allowed topic did not flow while the refused one was paused");
        }
        ts_relay_log_stats(&relay, &st);
        assert_int_equal(st.partial_batches, st_paused.partial_batches);
        assert_int_equal(ts_pg_int(c,
                                   "SELECT count(*) FROM outbox WHERE topic = '%s' AND published_at IS NULL",
                                   denied),
                         500);
        /* The operator fixes the ACL: the rows follow at the next check. */
        snprintf(cmd, sizeof(cmd), "topic-error %s NO_ERROR", denied);
        ts_mock_cmd(&m, cmd);
        if (!ts_wait_drained(c, all_topics, 90000)) {
                ts_relay_dump_log(&relay);
                fail_msg("the refused topic's rows did not follow once allowed");
        }
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        ts_relay_log_stats(&relay, &st);
        ts_consume_from(m.bootstrap, all_topics, 2100, 60000, 1500, &msgs);
        ts_verify(c, all_topics, &msgs, false, &v);
        fprintf(stderr,
                "refused_topic: %zu committed, %zu consumed, duplicates %zu, missing %zu, attempts spent "
                "%lld,"
                " batches with nothing delivered %d, breaker opened %d\n",
                v.expected, v.consumed, v.duplicates, v.missing,
                (long long)ts_pg_int(
                        c, "SELECT coalesce(sum(attempts), 0) FROM outbox WHERE topic IN ('%s', '%s')", good,
                        denied),
                st.failed_batches, st.breaker_opened);
        assert_int_equal(v.expected, 2100);
        assert_int_equal(v.missing + v.mismatched + v.unexpected + v.order_violations, 0);
        assert_int_equal(v.duplicates, 0);
        assert_int_equal(
                ts_pg_int(c,
                          "SELECT count(*) FROM outbox WHERE topic IN ('%s', '%s') AND dead_at IS NOT NULL",
                          good, denied),
                0);
        assert_int_equal(
                ts_pg_int(c, "SELECT coalesce(sum(attempts), 0) FROM outbox WHERE topic IN ('%s', '%s')",
                          good, denied),
                0);
        ts_msgs_free(&msgs);
        ts_mock_stop(&m);
        ts_pg_exec(c, "DELETE FROM outbox WHERE topic IN ('%s', '%s')", good, denied);
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
        const char *topics[] = { topic, NULL };
        struct ts_load *l;
        struct ts_mock m;
        struct ts_relay relay;
        struct ts_relay_log_stats st;
        struct ts_msgs msgs;
        struct ts_verify v;
        char cmd[256];
        int64_t last_id_at_down, flowed, pending_at_up, attempts, max_attempts, t_down;
        const int batch = 500;

        (void)state;
        ts_pg_install_copy(c);
        ts_mock_start_n(&m, topic, 3, 3);
        for (int p = 0; p < 3; p++) {
                snprintf(cmd, sizeof(cmd), "leader %s %d %d", topic, p, p + 1);
                ts_mock_cmd(&m, cmd);
        }
        /* finish = "mark": published rows stay, so what flowed during the outage can be counted. */
        ts_relay_start_opts(
                &relay,
                &(struct ts_relay_opts){ .bootstrap = m.bootstrap,
                                         .relay_group = "finish = \"mark\"; poll_interval = \"1s\"; "
                                                        "batch_size = 500; batch_timeout = \"6s\";",
                                         .kafka_extra =
                                                 "message_timeout_ms = 2000; reconnect_backoff_max_ms = 500;",
                                         .extra_groups = "retry = { base = \"100ms\"; cap = \"1s\"; };" });
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));
        l = ts_load_start(topic, 6000, 300, 200);
        ts_load_wait(l, 600, 30000);
        ts_mock_cmd(&m, "broker-down 1");
        t_down = ts_now_ms();
        last_id_at_down =
                ts_pg_int(c, "SELECT coalesce(max(id), 0) FROM outbox_test_copy WHERE topic = '%s'", topic);
        /* The relay notices (the partition's messages time out), holds its keys back, and the
         * rows of the two other partitions written after the fault go out while it lasts:
         * about two thirds of them; at least 600 (of 5400 still to come) must. */
        if (!ts_relay_log_wait(&relay, "holding back", 30000)) {
                ts_relay_dump_log(&relay);
                fail_msg("the relay did not hold the dead partition's keys back");
        }
        /* Until keys held back once (3 s, batch_timeout / 2) came back, failed again and were
         * held twice as long: the same outage, not the rows' fault. */
        ts_relay_log_wait_n(&relay, "keys for up to 6s", 1, 30000);
        ts_pg_wait(c, 60000,
                   "SELECT count(*) >= 600 FROM outbox WHERE topic = '%s' AND id > %lld"
                   " AND published_at IS NOT NULL",
                   topic, (long long)last_id_at_down);
        flowed = ts_pg_int(c,
                           "SELECT count(*) FROM outbox WHERE topic = '%s' AND id > %lld"
                           " AND published_at IS NOT NULL",
                           topic, (long long)last_id_at_down);
        pending_at_up = ts_pg_int(c,
                                  "SELECT count(*) FROM outbox WHERE topic = '%s' AND published_at IS NULL"
                                  " AND dead_at IS NULL",
                                  topic);
        ts_mock_cmd(&m, "broker-up 1");
        fprintf(stderr,
                "partition_outage: one of 3 partitions down for %lld ms: %lld rows written after it went"
                " down were published meanwhile, %lld pending when it came back\n",
                (long long)(ts_now_ms() - t_down), (long long)flowed, (long long)pending_at_up);
        /* The dead partition's rows cannot have gone anywhere. */
        assert_true(pending_at_up > 0);
        assert_int_equal(ts_load_finish(l), 6000);
        if (!ts_wait_drained(c, topics, 90000)) {
                ts_relay_dump_log(&relay);
                fail_msg("not drained after the partition came back");
        }
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        ts_relay_log_stats(&relay, &st);
        assert_int_equal(
                ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s' AND dead_at IS NOT NULL", topic),
                0);
        attempts = ts_pg_int(c, "SELECT coalesce(sum(attempts), 0) FROM outbox WHERE topic = '%s'", topic);
        max_attempts =
                ts_pg_int(c, "SELECT coalesce(max(attempts), 0) FROM outbox WHERE topic = '%s'", topic);
        ts_consume_from(m.bootstrap, topics, 6000, 60000, 1500, &msgs);
        ts_verify(c, topics, &msgs, false, &v);
        fprintf(stderr,
                "partition_outage: %zu committed, %zu consumed, duplicates %zu (rows that may come twice "
                "%lld),"
                " missing %zu, attempts spent %lld (max %lld; rows failed in batches that delivered"
                " others %lld),"
                " batches with nothing delivered %d, breaker opened %d\n",
                v.expected, v.consumed, v.duplicates, ts_relay_log_resendable(&st), v.missing,
                (long long)attempts, (long long)max_attempts, st.partial_failed_rows, st.failed_batches,
                st.breaker_opened);
        assert_int_equal(v.expected, 6000);
        assert_int_equal(v.missing + v.mismatched + v.unexpected + v.order_violations, 0);
        /* A held-back key spends no attempt; only a row whose partition took others of the
         * same batch can (the batches at the edges of the outage), once per edge. */
        assert_true(attempts <= st.partial_failed_rows);
        assert_true(max_attempts <= 2);
        /* Duplicates need a lost ack: only a request in flight to the partition's leader when
         * it went down or, when it came back, one answered after its messages timed out. */
        assert_true((long long)v.duplicates <= min_ll(ts_relay_log_resendable(&st), 2 * batch));
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
        const char *topics[] = { topic, NULL };
        struct ts_relay relay;

        (void)state;
        ts_relay_start_opts(
                &relay,
                &(struct ts_relay_opts){ .relay_group = "poll_interval = \"200ms\";",
                                         .postgres_extra = "statement_timeout = \"300ms\";",
                                         .extra_groups =
                                                 "breaker = { failure_threshold = 2; cooldown = \"30s\"; };\n"
                                                 "retry = { base = \"100ms\"; cap = \"500ms\"; };\n" });
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

/* A lock on the table that lets claims through but not the finish (SHARE, as a CREATE INDEX
 * without CONCURRENTLY takes) for 3 s while the relay works through a backlog (two pipelines,
 * 5,000 keys): the finish waits for it and then goes through. A finish that gave up instead
 * would roll its batch back, and the batch would go to Kafka again for as long as the lock
 * stays. Nothing is rolled back, nothing is sent twice. With "none" the relay's batches always
 * overlap, so most claims are made with another batch in flight, and those bound their own lock
 * waits (pg.c): the bound must end with the claim, not hold for the finish. */
static void table_lock_case(const char *ordering) {
        PGconn *c = ts_pg_connect(), *locker;
        char *topic = ts_topic("fault-tablelock");
        const int rows = 10000;
        struct ts_relay relay;
        struct ts_relay_log_stats st;
        char group[128];

        ts_pg_install_copy(c);
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'key-' || (g %% 5000),"
                   " convert_to('event ' || g, 'UTF8') FROM generate_series(1, %d) g",
                   topic, rows);
        snprintf(group, sizeof(group), "poll_interval = \"1s\"; batch_size = 200; ordering = \"%s\";",
                 ordering);
        ts_relay_start(&relay, group, NULL);
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));
        ts_pg_wait(c, 60000, "SELECT count(*) <= %d FROM outbox WHERE topic = '%s'", rows - 1000, topic);
        locker = hold_finishes(c);
        fprintf(stderr, "table_lock (%s): the lock held at %lld rows pending\n", ordering,
                (long long)pending(c, topic));
        sleep(3);
        fprintf(stderr, "table_lock (%s): released at %lld rows pending\n", ordering,
                (long long)pending(c, topic));
        ts_pg_exec(locker, "COMMIT");
        assert_true(ts_wait_drained(c, (const char *[]){ topic, NULL }, 60000));
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        ts_relay_log_stats(&relay, &st);
        fprintf(stderr, "table_lock (%s): batches rolled back %d (%lld rows)\n", ordering,
                st.rolled_back_batches, st.rolled_back_rows);
        verify_all(c, topic, (size_t)rows, "table_lock", 0);
        assert_int_equal(st.rolled_back_batches, 0);
        free(topic);
        PQfinish(locker);
        PQfinish(c);
}

static void table_lock_holds_finishes(void **state) {
        (void)state;
        table_lock_case("key");
}

static void table_lock_holds_finishes_unordered(void **state) {
        (void)state;
        table_lock_case("none");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(postgres_restarts, ts_teardown),
                cmocka_unit_test_teardown(kafka_outage, ts_teardown),
                cmocka_unit_test_teardown(refused_topic, ts_teardown),
                cmocka_unit_test_teardown(partition_outage, ts_teardown),
                cmocka_unit_test_teardown(database_errors_not_kafka, ts_teardown),
                cmocka_unit_test_teardown(table_lock_holds_finishes, ts_teardown),
                cmocka_unit_test_teardown(table_lock_holds_finishes_unordered, ts_teardown),
        };

        ts_env("TESTBED_DIR");
        ts_env("MOCK_KAFKA_BIN");
        ts_env("KAFKA_BOOTSTRAP");
        return cmocka_run_group_tests(tests, NULL, NULL);
}
