/* test_relay.c -- The relay against real PostgreSQL and Kafka: every committed row arrives as written. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <unistd.h>

#include "floor.h" /* its intervals only: the test does not link the relay */
#include "message.h" /* MESSAGE_TIME_INFINITE only */
#include "support.h"

#define WRITERS 4
#define KEYS 200

struct writer {
        int index;
        const char *topic;
        int rows;
        int written;
        char error[256];
};

/* Writes `rows` events in transactions of 1..20 rows. Writer w owns the keys k with
 * k % WRITERS == w, so each key's events are committed in id order (the writers' side of the
 * per-key order contract, DESIGN §1.3). */
static void *writer_main(void *arg) {
        struct writer *w = arg;
        PGconn *c = ts_pg_connect();
        unsigned seed = (unsigned)w->index * 7919u + 1;

        while (w->written < w->rows) {
                int n = 1 + (int)(rand_r(&seed) % 20);
                PGresult *res = PQexec(c, "BEGIN");

                PQclear(res);
                for (int i = 0; i < n && w->written < w->rows; i++, w->written++) {
                        char key[16], seq[16], len[16];
                        int k = (int)(rand_r(&seed) % (KEYS / WRITERS)) * WRITERS + w->index;
                        const char *params[4] = { w->topic, key, seq, len };

                        snprintf(key, sizeof(key), "key-%d", k);
                        snprintf(seq, sizeof(seq), "%d", w->written);
                        snprintf(len, sizeof(len), "%d", 20 + (int)(rand_r(&seed) % 300));
                        /* Random binary payload, headers with a non-ASCII value. */
                        res = PQexecParams(
                                c,
                                "SELECT outbox_enqueue($1::text, $2::text,"
                                " (SELECT string_agg(set_byte('\\x00'::bytea, 0, (random()*255)::int), "
                                "''::bytea)"
                                "    FROM generate_series(1, $4::int)),"
                                " jsonb_build_object('writer', $2::text, 'seq', $3::text, 'note', 'grüße'))",
                                4, NULL, params, NULL, NULL, 0);
                        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
                                snprintf(w->error, sizeof(w->error), "%s", PQresultErrorMessage(res));
                                PQclear(res);
                                PQfinish(c);
                                return NULL;
                        }
                        PQclear(res);
                }
                PQclear(PQexec(c, "COMMIT"));
        }
        PQfinish(c);
        return NULL;
}

static void concurrent_load(const char *finish) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("relay-load");
        const char *topics[] = { topic, NULL };
        struct writer w[WRITERS];
        pthread_t th[WRITERS];
        struct ts_relay relay;
        char group[128];
        struct ts_msgs m;
        struct ts_verify v;
        int64_t t0;

        ts_pg_install_copy(c);
        snprintf(group, sizeof(group), "finish = \"%s\"; poll_interval = \"1s\"; batch_size = 500;", finish);
        ts_relay_start(&relay, group, NULL);
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));

        t0 = ts_now_ms();
        for (int i = 0; i < WRITERS; i++) {
                w[i] = (struct writer){ .index = i, .topic = topic, .rows = 5000 };
                pthread_create(&th[i], NULL, writer_main, &w[i]);
        }
        for (int i = 0; i < WRITERS; i++) {
                pthread_join(th[i], NULL);
                assert_string_equal(w[i].error, "");
                assert_int_equal(w[i].written, 5000);
        }
        fprintf(stderr, "load: 20000 rows written by %d writers in %lld ms\n", WRITERS,
                (long long)(ts_now_ms() - t0));
        if (!ts_wait_drained(c, topics, 120000)) {
                ts_relay_dump_log(&relay);
                fail_msg("outbox not drained");
        }
        fprintf(stderr, "load: drained %lld ms after the writers started\n", (long long)(ts_now_ms() - t0));
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);

        ts_consume(topics, 20000, 60000, 1500, &m);
        ts_verify(c, topics, &m, false, &v);
        assert_int_equal(v.expected, 20000);
        assert_int_equal(v.missing, 0);
        assert_int_equal(v.unexpected, 0);
        assert_int_equal(v.mismatched, 0);
        assert_int_equal(v.duplicates, 0);
        assert_int_equal(v.order_violations, 0);
        assert_int_equal(v.consumed, 20000);
        if (strcmp(finish, "delete") == 0) {
                assert_int_equal(ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s'", topic), 0);
        } else {
                assert_int_equal(ts_pg_int(c,
                                           "SELECT count(*) FROM outbox WHERE topic = '%s'"
                                           " AND published_at IS NOT NULL AND dead_at IS NULL"
                                           " AND last_error IS NULL",
                                           topic),
                                 20000);
        }
        ts_msgs_free(&m);
        free(topic);
        PQfinish(c);
}

static void load_delete(void **state) {
        (void)state;
        concurrent_load("delete");
}

static void load_mark(void **state) {
        (void)state;
        concurrent_load("mark");
}

