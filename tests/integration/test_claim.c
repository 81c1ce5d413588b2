/* test_claim.c -- The claim (pg_claim) against the test bed's PostgreSQL: paused backlogs are not read, order and SKIP LOCKED hold, the ordered claims of a relay alone and of relays sharing never overtake each other's rows, every error says why. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "pg.h"
#include "share.h"
#include "support.h"

#define BIG 200000 /* paused backlog that must not be read */
#define SMALL 1000 /* paused backlog to compare with */
#define LIMIT 100 /* batch size of the measured claims */
#define RUNS 7 /* claims per measurement; the median counts */
#define MAX_RATIO 3 /* generous: the machine is shared and noisy */

static struct relay_config cfg;
static struct pg pg;
static PGconn *admin;

static int setup(void **state) {
        (void)state;
        if (config_defaults(&cfg) < 0)
                return -1;
        free(cfg.postgres.conninfo);
        cfg.postgres.conninfo = strdup(ts_conninfo());
        /* The claim forms themselves, without bucket locks (ordering = "key" adds those: its
         * rows are tested through the relays in test_sharing.c). */
        cfg.relay.ordering = ORDERING_NONE;
        if (!cfg.postgres.conninfo || pg_init(&pg, &cfg) < 0)
                return -1;
        admin = ts_pg_connect();
        return 0;
}

static int teardown(void **state) {
        (void)state;
        pg_done(&pg);
        config_free(&cfg);
        PQfinish(admin);
        return 0;
}

/* Each test starts connected, with no transaction open, and with no rows of this file's topics
 * (a failed test may have left some). */
static int connect_pg(void **state) {
        char err[512];

        (void)state;
        pg_rollback(&pg, now_usec() + 10 * USEC_PER_SEC);
        ts_pg_exec(admin, "DELETE FROM outbox WHERE topic LIKE 'tc-%%'");
        if (!pg_connected(&pg) && pg_connect(&pg, now_usec() + 10 * USEC_PER_SEC, err, sizeof(err)) < 0) {
                fprintf(stderr, "pg_connect: %s\n", err);
                return -1;
        }
        return 0;
}

/* VACUUM ANALYZE, as autovacuum would after inserts this size: the claim's plan sees real
 * statistics, the index-only scans a visibility map. INDEX_CLEANUP ON: with few dead rows VACUUM
 * leaves their index entries (PostgreSQL 14+), and the rows of the run before would be counted. */
static void settle(void) {
        ts_pg_exec(admin, "VACUUM (ANALYZE, INDEX_CLEANUP ON) outbox");
}

struct claim_run {
        double ms; /* median over RUNS claims */
        int64_t tuples_read; /* index entries and heap tuples read by one claim */
};

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;

        return x < y ? -1 : x > y;
}

/* The rows the claim returned for `topic` (NULL: all), as "id key" lines, in the order returned. */
static char *rows_of(const struct pg_batch *b, const char *topic) {
        size_t cap = 64 + b->n * 64, len = 0;
        char *s = malloc(cap);

        assert_non_null(s);
        s[0] = 0;
        for (size_t i = 0; i < b->n; i++) {
                if (topic && strcmp(b->rows[i].topic, topic) != 0)
                        continue;
                len += (size_t)snprintf(s + len, cap - len, "%lld %.*s\n", (long long)b->rows[i].id,
                                        b->rows[i].key ? (int)b->rows[i].key_len : 4,
                                        b->rows[i].key ? b->rows[i].key : "NULL");
        }
        return s;
}

/* The same lines for the pending rows of `topic` that the claim should return, by SQL. */
static char *expected_rows(const char *topic, const char *where) {
        char sql[512];
        PGresult *res;
        char *s;
        size_t cap, len = 0;

        snprintf(sql, sizeof(sql),
                 "SELECT id, coalesce(key, 'NULL') FROM outbox WHERE topic = '%s' AND published_at IS NULL"
                 " AND dead_at IS NULL AND (%s) ORDER BY id",
                 topic, where);
        res = PQexec(admin, sql);
        assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
        cap = 64 + (size_t)PQntuples(res) * 64;
        s = malloc(cap);
        assert_non_null(s);
        s[0] = 0;
        for (int i = 0; i < PQntuples(res); i++)
                len += (size_t)snprintf(s + len, cap - len, "%s %s\n", PQgetvalue(res, i, 0),
                                        PQgetvalue(res, i, 1));
        PQclear(res);
        return s;
}

static void assert_id_order(const struct pg_batch *b) {
        for (size_t i = 1; i < b->n; i++)
                assert_true(b->rows[i - 1].id < b->rows[i].id);
}

/* Before a claim whose work is counted: the backend's pending statistics are flushed (and
 * reset) when this statement ends, so what tuples_read_in_tx() finds is the claim's alone. */
static void stats_reset(PGconn *c) {
        PQclear(PQexec(c, "SELECT pg_stat_force_next_flush()"));
}

/* What one claim read (index entries and heap tuples returned by scans of the table and its
 * indexes), from the backend's own statistics: a count of work that does not depend on how busy
 * the machine is. */
