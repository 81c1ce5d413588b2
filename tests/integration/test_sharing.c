/* test_sharing.c -- Several relays publish one table at once and keep per-key order, whatever they do: killed, stopped, frozen, cut off, the database restarted. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
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

#include "proxy.h"
#include "support.h"

/* Short deadlines so takeovers happen within seconds: a relay frozen in a batch loses its
 * transaction (and its bucket locks) after idle_in_transaction_session_timeout = 2 × batch_timeout. */
#define RELAY_GROUP                                                                                          \
        "poll_interval = \"1s\"; batch_timeout = \"5s\"; drain_timeout = \"10s\"; status_interval = \"2s\";" \
        " batch_size = 500;"
#define KAFKA_EXTRA "message_timeout_ms = 2000; reconnect_backoff_max_ms = 500;"
#define GROUPS "retry = { base = \"100ms\"; cap = \"1s\"; };\n"
#define TAKEOVER_S 10 /* 2 × batch_timeout */

static struct ts_proxy *proxy;
static struct ts_mock mock;

static int teardown(void **state) {
        ts_proxy_stop(proxy);
        proxy = NULL;
        if (mock.pid > 0)
                ts_mock_stop(&mock);
        ts_teardown(state);
        return 0;
}

/* ---- writers with keys of their own ---- */

/* One writer per set of keys: its transactions are serial, so each key's commit order is its id
 * order (what DESIGN §1.3 asks of producers). `rows` rows at `per_second`, 10 per transaction,
 * keys "<prefix>-0" … "<prefix>-<keys-1>". */
struct writer {
        pthread_t thread;
        const char *topic;
        char prefix[32];
        int rows, per_second, keys;
        volatile int written;
        char error[256];
};

static void *write_rows(void *arg) {
        struct writer *w = arg;
        PGconn *c = PQconnectdb(ts_conninfo());
        int64_t t0 = ts_now_ms();

        if (PQstatus(c) != CONNECTION_OK) {
                snprintf(w->error, sizeof(w->error), "connect: %s", PQerrorMessage(c));
                PQfinish(c);
                return NULL;
        }
        for (int done = 0; done < w->rows;) {
                char sql[512];
                int n = w->rows - done < 10 ? w->rows - done : 10;
                int64_t due = t0 + (int64_t)done * 1000 / w->per_second;
                PGresult *res;

                while (ts_now_ms() < due)
                        usleep(2000);
                snprintf(sql, sizeof(sql),
                         "INSERT INTO outbox (topic, key, payload) SELECT '%s', '%s-' || ((%d + g) %% %d),"
                         " convert_to('%s row ' || (%d + g), 'UTF8') FROM generate_series(0, %d) g",
                         w->topic, w->prefix, done, w->keys, w->prefix, done, n - 1);
                res = PQexec(c, sql);
                if (PQresultStatus(res) != PGRES_COMMAND_OK) {
                        /* The database restarting under the writer: try again on a new connection. */
                        PQclear(res);
                        PQfinish(c);
                        usleep(200 * 1000);
                        c = PQconnectdb(ts_conninfo());
                        if (ts_now_ms() - t0 > 300000) {
                                snprintf(w->error, sizeof(w->error), "insert keeps failing: %s",
                                         PQerrorMessage(c));
                                break;
                        }
                        continue;
                }
                PQclear(res);
                done += n;
                w->written = done;
        }
        PQfinish(c);
        return NULL;
}

static void writers_start(struct writer *w, int n, const char *topic, int rows, int per_second, int keys) {
        for (int i = 0; i < n; i++) {
                /* Every key once: 50 keys over 4 writers are 13, 13, 12 and 12. */
                int k = keys / n + (i < keys % n);

                w[i] = (struct writer){
                        .topic = topic, .rows = rows / n, .per_second = per_second / n, .keys = k > 0 ? k : 1
                };
                snprintf(w[i].prefix, sizeof(w[i].prefix), "w%d", i);
                if (pthread_create(&w[i].thread, NULL, write_rows, &w[i]) != 0)
                        fail_msg("cannot start a writer");
        }
}

static int writers_written(const struct writer *w, int n) {
        int sum = 0;

        for (int i = 0; i < n; i++)
                sum += w[i].written;
        return sum;
}

static void writers_wait(const struct writer *w, int n, int rows) {
        int64_t until = ts_now_ms() + 120000;

        while (writers_written(w, n) < rows && ts_now_ms() < until)
                usleep(20000);
        if (writers_written(w, n) < rows)
                fail_msg("the writers wrote %d rows within 120 s, waiting for %d", writers_written(w, n),
                         rows);
}