/* Tombstones, binary payloads with NUL bytes, NULL keys, empty payloads and headers. */
static void edge_payloads(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("relay-edge");
        const char *topics[] = { topic, NULL };
        struct ts_relay relay;
        struct ts_msgs m;
        struct ts_verify v;
        int tombstones = 0, nullkeys = 0, binary = 0;

        (void)state;
        ts_pg_install_copy(c);
        /* The first test of the run: a topic created on first use by a broker that has just
         * started kept its rows in flight past the 20 s below in one CI run (attempts 0, nothing
         * in the log); the topic is created first, as test_promises does. */
        ts_create_topic(topic, 1, NULL, NULL);
        ts_relay_start(&relay, "poll_interval = \"1s\";", NULL);
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));
        ts_pg_exec(c, "SELECT outbox_enqueue('%s', 'tomb', NULL::bytea)", topic);
        ts_pg_exec(c, "SELECT outbox_enqueue('%s', 'bin', '\\x00010000ff00'::bytea, '{\"a\": \"\"}')", topic);
        ts_pg_exec(c, "SELECT outbox_enqueue('%s', NULL, 'no key'::text)", topic);
        ts_pg_exec(c, "SELECT outbox_enqueue('%s', '', ''::bytea)", topic);
        ts_pg_exec(c,
                   "SELECT outbox_enqueue('%s', 'ключ', '{\"x\": \"ü\"}'::jsonb, '{\"h1\": \"v1\", \"h2\": "
                   "\"\\u00e9\"}')",
                   topic);
        assert_true(ts_wait_drained(c, topics, 20000));
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);

        ts_consume(topics, 5, 30000, 500, &m);
        ts_verify(c, topics, &m, false, &v);
        assert_int_equal(v.expected, 5);
        assert_int_equal(v.consumed, 5);
        assert_int_equal(v.missing + v.mismatched + v.duplicates + v.unexpected, 0);
        for (size_t i = 0; i < m.n; i++) {
                tombstones += m.v[i].value == NULL;
                nullkeys += m.v[i].key == NULL;
                binary += m.v[i].value_len == 6 && memcmp(m.v[i].value, "\0\1\0\0\xff\0", 6) == 0;
        }
        assert_int_equal(tombstones, 1);
        assert_int_equal(nullkeys, 1);
        assert_int_equal(binary, 1);
        ts_msgs_free(&m);
        free(topic);
        PQfinish(c);
}

/* With a 30 s poll interval a row still arrives at once: NOTIFY wakes the relay. A row whose
 * notification never came (triggers off) is still picked up by the poll, within its interval. */
static void notify_wakeup(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("relay-notify");
        const char *topics[] = { topic, NULL };
        struct ts_relay relay;
        struct ts_msgs m;
        int64_t t0, took;

        (void)state;
        ts_pg_install_copy(c);
        ts_relay_start(&relay, "poll_interval = \"30s\";", NULL);
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));
        /* A first row creates the topic (broker-side auto-creation takes a while). The batch
         * that published it, smaller than batch_size, set the next poll 30 s ahead, so only the
         * notification can bring the next row out sooner. */
        ts_pg_exec(c, "SELECT outbox_enqueue('%s', 'k', 'warm-up'::text)", topic);
        assert_true(ts_wait_drained(c, topics, 20000));
        t0 = ts_now_ms();
        ts_pg_exec(c, "SELECT outbox_enqueue('%s', 'k', 'wake up'::text)", topic);
        assert_true(ts_wait_drained(c, topics, 20000));
        took = ts_now_ms() - t0;
        fprintf(stderr, "notify: row published %lld ms after commit (poll interval 30 s)\n", (long long)took);
        /* A sixth of the poll interval: far above a wake-up (tens of ms, a few hundred under
         * ASan on a busy machine), far below a poll (about 30 s after the warm-up). */
        assert_true(took < 5000);
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);

        /* A lost notification: the row is committed with triggers off (the copy by hand). */
        ts_relay_start(&relay, "poll_interval = \"2s\";", NULL);
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));
        /* The new producer learns the topic first (its first message to a topic waits for the
         * topic's metadata), so what follows measures the poll alone. */
        ts_pg_exec(c, "SELECT outbox_enqueue('%s', 'k', 'warm-up again'::text)", topic);
        assert_true(ts_wait_drained(c, topics, 20000));
        ts_pg_exec(c,
                   "BEGIN; SET LOCAL session_replication_role = replica;"
                   " INSERT INTO outbox (topic, key, payload) VALUES ('%s', 'k', 'polled');"
                   " INSERT INTO outbox_test_copy (id, topic, key, payload, headers, created_at)"
                   " SELECT id, topic, key, payload, headers, created_at FROM outbox"
                   " WHERE topic = '%s' AND payload = 'polled';"
                   " COMMIT",
                   topic, topic);
        t0 = ts_now_ms();
        assert_true(ts_wait_drained(c, topics, 20000));
        took = ts_now_ms() - t0;
        fprintf(stderr, "notify: row without notification published after %lld ms (poll interval 2 s)\n",
                (long long)took);
        /* The next poll comes at most one interval after the commit; the margin covers the
         * batch itself and this test's 50 ms polling, also under ASan. */
        assert_true(took < 2000 + 1000);
        /* And it came with the poll (due 2 s after the warm-up), not with a notification. */
        assert_true(took >= 1000);
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);

        ts_consume(topics, 4, 30000, 500, &m);
        assert_int_equal(m.n, 4);
        ts_msgs_free(&m);
        free(topic);
        PQfinish(c);
}

/* A 2 MB row (over message.max.bytes) is dead-lettered with a readable reason while the 1000
 * rows around it, same key included, arrive. */