static int64_t tuples_read_in_tx(PGconn *c) {
        PGresult *res = PQexec(c,
                               "SELECT pg_stat_get_xact_tuples_returned('outbox'::regclass)"
                               " + (SELECT sum(pg_stat_get_xact_tuples_returned(indexrelid))"
                               "      FROM pg_index WHERE indrelid = 'outbox'::regclass)");
        int64_t v;

        if (PQresultStatus(res) != PGRES_TUPLES_OK)
                fail_msg("reading the claim's statistics: %s", PQresultErrorMessage(res));
        v = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        PQclear(res);
        return v;
}

/* Claims RUNS times (rolled back each time). `check` sees the first batch. */
static struct claim_run measure(const struct pg_skip *skip, void (*check)(const struct pg_batch *)) {
        struct claim_run out = { 0 };
        double ms[RUNS];
        char err[512];

        for (int i = 0; i < RUNS; i++) {
                struct pg_batch b;
                usec_t t0;
                int r;

                if (i == 0)
                        stats_reset(pg.conn);
                t0 = now_usec();
                r = pg_claim(&pg, LIMIT, skip, NULL, &b, now_usec() + 60 * USEC_PER_SEC, err, sizeof(err));

                ms[i] = (double)(now_usec() - t0) / 1000.0;
                if (r < 0)
                        fail_msg("pg_claim: %s", err);
                assert_true(b.n > 0); /* else it committed, and the statistics are gone */
                if (i == 0) {
                        out.tuples_read = tuples_read_in_tx(pg.conn);
                        if (check)
                                check(&b);
                }
                pg_batch_clear(&b);
                pg_rollback(&pg, now_usec() + 10 * USEC_PER_SEC);
        }
        qsort(ms, RUNS, sizeof(ms[0]), cmp_double);
        out.ms = ms[RUNS / 2];
        return out;
}

static void assert_flat(const char *what, struct claim_run small, struct claim_run big) {
        fprintf(stderr,
                "  %s: %d paused rows: %.2f ms, %lld tuples read; %d paused rows: %.2f ms, %lld tuples "
                "read\n",
                what, SMALL, small.ms, (long long)small.tuples_read, BIG, big.ms, (long long)big.tuples_read);
        /* The work is the robust measure (the claim before this one read all BIG rows: 200,030);
         * 5000 allows for dead index entries a VACUUM may have left. The time ratio, with a floor
         * for timer noise, is the one that matters (the old claim: 15-75 times as long). */
        assert_true(big.tuples_read < MAX_RATIO * small.tuples_read + 5000);
        assert_true(big.tuples_read < BIG / 10);
        assert_true(big.ms < MAX_RATIO * (small.ms > 2.0 ? small.ms : 2.0));
}

/* (a), (b): a paused topic's backlog at the head of the index is neither returned nor read. */
static char *t_paused, *t_flow;

static void check_paused_topic(const struct pg_batch *b) {
        _cleanup_free_ char *got = rows_of(b, t_flow), *want = expected_rows(t_flow, "true");

        assert_string_equal(got, want);
        assert_id_order(b);
        for (size_t i = 0; i < b->n; i++)
                assert_string_not_equal(b->rows[i].topic, t_paused);
}

static struct claim_run paused_topic_run(int backlog) {
        const char *topics[] = { t_paused };
        struct pg_skip skip = { .topics = topics, .n_topics = 1 };

        ts_pg_exec(admin, "DELETE FROM outbox WHERE topic IN ('%s', '%s')", t_paused, t_flow);
        ts_pg_exec(admin,
                   "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'p' || (g %% 100), 'x'"
                   " FROM generate_series(1, %d) g",
                   t_paused, backlog);
        ts_pg_exec(admin,
                   "INSERT INTO outbox (topic, key, payload, headers) SELECT '%s', 'k' || (g %% 5), 'y',"
                   " '{\"h\": \"v\"}' FROM generate_series(1, 30) g",
                   t_flow);
        settle();
        return measure(&skip, check_paused_topic);
}

static void paused_topic_backlog_not_read(void **state) {
        struct claim_run small, big;

        (void)state;
        t_paused = ts_topic("tc-paused");
        t_flow = ts_topic("tc-flow");
        small = paused_topic_run(SMALL);
        big = paused_topic_run(BIG);
        assert_flat("paused topic", small, big);
        ts_pg_exec(admin, "DELETE FROM outbox WHERE topic IN ('%s', '%s')", t_paused, t_flow);
        free(t_paused);
        free(t_flow);
}

/* (c): a paused (topic, key) with a large backlog in a topic whose other keys flow. Its rows
 * come first and keep coming among the others; the same key in another topic is not paused. */
static char *t_keys, *t_other;

static void check_paused_key(const struct pg_batch *b) {
        _cleanup_free_ char *got = rows_of(b, t_keys),
                            *want = expected_rows(t_keys, "key IS DISTINCT FROM 'hot'");
        _cleanup_free_ char *got_other = rows_of(b, t_other), *want_other = expected_rows(t_other, "true");

        assert_string_equal(got, want);
        assert_string_equal(got_other, want_other);
        assert_id_order(b);
}

static struct claim_run paused_key_run(int backlog) {
        const char *key_topics[] = { t_keys }, *keys[] = { "hot" };
        struct pg_skip skip = { .key_topics = key_topics, .keys = keys, .n_keys = 1 };