static int writers_finish(struct writer *w, int n) {
        int sum = 0;

        for (int i = 0; i < n; i++) {
                pthread_join(w[i].thread, NULL);
                if (w[i].error[0])
                        fail_msg("writer %d: %s", i, w[i].error);
                sum += w[i].written;
        }
        return sum;
}

/* ---- relays ---- */

static void relay_start(struct ts_relay *r, const char *conninfo, const char *bootstrap) {
        ts_relay_start_opts(r,
                            &(struct ts_relay_opts){ .relay_group = RELAY_GROUP,
                                                     .kafka_extra = KAFKA_EXTRA,
                                                     .extra_groups = GROUPS,
                                                     .conninfo = conninfo,
                                                     .bootstrap = bootstrap });
        if (!ts_relay_log_wait(r, "ready", 30000)) {
                ts_relay_dump_log(r);
                fail_msg("a relay did not become ready");
        }
}

/* "drained: published N": what a relay published before it stopped cleanly. */
static long published(const struct ts_relay *r) {
        FILE *f = fopen(r->log, "r");
        char line[1024];
        long n = -1;

        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f)) {
                const char *p = strstr(line, "drained: published ");

                if (p)
                        n = strtol(p + strlen("drained: published "), NULL, 10);
        }
        fclose(f);
        return n;
}

static bool log_has(const struct ts_relay *r, const char *needle) {
        return ts_relay_log_wait((struct ts_relay *)r, needle, 1);
}

static char *proxied_conninfo(void) {
        char *s;

        if (asprintf(&s, "host=127.0.0.1 port=%d dbname=%s user=%s", ts_proxy_port(proxy),
                     ts_env("PGDATABASE"), ts_env("PGUSER")) < 0)
                fail_msg("out of memory");
        return s;
}

/* Everything committed arrived as written, first deliveries of every key in id order, nothing
 * left pending; duplicates at most `max_dup`. Returns the duplicates. */
static size_t verify(PGconn *c, const char *topic, const char *bootstrap, size_t rows, size_t max_dup,
                     const char *what) {
        const char *topics[] = { topic, NULL };
        struct ts_msgs msgs;
        struct ts_verify v;

        if (!ts_wait_drained(c, topics, 120000))
                fail_msg("%s: rows still pending 120 s after the load", what);
        if (bootstrap)
                ts_consume_from(bootstrap, topics, rows, 60000, 2000, &msgs);
        else
                ts_consume(topics, rows, 60000, 2000, &msgs);
        ts_verify(c, topics, &msgs, false, &v);
        fprintf(stderr,
                "%s: committed %zu, consumed %zu, lost %zu, order violations %zu, duplicates %zu,"
                " mismatched %zu, unexpected %zu, pending %lld\n",
                what, v.expected, v.consumed, v.missing, v.order_violations, v.duplicates, v.mismatched,
                v.unexpected,
                (long long)ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s' AND dead_at IS NULL",
                                     topic));
        ts_verify_assert(&v, rows, max_dup);
        assert_int_equal(ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s'", topic), 0);
        ts_msgs_free(&msgs);
        return v.duplicates;
}

/* ---- the tests ---- */

/* Three relays drain one table together: every one of them publishes, order holds, and clean
 * stops (SIGTERM, then a restart) produce no duplicate. */
static void all_publish_sigterm_no_duplicates(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("share-all");
        struct ts_relay r[3];
        struct writer w[4];
        long total = 0;

        (void)state;
        ts_pg_install_copy(c);
        for (int i = 0; i < 3; i++)
                relay_start(&r[i], NULL, NULL);
        writers_start(w, 4, topic, 24000, 3000, 1000);
        for (int i = 0; i < 3; i++) {
                long n;

                writers_wait(w, 4, 5000 + 5000 * i);
                assert_int_equal(ts_relay_stop(&r[i], SIGTERM, 30000), 0);
                n = published(&r[i]);
                fprintf(stderr, "share-all: relay %d published %ld before its SIGTERM\n", i, n);
                assert_true(n > 0);
                total += n;
                relay_start(&r[i], NULL, NULL);
        }
        assert_int_equal(writers_finish(w, 4), 24000);
        verify(c, topic, NULL, 24000, 0, "share-all");
        for (int i = 0; i < 3; i++)
                assert_int_equal(ts_relay_stop(&r[i], SIGTERM, 30000), 0);
        free(topic);
        PQfinish(c);
}

/* A relay frozen (SIGSTOP) with messages in flight, for longer than the takeover, then resumed:
 * its transaction is gone, the other relay carried its keys on, and what it sends late are
 * duplicates, never first deliveries out of order. mock-kafka holds every answer for 1.5 s so
 * the freeze lands with messages in flight. */