/* Swaps the type of outbox.topic (text <-> varchar) with the view on it kept. Returns a new
 * connection: the old one's cached plans (the test triggers') still expect the old type. */
static PGconn *retype_topic(PGconn *c, const char *type) {
        ts_pg_exec(c,
                   "DO $$ DECLARE d text := pg_get_viewdef('outbox_dead_letters'::regclass); BEGIN"
                   " DROP VIEW outbox_dead_letters;"
                   " ALTER TABLE outbox ALTER COLUMN topic TYPE %s;"
                   " EXECUTE 'CREATE VIEW outbox_dead_letters AS ' || d; END $$",
                   type);
        PQfinish(c);
        return ts_pg_connect();
}

/* The relay prepares its statements once per connection. A table altered under it so that the
 * claim's result changes type makes them fail ("cached plan must not change result type"): the
 * relay prepares them again and goes on, on the same connection. */
static void altered_table(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("relay-altered");
        const char *topics[] = { topic, NULL };
        struct ts_relay relay;
        struct ts_msgs m;
        bool drained;

        (void)state;
        ts_relay_start(&relay, "poll_interval = \"200ms\";",
                       "retry = { base = \"50ms\"; cap = \"200ms\"; };");
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));
        ts_pg_exec(c, "SELECT outbox_enqueue('%s', 'k', 'before'::text)", topic);
        assert_true(ts_wait_drained(c, topics, 20000));
        c = retype_topic(c, "varchar");
        ts_pg_exec(c, "SELECT outbox_enqueue('%s', 'k', 'altered'::text)", topic);
        drained = ts_wait_drained(c, topics, 20000);
        c = retype_topic(c, "text");
        assert_true(drained);
        ts_pg_exec(c, "SELECT outbox_enqueue('%s', 'k', 'back'::text)", topic);
        assert_true(ts_wait_drained(c, topics, 20000));
        /* It said why the claim failed, and did not reconnect for it. */
        assert_true(ts_relay_log_count(&relay, "cached plan must not change result type") >= 1);
        assert_int_equal(ts_relay_log_count(&relay, "connected to PostgreSQL"), 1);
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);

        ts_consume(topics, 3, 30000, 500, &m);
        assert_int_equal(m.n, 3);
        assert_memory_equal(m.v[0].value, "before", 6);
        assert_memory_equal(m.v[1].value, "altered", 7);
        assert_memory_equal(m.v[2].value, "back", 4);
        ts_msgs_free(&m);
        free(topic);
        PQfinish(c);
}

/* A table lock wanted while batches are in flight (an ALTER TABLE, a TRUNCATE, here a LOCK
 * TABLE): it waits for their transactions, and every statement on the table queues behind it. A
 * relay whose next claim or look waited in that queue would hold up the very loop that finishes
 * those batches, until statement_timeout (30 s). The lock must be had within seconds, the drain
 * go on after it, and every row arrive once, in order. */
static void table_lock_during_a_drain(void **state) {
        PGconn *c = ts_pg_connect(), *locker = ts_pg_connect();
        char *topic = ts_topic("relay-tablelock");
        const char *topics[] = { topic, NULL };
        struct ts_relay relay;
        struct ts_msgs m;
        struct ts_verify v;
        usec_t t0, waited;

        (void)state;
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'k' || (g %% 100), "
                   "convert_to('row ' || g, 'UTF8') FROM generate_series(1, 60000) g",
                   topic);
        ts_relay_start(&relay, "poll_interval = \"1s\"; pipelines = 2;", NULL);
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));
        while (ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s'", topic) > 50000)
                usleep(10 * 1000);
        t0 = now_usec();
        ts_pg_exec(locker, "BEGIN; LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE");
        waited = now_usec() - t0;
        usleep(300 * 1000);
        ts_pg_exec(locker, "COMMIT");
        fprintf(stderr, "table lock: had after %.0f ms with the relay draining\n", (double)waited / 1000);
        assert_true(waited < 5 * USEC_PER_SEC);
        assert_true(ts_wait_drained(c, topics, 60000));
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);

        ts_consume(topics, 60000, 60000, 1000, &m);
        ts_verify(c, topics, &m, true, &v);
        ts_verify_assert(&v, 60000, 0);
        ts_msgs_free(&m);
        free(topic);
        PQfinish(locker);
        PQfinish(c);
}