        ts_pg_exec(admin, "DELETE FROM outbox WHERE topic IN ('%s', '%s')", t_keys, t_other);
        ts_pg_exec(admin,
                   "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'hot', 'x'"
                   " FROM generate_series(1, %d) g",
                   t_keys, backlog);
        /* then the flowing keys, a NULL key, more of the paused key, and 'hot' in another topic */
        ts_pg_exec(admin,
                   "INSERT INTO outbox (topic, key, payload) SELECT '%s', CASE WHEN g %% 3 = 0 THEN 'hot'"
                   " WHEN g %% 7 = 0 THEN NULL ELSE 'k' || (g %% 5) END, 'y' FROM generate_series(1, 45) g",
                   t_keys);
        ts_pg_exec(admin,
                   "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'hot', 'z'"
                   " FROM generate_series(1, 5) g",
                   t_other);
        settle();
        return measure(&skip, check_paused_key);
}

static void paused_key_backlog_not_read(void **state) {
        struct claim_run small, big;

        (void)state;
        t_keys = ts_topic("tc-keys");
        t_other = ts_topic("tc-other");
        small = paused_key_run(SMALL);
        big = paused_key_run(BIG);
        assert_flat("paused (topic, key)", small, big);
        ts_pg_exec(admin, "DELETE FROM outbox WHERE topic IN ('%s', '%s')", t_keys, t_other);
        free(t_keys);
        free(t_other);
}

/* (d): rows another transaction holds FOR UPDATE are skipped, not waited for, by both forms; the
 * rows returned are still, per (topic, key), the first of that key's unlocked pending rows. */
static void skip_locked_still_skips(void **state) {
        _cleanup_free_ char *t = ts_topic("tc-locked"), *p = ts_topic("tc-locked-paused");
        const char *topics[] = { p }, *key_topics[] = { t }, *keys[] = { "k9" };
        const struct pg_skip paused_topic = { .topics = topics, .n_topics = 1 };
        const struct pg_skip paused_key = { .key_topics = key_topics, .keys = keys, .n_keys = 1 };
        const struct pg_skip *forms[] = { NULL, &paused_topic, &paused_key };
        PGconn *other = ts_pg_connect();
        int64_t first;
        char err[512];

        (void)state;
        ts_pg_exec(admin,
                   "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'k' || (g %% 2), 'x'"
                   " FROM generate_series(1, 10) g",
                   t);
        ts_pg_exec(admin, "INSERT INTO outbox (topic, key, payload) VALUES ('%s', 'k0', 'p')", p);
        first = ts_pg_int(admin, "SELECT min(id) FROM outbox WHERE topic = '%s'", t);
        /* The other relay holds the first two rows of k1 and the first of k0. */
        ts_pg_exec(other, "BEGIN");
        ts_pg_exec(other, "SELECT id FROM outbox WHERE id IN (%lld, %lld, %lld) FOR UPDATE", (long long)first,
                   (long long)first + 1, (long long)first + 2);
        for (size_t f = 0; f < 3; f++) {
                struct pg_batch b;
                usec_t t0 = now_usec();
                _cleanup_free_ char *got = NULL, *want = NULL;
                char where[128];

                if (pg_claim(&pg, LIMIT, forms[f], NULL, &b, now_usec() + 5 * USEC_PER_SEC, err,
                             sizeof(err)) < 0)
                        fail_msg("pg_claim (form %zu): %s", f, err);
                assert_true(now_usec() - t0 < 3 * USEC_PER_SEC); /* skipped, not waited for */
                snprintf(where, sizeof(where), "id > %lld", (long long)first + 2);
                got = rows_of(&b, t);
                want = expected_rows(t, where);
                assert_string_equal(got, want);
                assert_id_order(&b);
                pg_batch_clear(&b);
                pg_rollback(&pg, now_usec() + 5 * USEC_PER_SEC);
        }
        ts_pg_exec(other, "ROLLBACK");
        PQfinish(other);
        ts_pg_exec(admin, "DELETE FROM outbox WHERE topic IN ('%s', '%s')", t, p);
}

/* A claim made on another thread, so the test can see it wait. */
struct claim_job {
        struct pg *pg;
        const struct pg_order *order;
        struct pg_batch got;
        int ret;
        char err[512];
        atomic_bool done;
};

static void *claim_thread(void *arg) {
        struct claim_job *j = arg;

        j->ret = pg_claim(j->pg, LIMIT, NULL, j->order, &j->got, now_usec() + 20 * USEC_PER_SEC, j->err,
                          sizeof(j->err));
        atomic_store(&j->done, true);
        return NULL;
}

/* The key of row i of a batch ("k0" .. "k6"), as a number. */
static int key_of(const struct pg_batch *b, size_t i) {
        return atoi(b->rows[i].key + 1);
}

/* Two connections of relays with ordering = "key", as two relays on the table. */
static void connect_two(struct relay_config *kcfg, struct pg *a, struct pg *b) {
        char err[512];

        assert_int_equal(config_defaults(kcfg), 0);
        free(kcfg->postgres.conninfo);
        kcfg->postgres.conninfo = strdup(ts_conninfo());
        assert_non_null(kcfg->postgres.conninfo);
        kcfg->relay.ordering = ORDERING_KEY;
        assert_int_equal(pg_init(a, kcfg), 0);
        assert_int_equal(pg_init(b, kcfg), 0);
        if (pg_connect(a, now_usec() + 10 * USEC_PER_SEC, err, sizeof(err)) < 0 ||
            pg_connect(b, now_usec() + 10 * USEC_PER_SEC, err, sizeof(err)) < 0)
                fail_msg("pg_connect: %s", err);
}