static void frozen_with_messages_in_flight(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("share-frozen");
        struct ts_relay a, b;
        struct writer w[2];
        size_t dup;

        (void)state;
        ts_pg_install_copy(c);
        ts_mock_start(&mock, topic, 3);
        relay_start(&a, NULL, mock.bootstrap);
        relay_start(&b, NULL, mock.bootstrap);
        writers_start(w, 2, topic, 4000, 400, 40);
        writers_wait(w, 2, 800);
        ts_mock_cmd(&mock, "rtt 1 1500");
        usleep(800 * 1000);
        kill(a.pid, SIGSTOP);
        fprintf(stderr, "share-frozen: relay A frozen at %d rows written\n", writers_written(w, 2));
        ts_mock_cmd(&mock, "rtt 1 0");
        sleep(TAKEOVER_S + 4);
        kill(a.pid, SIGCONT);
        fprintf(stderr, "share-frozen: relay A resumed at %d rows written\n", writers_written(w, 2));
        assert_int_equal(writers_finish(w, 2), 4000);
        dup = verify(c, topic, mock.bootstrap, 4000, 4000, "share-frozen");
        assert_int_equal(ts_relay_stop(&a, SIGTERM, 30000), 0);
        assert_int_equal(ts_relay_stop(&b, SIGTERM, 30000), 0);
        fprintf(stderr, "share-frozen: %zu duplicates from the frozen relay's late sends and the takeover\n",
                dup);
        ts_mock_stop(&mock);
        free(topic);
        PQfinish(c);
}

/* One relay's database link cut for 10 s under load (not the server: the others go on): its
 * transaction dies with its session, another relay takes its keys over, order holds, and it
 * comes back when the link does. */
static void database_link_cut(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("share-cut"), *via;
        struct ts_relay a, b;
        struct writer w[2];

        (void)state;
        ts_pg_install_copy(c);
        proxy = ts_proxy_start(atoi(ts_env("PGPORT")));
        via = proxied_conninfo();
        relay_start(&a, via, NULL);
        relay_start(&b, NULL, NULL);
        writers_start(w, 2, topic, 12000, 600, 200);
        writers_wait(w, 2, 3000);
        ts_proxy_cut(proxy);
        fprintf(stderr, "share-cut: relay A's link cut at %d rows written\n", writers_written(w, 2));
        sleep(10);
        ts_proxy_restore(proxy);
        if (!ts_relay_log_wait(&a, "connected to PostgreSQL again", 20000)) {
                ts_relay_dump_log(&a);
                fail_msg("relay A did not reconnect once its link was back");
        }
        assert_true(log_has(&a, "lost the PostgreSQL connection"));
        assert_int_equal(writers_finish(w, 2), 12000);
        verify(c, topic, NULL, 12000, 12000, "share-cut");
        assert_int_equal(ts_relay_stop(&a, SIGTERM, 30000), 0);
        assert_int_equal(ts_relay_stop(&b, SIGTERM, 30000), 0);
        assert_true(published(&a) > 0 && published(&b) > 0);
        free(via);
        free(topic);
        PQfinish(c);
}

/* PostgreSQL restarted under load with three relays: every lock is gone at once, and afterwards
 * no two relays publish one key at the same time (the order check would see it). */
static void postgres_restart_three_relays(void **state) {
        PGconn *c;
        char *topic = ts_topic("share-pgrestart");
        struct ts_relay r[3];
        struct writer w[3];

        (void)state;
        c = ts_pg_connect();
        ts_pg_install_copy(c);
        PQfinish(c);
        for (int i = 0; i < 3; i++)
                relay_start(&r[i], NULL, NULL);
        writers_start(w, 3, topic, 15000, 1500, 300);
        writers_wait(w, 3, 4000);
        ts_testbed("pg-restart");
        fprintf(stderr, "share-pgrestart: PostgreSQL restarted at %d rows written\n", writers_written(w, 3));
        for (int i = 0; i < 3; i++)
                if (!ts_relay_log_wait(&r[i], "connected to PostgreSQL again", 30000)) {
                        ts_relay_dump_log(&r[i]);
                        fail_msg("relay %d did not reconnect after the restart", i);
                }
        assert_int_equal(writers_finish(w, 3), 15000);
        c = ts_pg_connect();
        verify(c, topic, NULL, 15000, 3 * 2000, "share-pgrestart");
        for (int i = 0; i < 3; i++)
                assert_int_equal(ts_relay_stop(&r[i], SIGTERM, 30000), 0);
        free(topic);
        PQfinish(c);
}

/* The acceptance run: 3 relays, and 30,000 rows from 4 writers over 50 keys on one topic and
 * 30,000 from 4 more over 10,000 keys on another, both at once; during the load one relay is
 * killed (-9) and restarted, one is stopped (SIGTERM) and restarted, one is frozen for longer
 * than the takeover and resumed, and one relay's database link is cut for 10 s. The two loads
 * share one fault sequence, so the suite pays for it once; each topic is checked on its own (the
 * writers of both use the same key names, which are still two sequences each: order is per
 * (topic, key)). The fault points count the rows of both. */