static void oversize_dead_letter(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("relay-oversize");
        const char *topics[] = { topic, NULL };
        struct ts_relay relay;
        struct ts_msgs m;
        struct ts_verify v;
        int64_t big;
        PGresult *res;

        (void)state;
        ts_pg_install_copy(c);
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'k' || (g %% 10), "
                   "convert_to('before ' || g, 'UTF8')"
                   " FROM generate_series(1, 500) g",
                   topic);
        big = ts_pg_int(c,
                        "SELECT outbox_enqueue('%s', 'k3', convert_to(repeat('x', 2 * 1024 * 1024), 'UTF8'))",
                        topic);
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'k' || (g %% 10), "
                   "convert_to('after ' || g, 'UTF8')"
                   " FROM generate_series(1, 500) g",
                   topic);
        ts_relay_start(&relay, "poll_interval = \"1s\";", NULL);
        assert_true(ts_wait_drained(c, topics, 30000));
        assert_true(ts_relay_log_wait(&relay, "dead-lettered", 5000));
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);

        res = PQexec(c, "SELECT id, last_error, attempts FROM outbox_dead_letters ORDER BY id DESC LIMIT 1");
        assert_int_equal(PQntuples(res), 1);
        assert_int_equal(strtoll(PQgetvalue(res, 0, 0), NULL, 10), big);
        fprintf(stderr, "oversize: row %lld dead-lettered: %s\n", (long long)big, PQgetvalue(res, 0, 1));
        assert_non_null(strstr(PQgetvalue(res, 0, 1), "too large"));
        PQclear(res);
        assert_int_equal(ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s'", topic), 1);

        ts_consume(topics, 1000, 30000, 1000, &m);
        ts_verify(c, topics, &m, true, &v);
        assert_int_equal(v.expected, 1000);
        assert_int_equal(v.consumed, 1000);
        assert_int_equal(v.missing + v.mismatched + v.duplicates + v.unexpected + v.order_violations, 0);
        ts_msgs_free(&m);
        ts_pg_exec(c, "DELETE FROM outbox WHERE topic = '%s'", topic);
        free(topic);
        PQfinish(c);
}

/* Rows written around outbox_enqueue() with headers that cannot become Kafka headers are
 * dead-lettered with the reason; the rest flows. */
static void bad_headers_dead_letter(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("relay-badhdr");
        const char *topics[] = { topic, NULL };
        struct ts_relay relay;
        struct ts_msgs m;
        PGresult *res;

        (void)state;
        ts_pg_install_copy(c);
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload, headers) VALUES"
                   " ('%s', 'a', 'ok1', '{\"h\": \"v\"}'),"
                   " ('%s', 'a', 'bad1', '{\"n\": 1}'),"
                   " ('%s', 'b', 'bad2', '[\"x\"]'),"
                   " ('%s', 'b', 'bad3', '{\"outbox-id\": \"1\"}'),"
                   " ('%s', 'a', 'ok2', 'null'),"
                   " ('%s', 'c', 'bad4', '{\"ok\": \"v\", \"arr\": [\"x\"]}'),"
                   " ('%s', 'c', 'bad5', '{\"z\": null}'),"
                   " ('%s', 'd', 'bad6', '{\"outbox-source\": \"elsewhere/public.outbox\"}')",
                   topic, topic, topic, topic, topic, topic, topic, topic);
        /* A configured source is what every message carries. */
        ts_relay_start(&relay, "poll_interval = \"1s\"; source = \"orders-eu-1\";", NULL);
        assert_true(ts_wait_drained(c, topics, 20000));
        /* Repaired and requeued, a dead letter is published like any row. */
        assert_int_equal(ts_pg_int(c, "SELECT count(*) FROM outbox_dead_letters WHERE topic = '%s'", topic),
                         6);
        assert_int_equal(ts_pg_int(c,
                                   "SELECT count(*) FROM outbox WHERE topic = '%s' AND payload = 'bad1'"
                                   " AND last_error = 'header ''n'' must have a string value (got number)'",
                                   topic),
                         1);
        ts_pg_exec(c, "UPDATE outbox SET headers = '{\"n\": \"1\"}' WHERE topic = '%s' AND payload = 'bad1'",
                   topic);
        assert_int_equal(ts_pg_int(c,
                                   "SELECT outbox_requeue(ARRAY(SELECT id FROM outbox WHERE topic = '%s'"
                                   " AND payload = 'bad1'))",
                                   topic),
                         1);
        assert_true(ts_wait_drained(c, topics, 20000));
        assert_int_equal(
                ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s' AND payload = 'bad1'", topic),
                0);
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        {
                char sql[256];

                snprintf(sql, sizeof(sql),
                         "SELECT encode(payload, 'escape'), last_error FROM outbox"
                         " WHERE dead_at IS NOT NULL AND topic = '%s' ORDER BY id DESC",
                         topic);
                res = PQexec(c, sql);
        }
        assert_int_equal(PQntuples(res), 5);
        assert_string_equal(PQgetvalue(res, 0, 0), "bad6");
        assert_string_equal(PQgetvalue(res, 0, 1), "header 'outbox-source' is reserved for the relay");
        assert_string_equal(PQgetvalue(res, 1, 0), "bad5");
        assert_string_equal(PQgetvalue(res, 1, 1), "header 'z' must have a string value (got null)");
        assert_string_equal(PQgetvalue(res, 2, 0), "bad4");
        assert_string_equal(PQgetvalue(res, 2, 1), "header 'arr' must have a string value (got array)");
        assert_string_equal(PQgetvalue(res, 3, 0), "bad3");
        assert_string_equal(PQgetvalue(res, 3, 1), "header 'outbox-id' is reserved for the relay");
        assert_string_equal(PQgetvalue(res, 4, 0), "bad2");
        assert_string_equal(PQgetvalue(res, 4, 1), "headers must be a JSON object (got array)");
        PQclear(res);
        ts_consume(topics, 3, 30000, 500, &m);
        assert_int_equal(m.n, 3);
        assert_memory_equal(m.v[0].value, "ok1", 3);
        assert_memory_equal(m.v[1].value, "ok2", 3);
        assert_memory_equal(m.v[2].value, "bad1", 4); /* the requeued one, last */
        for (size_t i = 0; i < m.n; i++) {
                size_t sources = 0;

                for (size_t j = 0; j < m.v[i].n_headers; j++)
                        if (strcmp(m.v[i].headers[j].name, "outbox-source") == 0) {
                                assert_string_equal(m.v[i].headers[j].value, "orders-eu-1");
                                sources++;
                        }
                assert_int_equal(sources, 1);
        }
        ts_msgs_free(&m);
        ts_pg_exec(c, "DELETE FROM outbox WHERE topic = '%s'", topic);
        free(topic);
        PQfinish(c);
}