/* ordering = "key": a relay alone takes no bucket and no row lock but its rows'; a relay that
 * shares takes buckets. Whatever their views of the members (a stale view: one thinks it is
 * alone, the other that it shares), a claim never returns a row of a key while an earlier row of
 * that key is in another open batch: it waits for that batch (no claim skips such a row), and
 * then starts at the key's first row still pending, whether the batch finished its rows or
 * rolled back. With a bound on lock waits (a relay with other batches in flight) it gives up
 * instead. Two sharing claims take different buckets and do not wait at all. */
static void alone_and_shared_keep_order(void **state) {
        _cleanup_free_ char *t = ts_topic("tc-alone");
        struct relay_config kcfg;
        struct pg a, b;
        /* A sharing claim takes a share of the buckets, from the first round: here the bucket of
         * k0 alone; the second tries every bucket from that one round, and is refused k0's
         * (their first buckets are set below). */
        const struct pg_order alone = { .depth = LIMIT, .alone = true };
        struct pg_order shared = { .depth = 3 * LIMIT, .buckets = 1 }, shared2 = { .depth = 3 * LIMIT };
        unsigned bucket_of[7];
        const struct {
                const struct pg_order *first, *second;
                bool waits, commit;
        } cases[] = { { &alone, &shared, true, true },
                      { &shared, &alone, true, false },
                      { &alone, &alone, true, false },
                      { &alone, &alone, true, true },
                      { &shared, &shared2, false, true } };
        char err[512];

        (void)state;
        connect_two(&kcfg, &a, &b);
        for (int k = 0; k < 7; k++)
                bucket_of[k] = (unsigned)ts_pg_int(
                        admin, "SELECT (hashtextextended('%s' || E'\\x1f' || 'k%d', 0) & 255)::int4", t, k);
        shared.first = shared2.first = bucket_of[0];
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct pg_batch held;
                struct claim_job job = { .pg = &b, .order = cases[i].second };
                int64_t held_last[7], first_pending[7];
                pthread_t th;

                print_message("# case %zu: %s, then %s; the first %s\n", i,
                              cases[i].first->alone ? "alone" : "shared",
                              cases[i].second->alone ? "alone" : "shared",
                              cases[i].commit ? "commits" : "rolls back");
                ts_pg_exec(admin, "DELETE FROM outbox WHERE topic = '%s'", t);
                ts_pg_exec(admin,
                           "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'k' || (g %% 7), 'x'"
                           " FROM generate_series(1, 400) g",
                           t);
                if (pg_claim(&a, LIMIT, NULL, cases[i].first, &held, now_usec() + 5 * USEC_PER_SEC, err,
                             sizeof(err)) < 0)
                        fail_msg("pg_claim (case %zu, first): %s", i, err);
                assert_true(held.n > 0);
                assert_id_order(&held);
                if (cases[i].first == &shared)
                        for (size_t r = 0; r < held.n; r++)
                                assert_int_equal(bucket_of[key_of(&held, r)], shared.first); /* its share */
                for (int k = 0; k < 7; k++)
                        held_last[k] = 0;
                for (size_t r = 0; r < held.n; r++)
                        held_last[key_of(&held, r)] = held.rows[r].id;
                if (cases[i].waits) {
                        /* With a bound on lock waits it gives up instead: -EAGAIN, nothing held. */
                        struct pg_order bounded = *cases[i].second;
                        struct pg_batch none;
                        usec_t t0 = now_usec();

                        bounded.lock_wait = 100 * USEC_PER_MSEC;
                        assert_int_equal(pg_claim(&b, LIMIT, NULL, &bounded, &none,
                                                  now_usec() + 5 * USEC_PER_SEC, err, sizeof(err)),
                                         -EAGAIN);
                        assert_true(now_usec() - t0 < 2 * USEC_PER_SEC);
                        assert_non_null(strstr(err, "lock timeout"));
                        assert_false(b.in_tx);
                        assert_true(pg_connected(&b));
                }
                atomic_init(&job.done, false);
                assert_int_equal(pthread_create(&th, NULL, claim_thread, &job), 0);
                usleep(300 * 1000);
                assert_int_equal(atomic_load(&job.done), !cases[i].waits);
                if (cases[i].commit) {
                        pg_tid *ids = calloc(held.n, sizeof(*ids));

                        assert_non_null(ids);
                        for (size_t r = 0; r < held.n; r++)
                                ids[r] = held.rows[r].tid;
                        if (pg_finish(&a, ids, held.n, NULL, 0, now_usec() + 5 * USEC_PER_SEC, err,
                                      sizeof(err)) < 0)
                                fail_msg("pg_finish (case %zu): %s", i, err);
                        free(ids);
                } else {
                        pg_rollback(&a, now_usec() + 5 * USEC_PER_SEC);
                }
                pthread_join(th, NULL);
                if (job.ret < 0)
                        fail_msg("pg_claim (case %zu, second): %s", i, job.err);
                assert_true(job.got.n > 0);
                assert_id_order(&job.got);
                /* Each key's first row in the second batch is that key's first row still pending. */
                for (int k = 0; k < 7; k++)
                        first_pending[k] =
                                ts_pg_int(admin,
                                          "SELECT coalesce(min(id), 0) FROM outbox WHERE topic = '%s'"
                                          " AND key = 'k%d'",
                                          t, k);
                for (size_t r = 0; r < job.got.n; r++) {
                        int k = key_of(&job.got, r);

                        if (r > 0 && key_of(&job.got, r - 1) == k)
                                continue;
                        for (size_t q = 0; q < r; q++)
                                if (key_of(&job.got, q) == k)
                                        goto seen;
                        assert_int_equal(job.got.rows[r].id, first_pending[k]);
                        if (!cases[i].waits)
                                assert_int_equal(held_last[k], 0); /* no key of the first batch */
                seen:;
                }
                pg_batch_clear(&job.got);
                pg_rollback(&b, now_usec() + 5 * USEC_PER_SEC);
                pg_batch_clear(&held);
                pg_rollback(&a, now_usec() + 5 * USEC_PER_SEC);
        }
        pg_done(&a);
        pg_done(&b);
        config_free(&kcfg);
        ts_pg_exec(admin, "DELETE FROM outbox WHERE topic = '%s'", t);
}

