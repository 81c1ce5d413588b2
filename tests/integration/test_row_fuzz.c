/* test_row_fuzz.c -- Random rows straight into the table (every JSON type and depth in headers, bad topics, NULLs, sizes up to past Kafka's limit): each one is delivered byte-identical or dead-lettered with a readable reason, none skipped. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "support.h"

#define ROWS 3000

/* ts_rand from this state: the seed is printed, so a failing run can be replayed (ROW_FUZZ_SEED=N). */
static uint64_t rng;

static uint64_t next(void) {
        return ts_rand(&rng);
}

static unsigned pick(unsigned n) {
        return (unsigned)(next() % n);
}

/* ---- a growable string ---- */
struct buf {
        char *p;
        size_t n, cap;
};

static void put(struct buf *b, const char *s, size_t n) {
        if (b->n + n + 1 > b->cap) {
                b->cap = (b->n + n + 1) * 2;
                b->p = realloc(b->p, b->cap);
                if (!b->p)
                        fail_msg("out of memory");
        }
        memcpy(b->p + b->n, s, n);
        b->n += n;
        b->p[b->n] = 0;
}

static void puts_(struct buf *b, const char *s) {
        put(b, s, strlen(s));
}

/* A JSON string: ASCII, escapes, two- and four-byte UTF-8, escaped surrogate pairs; sometimes
 * empty, sometimes long. */
static void json_string(struct buf *b) {
        static const char *const parts[] = { "a",       "Z",      "0",   " ",   "-",
                                             "\\\"",    "\\\\",   "\\n", "\\t", "\\u00e9",
                                             "é",       "€",      "😀",   "/",   "\\ud83d\\ude00",
                                             "\\u0001", "outbox", "id" };
        unsigned len = pick(8) == 0 ? 200 + pick(2000) : pick(12);

        puts_(b, "\"");
        for (unsigned i = 0; i < len; i++)
                puts_(b, parts[pick(sizeof(parts) / sizeof(parts[0]))]);
        puts_(b, "\"");
}

static void json_value(struct buf *b, int depth);

static void json_object(struct buf *b, int depth, bool strings_only) {
        unsigned n = pick(6);

        puts_(b, "{");
        for (unsigned i = 0; i < n; i++) {
                if (i)
                        puts_(b, ",");
                json_string(b);
                puts_(b, ":");
                if (strings_only)
                        json_string(b);
                else
                        json_value(b, depth + 1);
        }
        puts_(b, "}");
}

static void json_value(struct buf *b, int depth) {
        static const char *const scalars[] = {
                "0", "-1", "3.25", "1e308", "-0.0", "12345678901234567890123", "true", "false", "null", "1E-7"
        };
        unsigned k = depth > 6 ? pick(2) : pick(5);
        char tmp[8];

        switch (k) {
        case 0:
                json_string(b);
                break;
        case 1:
                puts_(b, scalars[pick(sizeof(scalars) / sizeof(scalars[0]))]);
                break;
        case 2: {
                unsigned n = pick(4);

                puts_(b, "[");
                for (unsigned i = 0; i < n; i++) {
                        if (i)
                                puts_(b, ",");
                        json_value(b, depth + 1);
                }
                puts_(b, "]");
                break;
        }
        case 3:
                json_object(b, depth, false);
                break;
        default: /* deep nesting */
                for (unsigned i = 0; i < 20; i++)
                        puts_(b, "[");
                snprintf(tmp, sizeof(tmp), "%u", pick(10));
                puts_(b, tmp);
                for (unsigned i = 0; i < 20; i++)
                        puts_(b, "]");
                break;
        }
}

/* The headers column: NULL, a valid object of strings (most), one with other values, one that
 * is not an object at all, one with the relay's own header name. Returns NULL for SQL NULL. */
