/* test_testbed.c -- Proves the test bed is real: schema, writer helpers, NOTIFY, a real Kafka broker. */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support.h"

/* outbox_enqueue() stores jsonb, text and bytea payloads as the bytes a consumer will see. */
static void enqueue_overloads(void **state) {
        PGconn *c = ts_pg_connect();
        int64_t a, b, d;

        (void)state;
        a = ts_pg_int(c,
                      "SELECT outbox_enqueue('tb-enqueue', 'k1', '{\"a\": 1, \"b\": [true]}'::jsonb,"
                      " '{\"h\": \"v\"}')");
        b = ts_pg_int(c, "SELECT outbox_enqueue('tb-enqueue', NULL, 'plain text ü'::text)");
        d = ts_pg_int(c, "SELECT outbox_enqueue('tb-enqueue', 'k2', '\\x00ff0001'::bytea)");
        assert_true(a < b && b < d);
        assert_int_equal(ts_pg_int(c,
                                   "SELECT count(*) FROM outbox WHERE id = %lld AND"
                                   " payload = convert_to('{\"a\": 1, \"b\": [true]}', 'UTF8')"
                                   " AND key = 'k1' AND headers = '{\"h\":\"v\"}'",
                                   (long long)a),
                         1);
        assert_int_equal(ts_pg_int(c,
                                   "SELECT count(*) FROM outbox WHERE id = %lld AND key IS NULL AND"
                                   " payload = '\\x706c61696e207465787420c3bc'::bytea",
                                   (long long)b),
                         1);
        assert_int_equal(ts_pg_int(c, "SELECT length(payload) FROM outbox WHERE id = %lld", (long long)d), 4);
        assert_int_equal(ts_pg_int(c,
                                   "SELECT get_byte(payload, 0) + get_byte(payload, 2)"
                                   " FROM outbox WHERE id = %lld",
                                   (long long)d),
                         0);
        assert_int_equal(
                ts_pg_int(c, "SELECT get_byte(payload, 1) FROM outbox WHERE id = %lld", (long long)d), 255);
        ts_pg_exec(c, "DELETE FROM outbox WHERE topic = 'tb-enqueue'");
        PQfinish(c);
}

/* Headers the relay would have to dead-letter are refused at write time by the helper. */
static void enqueue_rejects_bad_headers(void **state) {
        PGconn *c = ts_pg_connect();
        const char *bad[] = { "'[1,2]'", "'{\"n\": 1}'", "'{\"outbox-id\": \"7\"}'",
                              "'{\"outbox-source\": \"x\"}'" };

        (void)state;
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char sql[200];
                PGresult *res;

                snprintf(sql, sizeof(sql), "SELECT outbox_enqueue('tb-bad', 'k', 'x'::text, %s)", bad[i]);
                res = PQexec(c, sql);
                assert_int_equal(PQresultStatus(res), PGRES_FATAL_ERROR);
                assert_non_null(strstr(PQresultErrorMessage(res), "outbox_enqueue"));
                PQclear(res);
        }
        assert_int_equal(ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = 'tb-bad'"), 0);
        PQfinish(c);
}

/* Topic names Kafka can never accept are refused by the helper, with the rule they break; legal
 * names at the edges of the rule are accepted; a direct INSERT is not checked (no constraint). */
static void enqueue_rejects_bad_topics(void **state) {
        PGconn *c = ts_pg_connect();
        const struct {
                const char *topic; /* an SQL expression */
                const char *why; /* part of the message; NULL = accepted */
        } cases[] = {
                { "''", "must not be empty" },
                { "NULL", "must not be empty" },
                { "'bad topic!'", "only ASCII letters, digits" },
                { "'a/b'", "only ASCII letters, digits" },
                { "'caf' || chr(233)", "only ASCII letters, digits" },
                { "E'tb-topic\\n'", "only ASCII letters, digits" },
                { "repeat('t', 250)", "at most 249 characters" },
                { "'.'", "cannot be '.' or '..'" },
                { "'..'", "cannot be '.' or '..'" },
                { "repeat('t', 249)", NULL },
                { "'...'", NULL },
                { "'tb.Topic_name-09'", NULL },
        };

        (void)state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char sql[300];
                PGresult *res;

                snprintf(sql, sizeof(sql), "SELECT outbox_enqueue(%s, 'k', 'x'::text)", cases[i].topic);
                res = PQexec(c, sql);
                if (cases[i].why) {
                        const char *msg = PQresultErrorMessage(res);

                        fprintf(stderr, "  %s: %s", cases[i].topic, msg);
                        assert_int_equal(PQresultStatus(res), PGRES_FATAL_ERROR);
                        assert_non_null(strstr(msg, "outbox_enqueue: topic"));
                        assert_non_null(strstr(msg, cases[i].why));
                } else {
                        assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
                }
                PQclear(res);
        }
        assert_int_equal(ts_pg_int(c,
                                   "SELECT count(*) FROM outbox WHERE topic IN (repeat('t', 249), '...',"
                                   " 'tb.Topic_name-09')"),
                         3);
        ts_pg_exec(c, "DELETE FROM outbox WHERE topic IN (repeat('t', 249), '...', 'tb.Topic_name-09')");
        /* Not a constraint: existing rows and direct INSERTs keep working (the relay dead-letters them). */
        ts_pg_exec(c, "BEGIN");
        assert_true(
                ts_pg_int(c,
                          "INSERT INTO outbox (topic, payload) VALUES ('tb bad topic', 'x') RETURNING id") >
                0);
        ts_pg_exec(c, "ROLLBACK");
        PQfinish(c);
}