/* Advisory locks of the bucket class that a backend holds. */
static int64_t bucket_locks(const struct pg *p) {
        return ts_pg_int(admin,
                         "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = %d"
                         " AND classid = ((%d)::int8 & 4294967295)::oid AND objsubid = 2",
                         PQbackendPID(p->conn), (int)p->bucket_class);
}

/* ordering = "key", sharing: when the pending rows in view fit in one batch (a trickle, a nearly
 * drained table), a claim takes every row in view, so one claim sends them all, but it locks
 * only the buckets those rows are in: the others stay free for the other relays, and a relay
 * frozen in its batch holds up no key it had no row of. A second claim meanwhile gets nothing,
 * at once, and holds nothing; a row written after the first claim, of a key in a bucket the
 * first did not take, goes to the second, and that claim's lowest pending id is the first
 * row the other holds, not a finished row before it. */
static void a_trickle_locks_only_its_buckets(void **state) {
        _cleanup_free_ char *t = ts_topic("tc-trickle");
        struct relay_config kcfg;
        struct pg a, b;
        const struct pg_order shared = { .depth = 3 * LIMIT, .buckets = 1 }, all = { .depth = 3 * LIMIT };
        struct pg_batch held, none, later;
        int64_t buckets;
        int fresh = -1;
        char err[512];

        (void)state;
        connect_two(&kcfg, &a, &b);
        /* Five finished rows first: below the floor's next step, not pending. */
        ts_pg_exec(admin,
                   "INSERT INTO outbox (topic, key, payload, published_at) SELECT '%s', 'k' || g, 'x', now()"
                   " FROM generate_series(1, 5) g",
                   t);
        ts_pg_exec(admin,
                   "INSERT INTO outbox (topic, key, payload) SELECT '%s', 'k' || (g %% 7), 'x'"
                   " FROM generate_series(1, 35) g",
                   t);
        buckets = ts_pg_int(admin,
                            "SELECT count(DISTINCT hashtextextended(topic || E'\\x1f' || key, 0) & 255)"
                            " FROM outbox WHERE topic = '%s' AND published_at IS NULL",
                            t);
        if (pg_claim(&a, LIMIT, NULL, &shared, &held, now_usec() + 5 * USEC_PER_SEC, err, sizeof(err)) < 0)
                fail_msg("pg_claim: %s", err);
        assert_int_equal(held.n, 35); /* every row in view, though its share was one bucket */
        assert_id_order(&held);
        print_message("# %lld buckets hold the 35 rows; the claim holds %lld bucket locks\n",
                      (long long)buckets, (long long)bucket_locks(&a));
        assert_int_equal(bucket_locks(&a), buckets);
        {
                usec_t t0 = now_usec();

                if (pg_claim(&b, LIMIT, NULL, &all, &none, now_usec() + 5 * USEC_PER_SEC, err, sizeof(err)) <
                    0)
                        fail_msg("pg_claim (second): %s", err);
                assert_int_equal(none.n, 0);
                assert_true(now_usec() - t0 < 2 * USEC_PER_SEC);
                assert_false(b.in_tx);
                assert_int_equal(bucket_locks(&b), 0);
        }
        /* A key whose bucket the first claim does not hold. */
        for (int k = 7; k < 1000 && fresh < 0; k++)
                if (ts_pg_int(admin,
                              "SELECT count(*) FROM outbox WHERE topic = '%s' AND (hashtextextended(topic"
                              " || E'\\x1f' || key, 0) & 255) = (hashtextextended('%s' || E'\\x1f' || 'k%d', "
                              "0) & 255)",
                              t, t, k) == 0)
                        fresh = k;
        assert_true(fresh >= 0);
        ts_pg_exec(admin, "INSERT INTO outbox (topic, key, payload) VALUES ('%s', 'k%d', 'y')", t, fresh);
        if (pg_claim(&b, LIMIT, NULL, &all, &later, now_usec() + 5 * USEC_PER_SEC, err, sizeof(err)) < 0)
                fail_msg("pg_claim (later): %s", err);
        assert_int_equal(later.n, 1);
        assert_int_equal(key_of(&later, 0), fresh);
        /* The lowest pending id it saw (floor_claimed) is the table's: the finished rows do not
         * count, the rows the other claim holds do (they are still pending). */
        assert_true(later.first_pending <= held.rows[0].id);
        assert_int_equal(later.first_pending,
                         ts_pg_int(admin,
                                   "SELECT min(id) FROM outbox"
                                   " WHERE published_at IS NULL AND dead_at IS NULL"));
        assert_int_equal(bucket_locks(&b), 1);
        pg_batch_clear(&later);
        pg_rollback(&b, now_usec() + 5 * USEC_PER_SEC);
        pg_batch_clear(&held);
        pg_rollback(&a, now_usec() + 5 * USEC_PER_SEC);
        assert_int_equal(bucket_locks(&a), 0);
        pg_done(&a);
        pg_done(&b);
        config_free(&kcfg);
        ts_pg_exec(admin, "DELETE FROM outbox WHERE topic = '%s'", t);
}