/* Defect: one row whose created_at was infinity failed every claim that reached it, so the
 * relay published nothing after it (nor the rows before it in the same claim) and retried for
 * ever. Such a row is dead-lettered with its reason, and every other row goes out in order. */
static void infinite_created_at_dead_letter(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("relay-inftime");
        const char *topics[] = { topic, NULL };
        struct ts_relay relay;
        struct ts_msgs m;
        PGresult *res;
        char sql[256];

        (void)state;
        ts_pg_install_copy(c);
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload, created_at) VALUES"
                   " ('%s', 'a', 'ok1', '2026-01-02 03:04:05.678+00'), ('%s', 'a', 'inf', 'infinity'),"
                   " ('%s', 'a', 'ok2', '2026-01-02 03:04:05.679+00'), ('%s', 'b', 'ninf', '-infinity'),"
                   " ('%s', 'b', 'ok3', '2026-01-02 03:04:05.680+00')",
                   topic, topic, topic, topic, topic);
        ts_relay_start(&relay, "poll_interval = \"1s\";", NULL);
        assert_true(ts_wait_drained(c, topics, 20000));
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        snprintf(sql, sizeof(sql),
                 "SELECT encode(payload, 'escape'), last_error FROM outbox"
                 " WHERE dead_at IS NOT NULL AND topic = '%s' ORDER BY id",
                 topic);
        res = PQexec(c, sql);
        assert_int_equal(PQntuples(res), 2);
        assert_string_equal(PQgetvalue(res, 0, 0), "inf");
        assert_string_equal(PQgetvalue(res, 0, 1), MESSAGE_TIME_INFINITE);
        assert_string_equal(PQgetvalue(res, 1, 0), "ninf");
        assert_string_equal(PQgetvalue(res, 1, 1), MESSAGE_TIME_INFINITE);
        PQclear(res);
        assert_int_equal(ts_pg_int(c,
                                   "SELECT count(*) FROM outbox WHERE topic = '%s' AND dead_at IS NULL"
                                   " AND published_at IS NULL",
                                   topic),
                         0);
        ts_consume(topics, 3, 30000, 500, &m);
        assert_int_equal(m.n, 3);
        {
                /* each message once, its time its row's created_at; key a's in id order */
                const struct ts_msg *got[3] = { NULL, NULL, NULL };

                for (size_t i = 0; i < m.n; i++) {
                        int k;

                        assert_int_equal(m.v[i].value_len, 3);
                        assert_memory_equal(m.v[i].value, "ok", 2);
                        k = m.v[i].value[2] - '1';
                        assert_true(k >= 0 && k < 3 && !got[k]);
                        got[k] = &m.v[i];
                        assert_int_equal(m.v[i].timestamp, 1767323045678LL + k);
                }
                assert_int_equal(got[0]->partition, got[1]->partition);
                assert_true(got[0]->offset < got[1]->offset);
        }
        ts_msgs_free(&m);
        ts_pg_exec(c, "DELETE FROM outbox WHERE topic = '%s'", topic);
        free(topic);
        PQfinish(c);
}

/* The last id the relay's debug log says its claims start at (floor.c), or -1. */
static long long logged_floor(const struct ts_relay *r) {
        static const char needle[] = "start at id ";
        char line[1024];
        long long at = -1;
        FILE *f = fopen(r->log, "r");

        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f)) {
                const char *p = strstr(line, needle);

                if (p)
                        at = strtoll(p + strlen(needle), NULL, 10);
        }
        fclose(f);
        return at;
}

/* Waits up to timeout_ms for the relay's floor to pass `above` (dumping its log if it does not);
 * returns the last floor logged. */
static long long wait_floor_above(struct ts_relay *r, long long above, int timeout_ms) {
        long long at = logged_floor(r);

        for (int64_t t0 = ts_now_ms(); at <= above && ts_now_ms() - t0 < timeout_ms; at = logged_floor(r))
                usleep(100 * 1000);
        if (at <= above)
                ts_relay_dump_log(r);
        return at;
}

/* The claims start at the floor, past the finished rows' dead index entries (floor.h). A dead
 * letter lies below it once the rows after it are published; put back with outbox_requeue(),
 * it is published at once (the notification sends the relay below the floor), not after the
 * guard's interval, and the rows of its key that came after it keep their place in Kafka. */