#define CHAOS_ROWS 30000
/* The batches in flight of the three faults (kill, freeze, cut): relay.pipelines x batch_size. */
#define CHAOS_MAX_DUP (3 * 2 * 500)
static void chaos_50_and_10000_keys(void **state) {
        static const int keys[2] = { 50, 10000 };
        PGconn *c = ts_pg_connect();
        char name[2][64], *topic[2], *via;
        struct ts_relay r[3];
        struct writer w[8]; /* 0-3 write the first topic, 4-7 the second */
        size_t dup[2];

        (void)state;
        ts_pg_install_copy(c);
        proxy = ts_proxy_start(atoi(ts_env("PGPORT")));
        via = proxied_conninfo();
        relay_start(&r[0], NULL, NULL);
        relay_start(&r[1], NULL, NULL);
        relay_start(&r[2], via, NULL); /* the one whose link is cut */
        for (int t = 0; t < 2; t++) {
                snprintf(name[t], sizeof(name[t]), "share-chaos-%d", keys[t]);
                topic[t] = ts_topic(name[t]);
                writers_start(&w[4 * t], 4, topic[t], CHAOS_ROWS, 750, keys[t]);
        }

        writers_wait(w, 8, 2 * 3000);
        fprintf(stderr, "share-chaos: kill -9 relay 0 at %d rows\n", writers_written(w, 8));
        ts_relay_stop(&r[0], SIGKILL, 10000);
        relay_start(&r[0], NULL, NULL);

        writers_wait(w, 8, 2 * 7000);
        fprintf(stderr, "share-chaos: SIGTERM relay 1 at %d rows\n", writers_written(w, 8));
        assert_int_equal(ts_relay_stop(&r[1], SIGTERM, 30000), 0);
        relay_start(&r[1], NULL, NULL);

        writers_wait(w, 8, 2 * 10000);
        fprintf(stderr, "share-chaos: SIGSTOP relay 0 at %d rows, for %d s\n", writers_written(w, 8),
                TAKEOVER_S + 3);
        kill(r[0].pid, SIGSTOP);
        sleep(TAKEOVER_S + 3);
        kill(r[0].pid, SIGCONT);
        fprintf(stderr, "share-chaos: SIGCONT relay 0 at %d rows\n", writers_written(w, 8));

        writers_wait(w, 8, 2 * 22000);
        fprintf(stderr, "share-chaos: cut relay 2's database link at %d rows, for 10 s\n",
                writers_written(w, 8));
        ts_proxy_cut(proxy);
        sleep(10);
        ts_proxy_restore(proxy);
        fprintf(stderr, "share-chaos: link restored at %d rows\n", writers_written(w, 8));

        for (int t = 0; t < 2; t++)
                assert_int_equal(writers_finish(&w[4 * t], 4), CHAOS_ROWS);
        /* Duplicates come only from the faults: the kill, the freeze and the cut, the batches in
         * flight each (at most relay.pipelines x batch_size rows, of both topics together); the
         * clean SIGTERM brings none (test above). */
        for (int t = 0; t < 2; t++)
                dup[t] = verify(c, topic[t], NULL, CHAOS_ROWS, CHAOS_MAX_DUP, name[t]);
        fprintf(stderr,
                "share-chaos: duplicates %zu (50 keys) + %zu (10,000 keys) = %zu, at most %d (kill -9,"
                " freeze and link cut; SIGTERM gives none)\n",
                dup[0], dup[1], dup[0] + dup[1], CHAOS_MAX_DUP);
        assert_true(dup[0] + dup[1] <= CHAOS_MAX_DUP);
        for (int i = 0; i < 3; i++)
                assert_int_equal(ts_relay_stop(&r[i], SIGTERM, 30000), 0);
        ts_proxy_stop(proxy);
        proxy = NULL;
        free(via);
        for (int t = 0; t < 2; t++)
                free(topic[t]);
        PQfinish(c);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(all_publish_sigterm_no_duplicates, teardown),
                cmocka_unit_test_teardown(frozen_with_messages_in_flight, teardown),
                cmocka_unit_test_teardown(database_link_cut, teardown),
                cmocka_unit_test_teardown(postgres_restart_three_relays, teardown),
                cmocka_unit_test_teardown(chaos_50_and_10000_keys, teardown),
        };

        signal(SIGPIPE, SIG_IGN);
        ts_env("PGPORT");
        ts_env("KAFKA_BOOTSTRAP");
        ts_env("MOCK_KAFKA_BIN");
        return cmocka_run_group_tests(tests, NULL, NULL);
}