/* ordering = "key", sharing: a claim whose buckets hold few of the rows in view reads at most
 * `depth` pending rows, whatever the backlog behind them. It counts the first batch + 1 pending
 * rows (enough to tell a trickle from a backlog, share_next_wait) and walks no further than
 * depth - batch - 1 ids past the last of them: ids are unique, so that is at most `depth` rows.
 * A row of its share at the depth-th place is in view, one at the next place is not. */
static void a_share_reads_at_most_its_depth(void **state) {
        _cleanup_free_ char *t = ts_topic("tc-depth");
        struct relay_config kcfg;
        struct pg a, b;
        struct pg_order share = { .depth = 3 * LIMIT, .buckets = SHARE_BUCKETS / 2 };
        int64_t hot, mine = -1;

        (void)state;
        connect_two(&kcfg, &a, &b);
        hot = ts_pg_int(admin, "SELECT hashtextextended('%s' || E'\\x1f' || 'hot', 0) & 255", t);
        /* A key in the share, which starts right after the hot key's bucket. */
        for (int k = 0; k < 1000 && mine < 0; k++)
                if (((ts_pg_int(admin, "SELECT hashtextextended('%s' || E'\\x1f' || 'm%d', 0) & 255", t, k) -
                      hot - 1) &
                     255) < SHARE_BUCKETS / 2)
                        mine = k;
        assert_true(mine >= 0);
        share.first = (unsigned)((hot + 1) & 255);
        for (int second = share.depth; second <= share.depth + 1; second++) {
                struct pg_batch got;
                int64_t read;
                char err[512];

                /* The key's first row first, its second at place `second`, 20,000 of the hot key
                 * around it: one statement, so the ids follow each other. */
                ts_pg_exec(admin,
                           "INSERT INTO outbox (topic, key, payload) SELECT '%s',"
                           " CASE WHEN g IN (1, %d) THEN 'm%lld' ELSE 'hot' END, 'x'"
                           " FROM generate_series(1, 20000) g ORDER BY g",
                           t, second, (long long)mine);
                settle();
                share.start = ts_pg_int(admin, "SELECT min(id) FROM outbox WHERE topic = '%s'", t);
                stats_reset(a.conn);
                if (pg_claim(&a, LIMIT, NULL, &share, &got, now_usec() + 10 * USEC_PER_SEC, err,
                             sizeof(err)) < 0)
                        fail_msg("pg_claim: %s", err);
                read = tuples_read_in_tx(a.conn);
                print_message("# a share of the buckets, %d rows deep, its key's second row at place %d of "
                              "20,000: %zu row(s), %zu in view, %lld index entries and rows read\n",
                              share.depth, second, got.n, got.in_view, (long long)read);
                assert_int_equal(got.n, second == share.depth ? 2 : 1);
                assert_int_equal(got.in_view, LIMIT + 1);
                /* the lowest pending id it saw, which may raise the floor (floor_claimed) */
                assert_int_equal(got.first_pending, share.start);
                /* the head's batch + 1 entries and the walk's `depth` (20,000 without a bound) */
                assert_true(read <= share.depth + LIMIT + 1 + 10);
                pg_batch_clear(&got);
                pg_rollback(&a, now_usec() + 5 * USEC_PER_SEC);
                ts_pg_exec(admin, "DELETE FROM outbox WHERE topic = '%s'", t);
        }
        pg_done(&a);
        pg_done(&b);
        config_free(&kcfg);
}

/* Defect: a row whose created_at was infinity failed every claim that reached it ("cannot
 * convert infinity to bigint"), so nothing after it was published, and one at the head of the
 * pending rows failed the lag ("cannot subtract infinite timestamps"). Such a row now arrives
 * without a time (the relay dead-letters it: cycle.c, test_relay), and the lag counts it as 0. */