static void requeue_below_the_floor(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("relay-floor");
        const char *topics[] = { topic, NULL };
        const struct ts_relay_opts o = { .relay_group = "poll_interval = \"1s\";", .log_level = "debug" };
        struct ts_relay relay;
        struct ts_msgs m;
        long long dead;
        int64_t t0;

        (void)state;
        /* Created first, as edge_payloads does: once here the topic created on first use kept the
         * relay's first batch in flight past the 20 s below (nothing in its debug log). */
        ts_create_topic(topic, 3, NULL, NULL);
        ts_relay_start_opts(&relay, &o);
        ts_pg_exec(
                c,
                "INSERT INTO outbox (topic, key, payload, headers) VALUES ('%s', 'a', 'bad', '{\"n\": 1}')",
                topic);
        dead = ts_pg_int(c, "SELECT max(id) FROM outbox WHERE topic = '%s'", topic);
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'k' || (g %% 7), convert_to('row ' "
                   "|| g, 'UTF8')"
                   " FROM generate_series(1, 300) g",
                   topic);
        assert_true(ts_wait_drained(c, topics, 20000));
        assert_int_equal(
                ts_pg_int(c, "SELECT count(*) FROM outbox WHERE id = %lld AND dead_at IS NOT NULL", dead), 1);
        /* Two looks, a second apart: the floor passes the dead letter. */
        assert_true(wait_floor_above(&relay, dead, 10000) > dead);

        ts_pg_exec(c, "UPDATE outbox SET headers = '{\"n\": \"1\"}' WHERE id = %lld", dead);
        t0 = ts_now_ms();
        assert_int_equal(ts_pg_int(c, "SELECT outbox_requeue(ARRAY[%lld::int8])", dead), 1);
        assert_true(ts_wait_drained(c, topics, 20000));
        /* Well within the guard's interval: the requeue's notification did it. */
        assert_true(ts_now_ms() - t0 < (int64_t)(FLOOR_GUARD_INTERVAL / USEC_PER_MSEC) / 2);
        assert_true(ts_relay_log_wait(&relay, "put back in line below id", 1000));
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);

        ts_consume(topics, 301, 30000, 500, &m);
        assert_int_equal(m.n, 301);
        {
                /* Each row once; per key in id order (the consumer reads each partition in order). */
                int64_t last[8] = { 0 };
                int requeued = 0;

                for (size_t i = 0; i < m.n; i++) {
                        const struct ts_msg *v = &m.v[i];

                        if (v->key_len == 1 && v->key[0] == 'a') {
                                assert_int_equal(v->outbox_id, dead);
                                requeued++;
                                continue;
                        }
                        assert_true(v->key_len == 2 && v->key[0] == 'k' && v->key[1] >= '0' &&
                                    v->key[1] < '7');
                        assert_true(v->outbox_id > last[v->key[1] - '0']);
                        last[v->key[1] - '0'] = v->outbox_id;
                }
                assert_int_equal(requeued, 1);
        }
        ts_msgs_free(&m);
        assert_int_equal(ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s'", topic), 0);
        free(topic);
        PQfinish(c);
}

/* Messages of `topic` in Kafka, each key's outbox ids checked ascending; returns how many. */
static size_t consume_in_key_order(const char *topic, size_t expect) {
        const char *topics[] = { topic, NULL };
        struct ts_msgs m;
        size_t n;

        ts_consume(topics, expect, 30000, 500, &m);
        for (size_t i = 0; i < m.n; i++)
                for (size_t j = i + 1; j < m.n; j++)
                        if (m.v[i].partition == m.v[j].partition && m.v[i].key_len == m.v[j].key_len &&
                            memcmp(m.v[i].key, m.v[j].key, m.v[i].key_len) == 0 &&
                            m.v[j].offset > m.v[i].offset)
                                assert_true(m.v[j].outbox_id > m.v[i].outbox_id);
        n = m.n;
        ts_msgs_free(&m);
        return n;
}

/* The rule's own case: a transaction that took its id before a step began and commits after
 * the step's floor would have passed it. While it stays open the floor must stay at or below
 * its row (other keys flowing, steps every second); once committed, its row goes out at once,
 * before the next row of its key. */
static void late_commit_keeps_its_place(void **state) {
        PGconn *c = ts_pg_connect(), *w = ts_pg_connect();
        char *topic = ts_topic("relay-late");
        const char *topics[] = { topic, NULL };
        const struct ts_relay_opts o = { .relay_group = "poll_interval = \"1s\";", .log_level = "debug" };
        struct ts_relay relay;
        long long held;
        int64_t t0;

        (void)state;
        ts_relay_start_opts(&relay, &o);
        /* A floor first (two looks with nothing running), then the transaction. */
        ts_pg_exec(c, "INSERT INTO outbox (topic, key, payload) VALUES ('%s', 'other-0', 'x')", topic);
        assert_true(wait_floor_above(&relay, 0, 5000) > 0);
        ts_pg_exec(w, "BEGIN");
        ts_pg_exec(w, "INSERT INTO outbox (topic, key, payload) VALUES ('%s', 'K', 'first')", topic);
        held = ts_pg_int(w, "SELECT max(id) FROM outbox WHERE topic = '%s'", topic);
        for (int i = 0; i < 30; i++) {
                ts_pg_exec(c, "INSERT INTO outbox (topic, key, payload) VALUES ('%s', 'other-%d', 'x')",
                           topic, i % 5);
                usleep(100 * 1000);
        }
        ts_pg_wait(c, 10000, "SELECT count(*) = 0 FROM outbox WHERE topic = '%s' AND key <> 'K'", topic);
        /* Three seconds, three looks: the floor went up to the held row and no further. */
        {
                long long at = logged_floor(&relay);

                ts_pg_exec(w, "COMMIT");
                assert_true(at > 0);
                assert_true(at <= held);
        }
        t0 = ts_now_ms();
        ts_pg_exec(c, "INSERT INTO outbox (topic, key, payload) VALUES ('%s', 'K', 'second')", topic);
        assert_true(ts_wait_drained(c, topics, 20000));
        assert_true(ts_now_ms() - t0 < (int64_t)(FLOOR_GUARD_INTERVAL / USEC_PER_MSEC) / 2);
        assert_int_equal(ts_relay_log_count(&relay, "where the claims started"), 0);
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        assert_int_equal(consume_in_key_order(topic, 33), 33);
        free(topic);
        PQfinish(w);
        PQfinish(c);
}