/* Applying every migration again changes nothing and fails nothing. */
static void migrations_idempotent(void **state) {
        PGconn *c = ts_pg_connect();
        const char *src = getenv("OUTBOX_RELAY_SRCDIR");
        const char *files[] = { "001_outbox.sql", "002_enqueue.sql", "003_dead_letters.sql" };
        int64_t before;

        (void)state;
        assert_non_null(src);
        ts_pg_exec(c, "SELECT outbox_enqueue('tb-migrate', 'k', 'kept'::text)");
        before = ts_pg_int(c, "SELECT count(*) FROM outbox");
        for (size_t i = 0; i < 3; i++) {
                char path[512];
                FILE *f;
                char *sql = NULL;
                size_t cap = 0;
                ssize_t n;

                snprintf(path, sizeof(path), "%s/sql/%s", src, files[i]);
                f = fopen(path, "r");
                assert_non_null(f);
                n = getdelim(&sql, &cap, 0, f);
                fclose(f);
                assert_true(n > 0);
                ts_pg_exec(c, "%s", sql);
                free(sql);
        }
        assert_int_equal(ts_pg_int(c, "SELECT count(*) FROM outbox"), before);
        assert_int_equal(ts_pg_int(c, "SELECT count(*) FROM pg_trigger WHERE tgname = 'outbox_notify'"), 1);
        assert_int_equal(
                ts_pg_int(c, "SELECT count(*) FROM pg_indexes WHERE indexname = 'outbox_pending_idx'"), 1);
        ts_pg_exec(c, "DELETE FROM outbox WHERE topic = 'tb-migrate'");
        PQfinish(c);
}

/* The outbox notifications that reach listener l before `tag`, which writer w sends after its
 * statements: notifications are delivered in commit order, so once the tag is in, every earlier
 * one is too, and no time window has to be guessed. Fails when the tag is not in within
 * timeout_ms. */
static int notifies_before(PGconn *l, PGconn *w, const char *tag, int timeout_ms) {
        int count = 0;
        int64_t until = ts_now_ms() + timeout_ms;

        ts_pg_exec(w, "SELECT pg_notify('outbox', '%s')", tag);
        for (;;) {
                struct pollfd p = { .fd = PQsocket(l), .events = POLLIN };
                PGnotify *n;
                int64_t left = until - ts_now_ms();

                if (left <= 0)
                        fail_msg("no notification '%s' within %d ms (%d before it)", tag, timeout_ms, count);
                if (poll(&p, 1, (int)left) > 0)
                        PQconsumeInput(l);
                while ((n = PQnotifies(l))) {
                        bool is_tag = strcmp(n->extra, tag) == 0;

                        assert_string_equal(n->relname, "outbox");
                        PQfreemem(n);
                        if (is_tag)
                                return count;
                        count++;
                }
        }
}

/* The trigger notifies once per inserting statement, however many rows it inserts. */
static void notify_once_per_statement(void **state) {
        PGconn *l = ts_pg_connect(), *w = ts_pg_connect();

        (void)state;
        ts_pg_exec(l, "LISTEN outbox");
        ts_pg_exec(w,
                   "INSERT INTO outbox (topic, key, payload) SELECT 'tb-notify', 'k' || g, 'x'"
                   " FROM generate_series(1, 500) g");
        assert_int_equal(notifies_before(l, w, "tb-sentinel-1", 10000), 1);
        for (int i = 0; i < 3; i++)
                ts_pg_exec(w, "SELECT outbox_enqueue('tb-notify', 'k', 'x'::text)");
        assert_int_equal(notifies_before(l, w, "tb-sentinel-2", 10000), 3);
        ts_pg_exec(w, "UPDATE outbox SET attempts = 0 WHERE topic = 'tb-notify'");
        assert_int_equal(notifies_before(l, w, "tb-sentinel-3", 10000), 0);
        ts_pg_exec(w, "DELETE FROM outbox WHERE topic = 'tb-notify'");
        PQfinish(l);
        PQfinish(w);
}

/* A message produced with librdkafka comes back from the real broker byte for byte. */
static void kafka_roundtrip(void **state) {
        char *topic = ts_topic("tb-kafka");
        const char *topics[] = { topic, NULL };
        const char payload[] = "hello\0kafka";
        struct ts_msgs m;

        (void)state;
        assert_int_equal(ts_produce(topic, "key-1", payload, sizeof(payload)), RD_KAFKA_RESP_ERR_NO_ERROR);
        ts_consume(topics, 1, 30000, 300, &m);
        assert_int_equal(m.n, 1);
        assert_string_equal(m.v[0].key, "key-1");
        assert_int_equal(m.v[0].value_len, sizeof(payload));
        assert_memory_equal(m.v[0].value, payload, sizeof(payload));
        fprintf(stderr, "kafka: round trip through broker %s (Kafka %s) ok\n", ts_env("KAFKA_BOOTSTRAP"),
                ts_env("KAFKA_VERSION"));
        ts_msgs_free(&m);
        free(topic);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(enqueue_overloads),          cmocka_unit_test(enqueue_rejects_bad_headers),
                cmocka_unit_test(enqueue_rejects_bad_topics), cmocka_unit_test(migrations_idempotent),
                cmocka_unit_test(notify_once_per_statement),  cmocka_unit_test(kafka_roundtrip),
        };

        ts_env("PGPORT");
        ts_env("KAFKA_BOOTSTRAP");
        return cmocka_run_group_tests(tests, NULL, NULL);
}