static void an_infinite_created_at(void **state) {
        _cleanup_free_ char *t = ts_topic("tc-inf");
        struct pg_batch b;
        char err[512];
        usec_t lag = 1;
        int64_t pending = 0;

        (void)state;
        ts_pg_exec(
                admin,
                "INSERT INTO outbox (topic, key, payload, created_at) VALUES ('%s', 'k', 'a', '-infinity'),"
                " ('%s', 'k', 'b', 'infinity'), ('%s', 'k', 'c', '2026-01-02 03:04:05.678+00')",
                t, t, t);
        /* from this test's rows on, whatever another test left */
        pg.claim_floor = ts_pg_int(admin, "SELECT min(id) FROM outbox WHERE topic = '%s'", t);
        for (int head = 0; head < 2; head++) {
                /* the oldest pending row: -infinity, then (that one gone) infinity */
                if (pg_lag(&pg, &lag, &pending, now_usec() + 5 * USEC_PER_SEC, err, sizeof(err)) < 0)
                        fail_msg("pg_lag: %s", err);
                assert_int_equal(lag, 0);
                assert_int_equal(pending, 3 - head);
                if (pg_claim(&pg, LIMIT, NULL, NULL, &b, now_usec() + 5 * USEC_PER_SEC, err, sizeof(err)) < 0)
                        fail_msg("pg_claim: %s", err);
                assert_int_equal(b.n, 3 - head);
                for (int i = 0; i < 2 - head; i++) {
                        assert_false(b.rows[i].timestamp_known);
                        assert_int_equal(b.rows[i].timestamp_ms, 0);
                }
                assert_true(b.rows[2 - head].timestamp_known);
                assert_int_equal(b.rows[2 - head].timestamp_ms, 1767323045678LL);
                pg_batch_clear(&b);
                pg_rollback(&pg, now_usec() + 5 * USEC_PER_SEC);
                ts_pg_exec(admin, "DELETE FROM outbox WHERE topic = '%s' AND payload = 'a'", t);
        }
        pg.claim_floor = 0;
        ts_pg_exec(admin, "DELETE FROM outbox WHERE topic = '%s'", t);
}

/* Defect: some error returns left err unwritten, and the caller logged an uninitialised buffer. */
static void assert_err(const char *err, const char *what) {
        fprintf(stderr, "  err: '%s'\n", err);
        assert_true(strncmp(err, what, strlen(what)) == 0);
        assert_true(strlen(err) > strlen(what) + 2);
        for (const char *c = err; *c; c++)
                assert_true(*c >= ' ' && *c != 0x7f);
}

/* Fills err with something no error path writes (still a string, so a check can print it). */
static void scribble(char *err, size_t errsz) {
        memset(err, 0x7f, errsz - 1);
        err[errsz - 1] = 0;
}

static void errors_are_explained(void **state) {
        _cleanup_free_ char *t = ts_topic("tc-err");
        const char *topics[] = { "some-paused-topic" };
        const struct pg_skip skip = { .topics = topics, .n_topics = 1 };
        struct pg_batch b;
        char err[512];
        bool leader;
        usec_t lag;
        int64_t pending;
        int pid;

        (void)state;
        ts_pg_exec(admin, "INSERT INTO outbox (topic, key, payload) VALUES ('%s', 'k', 'x')", t);
        /* the connection is killed under the relay */
        pid = PQbackendPID(pg.conn);
        ts_pg_exec(admin, "SELECT pg_terminate_backend(%d)", pid);
        for (int i = 0;
             i < 50 && ts_pg_int(admin, "SELECT count(*) FROM pg_stat_activity WHERE pid = %d", pid); i++)
                usleep(20 * 1000);
        scribble(err, sizeof(err));
        assert_int_equal(
                pg_claim(&pg, LIMIT, &skip, NULL, &b, now_usec() + 5 * USEC_PER_SEC, err, sizeof(err)),
                -ECONNRESET);
        assert_err(err, "claim");
        /* and every call after it, without a connection */
        scribble(err, sizeof(err));
        assert_int_equal(pg_claim(&pg, LIMIT, NULL, NULL, &b, now_usec() + USEC_PER_SEC, err, sizeof(err)),
                         -ECONNRESET);
        assert_err(err, "claim");
        scribble(err, sizeof(err));
        assert_true(pg_finish(&pg, NULL, 0, NULL, 0, now_usec() + USEC_PER_SEC, err, sizeof(err)) < 0);
        assert_err(err, "finish");
        scribble(err, sizeof(err));
        assert_true(pg_lag(&pg, &lag, &pending, now_usec() + USEC_PER_SEC, err, sizeof(err)) < 0);
        assert_err(err, "lag");
        scribble(err, sizeof(err));
        assert_true(pg_retention(&pg, 10, now_usec() + USEC_PER_SEC, err, sizeof(err)) < 0);
        assert_err(err, "retention");
        scribble(err, sizeof(err));
        assert_true(pg_try_leader(&pg, &leader, now_usec() + USEC_PER_SEC, err, sizeof(err)) < 0);
        assert_err(err, "leader lock");
        /* connected, but no batch to finish */
        assert_int_equal(connect_pg(NULL), 0);
        scribble(err, sizeof(err));
        assert_true(pg_finish(&pg, NULL, 0, NULL, 0, now_usec() + USEC_PER_SEC, err, sizeof(err)) < 0);
        assert_err(err, "finish");
        /* a statement that fails: the server's reason */
        {
                struct relay_config bad = cfg;
                struct pg pg_bad;

                /* The table is checked when connecting (schema_check), so a missing table is
                 * said there, naming the migration that creates it, and nothing is left
                 * connected. */
                bad.postgres.table = (char *)"no_such_outbox";
                assert_int_equal(pg_init(&pg_bad, &bad), 0);
                scribble(err, sizeof(err));
                assert_int_equal(pg_connect(&pg_bad, now_usec() + 10 * USEC_PER_SEC, err, sizeof(err)),
                                 -ENOPKG);
                fprintf(stderr, "  err: '%s'\n", err);
                assert_non_null(strstr(err, "no_such_outbox"));
                assert_non_null(strstr(err, "sql/001_outbox.sql"));
                assert_false(pg_connected(&pg_bad));
                scribble(err, sizeof(err));
                assert_int_equal(pg_claim(&pg_bad, LIMIT, NULL, NULL, &b, now_usec() + 5 * USEC_PER_SEC, err,
                                          sizeof(err)),
                                 -ECONNRESET);
                assert_err(err, "claim");
                pg_done(&pg_bad);
        }
        ts_pg_exec(admin, "DELETE FROM outbox WHERE topic = '%s'", t);
}