/* The sequence set back (as TRUNCATE ... RESTART IDENTITY does): rows get ids below the floor,
 * and the next look sends it to 0. Then a CACHE of 20: no floor from the next look on. Every
 * row goes out within seconds, in key order (the keys after the setback are new ones: ids
 * below their predecessors' would be out of id order by construction). */
static void the_sequence_changes(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("relay-seq");
        const char *topics[] = { topic, NULL };
        const struct ts_relay_opts o = { .relay_group = "poll_interval = \"1s\";", .log_level = "debug" };
        struct ts_relay relay;
        int64_t t0;

        (void)state;
        ts_relay_start_opts(&relay, &o);
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'k' || (g %% 3), 'a' FROM"
                   " generate_series(1, 200) g",
                   topic);
        assert_true(ts_wait_drained(c, topics, 20000));
        assert_true(wait_floor_above(&relay, 0, 5000) > 0);
        /* Back to just above the highest id still in the table (no key collides). */
        assert_true(ts_pg_int(c,
                              "SELECT setval(pg_get_serial_sequence('outbox', 'id'),"
                              " (SELECT coalesce(max(id), 1) FROM outbox), true)") > 0);
        t0 = ts_now_ms();
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'j' || (g %% 3), 'b' FROM"
                   " generate_series(1, 20) g",
                   topic);
        assert_true(ts_relay_log_wait(&relay, "went back", 5000));
        assert_true(ts_wait_drained(c, topics, 20000));
        assert_true(ts_now_ms() - t0 < (int64_t)(FLOOR_GUARD_INTERVAL / USEC_PER_MSEC) / 2);

        ts_pg_exec(c, "ALTER SEQUENCE outbox_id_seq CACHE 20"); /* the identity's, as sql/001 creates it */
        assert_true(ts_relay_log_wait(&relay, "from now on", 5000));
        ts_pg_exec(c, "ALTER SEQUENCE outbox_id_seq CACHE 1");
        ts_pg_exec(c, "INSERT INTO outbox (topic, key, payload) VALUES ('%s', 'j0', 'c')", topic);
        assert_true(ts_wait_drained(c, topics, 20000));
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        assert_int_equal(consume_in_key_order(topic, 221), 221);
        free(topic);
        PQfinish(c);
}

/* The relay reads headers in C (headers.c); the claim's SQL used to check them. Every reason
 * must be the one that SQL gave, and every good row's headers must arrive as jsonb_each_text
 * lists them: headers of every JSON type and shape, names that quote_literal() escapes, numbers
 * no double holds, deep nesting, non-ASCII text. The SQL below is the old claim's, verbatim. */