static char *headers(void) {
        struct buf b = { 0 };
        unsigned k = pick(20);

        if (k == 0)
                return NULL;
        if (k < 12)
                json_object(&b, 0, true);
        else if (k < 15)
                json_object(&b, 0, false);
        else if (k < 18)
                json_value(&b, 0);
        else {
                puts_(&b, "{\"outbox-id\":\"7\",");
                json_string(&b);
                puts_(&b, ":\"x\"}");
        }
        if (!b.p)
                puts_(&b, "{}");
        return b.p;
}

/* ---- the test ---- */

static void random_rows_are_delivered_or_dead_lettered(void **state) {
        PGconn *c = ts_pg_connect();
        char *good[3], *bad_long;
        const char *bad[5];
        const char *topics[4];
        struct ts_relay relay;
        struct ts_msgs msgs;
        struct ts_verify v;
        int64_t first, dead, readable, wrongly_dead;
        size_t delivered;
        const char *env = getenv("ROW_FUZZ_SEED");
        uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ (uint64_t)ts_now_ms();

        (void)state;
        rng = seed ? seed : 1;
        fprintf(stderr, "row fuzz: seed %llu (replay with ROW_FUZZ_SEED=%llu)\n", (unsigned long long)seed,
                (unsigned long long)seed);
        for (int i = 0; i < 3; i++)
                good[i] = ts_topic("rowfuzz");
        bad_long = malloc(251);
        memset(bad_long, 'a', 250);
        bad_long[250] = 0;
        bad[0] = "";
        bad[1] = "..";
        bad[2] = "bad topic";
        bad[3] = "t\xc3\xb6pic";
        bad[4] = bad_long;
        ts_pg_install_copy(c);
        first = ts_pg_int(c, "SELECT coalesce(max(id), 0) + 1 FROM outbox");

        ts_pg_exec(c, "BEGIN");
        for (int i = 0; i < ROWS; i++) {
                char *h = headers();
                const char *topic = pick(25) == 0 ? bad[pick(5)] : good[pick(3)];
                struct buf key = { 0 };
                unsigned pk = pick(10), pp = pick(200);
                size_t plen = pp == 0 ? 1100000 + pick(100000) /* past Kafka's 1 MB */
                        : pp < 3      ? 900000 + pick(50000) /* near it */
                        : pp < 20     ? 0
                                      : pick(pick(4) == 0 ? 65536 : 512);
                char *payload = malloc(plen + 1);
                const char *vals[4];
                int lens[4], fmts[4] = { 0, 0, 1, 0 };
                PGresult *res;

                if (pk > 1) {
                        unsigned n = 1 + pick(pk == 9 ? 300 : 12);

                        for (unsigned j = 0; j < n; j++)
                                puts_(&key, (const char *[]){ "k", "é", "7", " ", "😀", "-" }[pick(6)]);
                } else if (pk == 1) {
                        puts_(&key, "");
                }
                for (size_t j = 0; j < plen; j++)
                        payload[j] = (char)next();
                vals[0] = topic;
                vals[1] = pk == 0 ? NULL : key.p ? key.p : "";
                vals[2] = pp >= 3 && pp < 10 ? NULL : payload; /* tombstones */
                vals[3] = h;
                lens[2] = (int)plen;
                res = PQexecParams(
                        c, "INSERT INTO outbox (topic, key, payload, headers) VALUES ($1, $2, $3, $4::jsonb)",
                        4, NULL, vals, lens, fmts, 0);
                if (PQresultStatus(res) != PGRES_COMMAND_OK)
                        fail_msg("insert %d: %s\nheaders: %.300s", i, PQerrorMessage(c), h ? h : "NULL");
                PQclear(res);
                free(payload);
                free(key.p);
                free(h);
        }
        ts_pg_exec(c, "COMMIT");

        ts_relay_start_opts(&relay, &(struct ts_relay_opts){ .relay_group = "poll_interval = \"1s\";" });
        /* none skipped: every row ends published or dead-lettered */
        ts_pg_wait(c, 120000, "SELECT count(*) = 0 FROM outbox WHERE id >= %lld AND dead_at IS NULL",
                   (long long)first);
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);

        /* every row not dead-lettered arrived exactly as written, in key order, once */
        for (int i = 0; i < 3; i++)
                topics[i] = good[i];
        topics[3] = NULL;
        delivered = (size_t)ts_pg_int(
                c,
                "SELECT count(*) FROM outbox_test_copy t WHERE t.id >= %lld AND t.topic IN "
                "('%s', '%s', '%s') AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.id = t.id)",
                (long long)first, good[0], good[1], good[2]);
        ts_consume(topics, delivered, 120000, 2000, &msgs);
        ts_verify(c, topics, &msgs, true, &v);
        ts_verify_assert(&v, delivered, 0);
        ts_msgs_free(&msgs);

        /* every dead letter says why, in one of the relay's reasons (valid UTF-8: a text column
         * holds nothing else; a header's name is quoted as it is, control characters and all) */
        dead = ts_pg_int(c, "SELECT count(*) FROM outbox WHERE id >= %lld", (long long)first);
        readable = ts_pg_int(
                c,
                "SELECT count(*) FROM outbox WHERE id >= %lld AND dead_at IS NOT NULL"
                " AND length(last_error) BETWEEN 10 AND 400"
                " AND last_error ~ '^(headers? |topic |Kafka refused the message: |delivery failed: )'",
                (long long)first);
        /* and only rows with something wrong are dead: a valid topic, headers that are NULL or an
         * object of strings without outbox-id or outbox-source, and a payload well within Kafka's limit */
        wrongly_dead = ts_pg_int(
                c,
                "SELECT count(*) FROM outbox WHERE id >= %lld AND topic IN ('%s', '%s', '%s')"
                " AND coalesce(octet_length(payload), 0) < 1000000"
                " AND (headers IS NULL OR jsonb_typeof(headers) = 'null' OR (jsonb_typeof(headers) = 'object'"
                "  AND NOT headers ?| array['outbox-id', 'outbox-source']"
                "  AND NOT EXISTS (SELECT 1 FROM jsonb_each(headers) e WHERE jsonb_typeof(e.value) <> "
                "'string')))",
                (long long)first, good[0], good[1], good[2]);
        fprintf(stderr,
                "row fuzz: %d rows, %zu delivered as written, %lld dead-lettered (%lld with a readable "
                "reason),"
                " %lld dead-lettered without a cause, 0 pending\n",
                ROWS, delivered, (long long)dead, (long long)readable, (long long)wrongly_dead);
        if (readable != dead || wrongly_dead != 0) {
                PGresult *r =
                        PQexec(c,
                               "SELECT id, topic, left(headers::text, 120), octet_length(payload), last_error"
                               " FROM outbox ORDER BY id DESC LIMIT 20");

                for (int i = 0; i < PQntuples(r); i++)
                        fprintf(stderr, "  %s | %s | %s | %s | %s\n", PQgetvalue(r, i, 0),
                                PQgetvalue(r, i, 1), PQgetvalue(r, i, 2), PQgetvalue(r, i, 3),
                                PQgetvalue(r, i, 4));
                PQclear(r);
        }
        assert_int_equal(readable, dead);
        assert_int_equal(wrongly_dead, 0);
        assert_true(dead > 0 && delivered > 0);
        assert_int_equal((int64_t)delivered + dead, ROWS);
        ts_pg_exec(c, "DELETE FROM outbox WHERE id >= %lld", (long long)first);
        for (int i = 0; i < 3; i++)
                free(good[i]);
        free(bad_long);
        PQfinish(c);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(random_rows_are_delivered_or_dead_lettered, ts_teardown),
        };

        ts_env("KAFKA_BOOTSTRAP");
        return cmocka_run_group_tests(tests, NULL, NULL);
}