/* A re-prepare (after a stale plan) that fails part way, here behind a migration's lock: the next
 * claim prepares again instead of running statements DEALLOCATE ALL removed, and nothing reads as
 * a pooler's shared session (26000). */
static void a_failed_reprepare_is_tried_again(void **state) {
        _cleanup_free_ char *t = ts_topic("tc-reprep");
        struct pg_batch b;
        char err[512];
        PGresult *res;
        int r;

        (void)state;
        ts_pg_exec(admin, "INSERT INTO outbox (topic, key, payload) VALUES ('%s', 'k', 'x')", t);
        res = PQexec(pg.conn, "SET lock_timeout = '200ms'");
        assert_int_equal(PQresultStatus(res), PGRES_COMMAND_OK);
        PQclear(res);
        pg.reprepare = true;
        ts_pg_exec(admin, "BEGIN; LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE");
        scribble(err, sizeof(err));
        r = pg_claim(&pg, LIMIT, NULL, NULL, &b, now_usec() + 5 * USEC_PER_SEC, err, sizeof(err));
        ts_pg_exec(admin, "ROLLBACK");
        fprintf(stderr, "  behind the lock: %d, '%s'\n", r, err);
        assert_int_equal(r, -EIO);
        assert_non_null(strstr(err, "lock timeout"));
        assert_true(pg_connected(&pg));
        assert_true(pg.reprepare);
        assert_false(pg.session_shared);
        /* the lock is gone: the claim prepares everything again and takes the row */
        r = pg_claim(&pg, LIMIT, NULL, NULL, &b, now_usec() + 5 * USEC_PER_SEC, err, sizeof(err));
        if (r < 0)
                fail_msg("the claim after the failed re-prepare: %d, %s", r, err);
        assert_false(pg.reprepare);
        assert_false(pg.session_shared);
        {
                _cleanup_free_ char *got = rows_of(&b, t);

                assert_non_null(strstr(got, " k\n"));
        }
        pg_batch_clear(&b);
        pg_rollback(&pg, now_usec() + 5 * USEC_PER_SEC);
        res = PQexec(pg.conn, "RESET lock_timeout");
        PQclear(res);
        ts_pg_exec(admin, "DELETE FROM outbox WHERE topic = '%s'", t);
}

/* sql/004 is applied by the test bed; applying it again changes nothing. */
static void migration_004_reapplies(void **state) {
        const char *src = ts_env("OUTBOX_RELAY_SRCDIR");
        char path[512];
        FILE *f;
        char *sql = NULL;
        size_t cap = 0;

        (void)state;
        snprintf(path, sizeof(path), "%s/sql/004_claim_skip.sql", src);
        f = fopen(path, "r");
        assert_non_null(f);
        assert_true(getdelim(&sql, &cap, 0, f) > 0);
        fclose(f);
        ts_pg_exec(admin, "SET client_min_messages = warning");
        ts_pg_exec(admin, "%s", sql);
        ts_pg_exec(admin, "%s", sql);
        free(sql);
        assert_int_equal(ts_pg_int(admin,
                                   "SELECT count(*) FROM pg_indexes WHERE tablename = 'outbox' AND"
                                   " indexname IN ('outbox_pending_topic_idx', 'outbox_pending_key_idx')"),
                         2);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup(migration_004_reapplies, connect_pg),
                cmocka_unit_test_setup(paused_topic_backlog_not_read, connect_pg),
                cmocka_unit_test_setup(paused_key_backlog_not_read, connect_pg),
                cmocka_unit_test_setup(skip_locked_still_skips, connect_pg),
                cmocka_unit_test_setup(an_infinite_created_at, connect_pg),
                cmocka_unit_test_setup(errors_are_explained, connect_pg),
                cmocka_unit_test_setup(a_failed_reprepare_is_tried_again, connect_pg),
                cmocka_unit_test_setup(alone_and_shared_keep_order, connect_pg),
                cmocka_unit_test_setup(a_trickle_locks_only_its_buckets, connect_pg),
                cmocka_unit_test_setup(a_share_reads_at_most_its_depth, connect_pg),
        };

        ts_env("PGPORT");
        return cmocka_run_group_tests(tests, setup, teardown);
}