static void headers_as_sql_read_them(void **state) {
        static const char *const cases[] = {
                "{\"plain\": \"v\", \"sp ace\": \"x y\", \"\": \"\"}",
                "{\"é\": \"ü\", \"emoji\": \"\\ud83d\\ude00\", \"ctl\": \"a\\nb\\tc\\u0001\"}",
                "{\"q\": \"it's \\\"quoted\\\" \\\\ back\"}",
                "{}",
                "null",
                "[]",
                "\"text\"",
                "1e400",
                "true",
                "{\"it's\": 1}",
                "{\"a\\\\b\": false}",
                "{\"it's\\\\\": []}",
                "{\"big\": 1e400, \"a\": \"ok\"}",
                "{\"neg\": -123456789012345678901234567890.5e-3}",
                "{\"zz\": null, \"b\": {}}",
                "{\"deep\": "
                "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
                "{\"s\": \"1e400\", \"o\": {\"outbox-id\": \"x\"}}",
                "{\"outbox-id\": 5, \"a\": 1}",
                "{\"OUTBOX-ID\": \"not ours\"}",
        };
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("relay-hdrsql");
        const char *topics[] = { topic, NULL };
        struct ts_relay relay;
        struct ts_msgs m;
        struct ts_verify v;
        size_t n = sizeof(cases) / sizeof(cases[0]), dead;

        (void)state;
        ts_pg_install_copy(c);
        for (size_t i = 0; i < n; i++) {
                const char *vals[2] = { topic, cases[i] };
                PGresult *res = PQexecParams(c,
                                             "INSERT INTO outbox (topic, key, payload, headers)"
                                             " VALUES ($1, 'k', 'p', $2::jsonb)",
                                             2, NULL, vals, NULL, NULL, 0);

                if (PQresultStatus(res) != PGRES_COMMAND_OK)
                        fail_msg("case %zu (%s): %s", i, cases[i], PQerrorMessage(c));
                PQclear(res);
        }
        ts_relay_start(&relay, "poll_interval = \"1s\";", NULL);
        assert_true(ts_wait_drained(c, topics, 20000));
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        /* Every row with a reason by the old SQL is dead with exactly that reason, and no other. */
        ts_pg_exec(
                c,
                "CREATE TEMP TABLE hdr_expected AS SELECT id, CASE"
                "  WHEN o.headers IS NULL OR jsonb_typeof(o.headers) = 'null' THEN NULL"
                "  WHEN jsonb_typeof(o.headers) <> 'object' THEN"
                "   format('headers must be a JSON object (got %%s)', jsonb_typeof(o.headers))"
                "  WHEN o.headers ? 'outbox-id' THEN 'header ''outbox-id'' is reserved for the relay'"
                "  WHEN o.headers ? 'outbox-source' THEN 'header ''outbox-source'' is reserved for the relay'"
                "  WHEN jsonb_path_exists(o.headers, 'strict $.* ? (@.type() != \"string\")') THEN"
                "   (SELECT format('header %%s must have a string value (got %%s)',"
                "                  quote_literal(h.key), jsonb_typeof(h.value))"
                "      FROM jsonb_each(o.headers) h WHERE jsonb_typeof(h.value) <> 'string' LIMIT 1) END"
                "  AS reason FROM outbox_test_copy o WHERE o.topic = '%s'",
                topic);
        dead = (size_t)ts_pg_int(c, "SELECT count(*) FROM hdr_expected WHERE reason IS NOT NULL");
        assert_int_equal(dead, 13);
        assert_int_equal(ts_pg_int(c,
                                   "SELECT count(*) FROM hdr_expected e JOIN outbox o USING (id)"
                                   " WHERE o.dead_at IS NOT NULL AND o.last_error = e.reason"),
                         dead);
        assert_int_equal(
                ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s' AND dead_at IS NOT NULL", topic),
                dead);
        /* The rest arrived, headers as jsonb_each_text lists them. */
        ts_consume(topics, n - dead, 30000, 500, &m);
        ts_verify(c, topics, &m, true, &v);
        assert_int_equal(v.expected, n - dead);
        assert_int_equal(v.consumed, n - dead);
        assert_int_equal(v.missing + v.mismatched + v.duplicates + v.unexpected + v.order_violations, 0);
        ts_msgs_free(&m);
        ts_pg_exec(c, "DROP TABLE hdr_expected");
        ts_pg_exec(c, "DELETE FROM outbox WHERE topic = '%s'", topic);
        free(topic);
        PQfinish(c);
}

/* finish = "mark" with a retention: marked rows older than it are deleted in small batches,
 * more than one batch's worth at a time; younger ones stay. */
static void mark_retention(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("relay-retention");
        const char *topics[] = { topic, NULL };
        struct ts_relay relay;

        (void)state;
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'k' || (g %% 10), 'x'"
                   " FROM generate_series(1, 3000) g",
                   topic);
        /* Created first, as edge_payloads does: in two runs of five on a test bed (and in a CI
         * run) the topic created on first use kept the relay's first batch in flight past the 30 s
         * below (the relay waiting in kafka_flush(), its batch's transaction idle, nothing in its
         * log). */
        ts_create_topic(topic, 3, NULL, NULL);
        ts_relay_start(&relay, "finish = \"mark\"; retention = \"1m\"; poll_interval = \"500ms\";", NULL);
        assert_true(ts_wait_drained(c, topics, 30000));
        assert_int_equal(
                ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s' AND published_at IS NOT NULL",
                          topic),
                3000);
        /* Age 2500 of them past the retention. */
        ts_pg_exec(c,
                   "UPDATE outbox SET published_at = now() - interval '2 minutes'"
                   " WHERE id = ANY(ARRAY(SELECT id FROM outbox WHERE topic = '%s' ORDER BY id LIMIT 2500))",
                   topic);
        ts_pg_wait(c, 30000, "SELECT count(*) <= 500 FROM outbox WHERE topic = '%s'", topic);
        assert_int_equal(ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s'", topic), 500);
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        ts_pg_exec(c, "DELETE FROM outbox WHERE topic = '%s'", topic);
        free(topic);
        PQfinish(c);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(edge_payloads, ts_teardown),
                cmocka_unit_test_teardown(bad_headers_dead_letter, ts_teardown),
                cmocka_unit_test_teardown(infinite_created_at_dead_letter, ts_teardown),
                cmocka_unit_test_teardown(requeue_below_the_floor, ts_teardown),
                cmocka_unit_test_teardown(late_commit_keeps_its_place, ts_teardown),
                cmocka_unit_test_teardown(the_sequence_changes, ts_teardown),
                cmocka_unit_test_teardown(headers_as_sql_read_them, ts_teardown),
                cmocka_unit_test_teardown(notify_wakeup, ts_teardown),
                cmocka_unit_test_teardown(altered_table, ts_teardown),
                cmocka_unit_test_teardown(table_lock_during_a_drain, ts_teardown),
                cmocka_unit_test_teardown(oversize_dead_letter, ts_teardown),
                cmocka_unit_test_teardown(load_delete, ts_teardown),
                cmocka_unit_test_teardown(load_mark, ts_teardown),
                cmocka_unit_test_teardown(mark_retention, ts_teardown),
        };

        ts_env("PGPORT");
        ts_env("KAFKA_BOOTSTRAP");
        return cmocka_run_group_tests(tests, NULL, NULL);
}
