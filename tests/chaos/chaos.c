/* chaos.c -- Seeded chaos: writers that never stop, three relays in the default ordering mode, and faults picked at random, overlapping; then everything committed must be in Kafka, in key order. */
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "proxy.h"
#include "support.h"

/* What one run does, from two settings: CHAOS_SEED (default: a fixed seed, then one from the
 * clock) and CHAOS_SECONDS of faults under load (default 40). A failure prints the seed; the
 * same seed replays the same choices (the machine's timing still varies). */
#define FIXED_SEED 20261202
#define RELAYS 3
#define WRITERS 4
#define PER_SECOND 1200 /* rows a second, all writers together */
#define BAD_EVERY 397 /* one row in this many has headers that must be dead-lettered */

/* Short deadlines, as in test_sharing: a frozen relay's keys are taken over within seconds. */
#define RELAY_GROUP                                                                                          \
        "poll_interval = \"1s\"; batch_timeout = \"5s\"; drain_timeout = \"10s\"; status_interval = \"2s\";" \
        " batch_size = %d;"
#define KAFKA_EXTRA "message_timeout_ms = 2000; reconnect_backoff_max_ms = 500;"
#define GROUPS                                           \
        "retry = { base = \"100ms\"; cap = \"1s\"; };\n" \
        "breaker = { failure_threshold = 3; cooldown = \"2s\"; };\n"

/* ---- the seeded choices ---- */

static uint64_t rng;

static uint64_t next(void) {
        return ts_rand(&rng);
}

static int pick(int lo, int hi) {
        return lo + (int)(next() % (uint64_t)(hi - lo + 1));
}

static int64_t t0;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
        va_list ap;

        fprintf(stderr, "[%7.1f s] ", (double)(ts_now_ms() - t0) / 1000);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
}

/* ---- writers: plain INSERTs at a steady rate ---- */

/* Writer k owns its keys: its transactions are serial, so each key's commit order is its id
 * order. Writer 0: 50 hot keys; 1: 10,000 keys; 2: no key (no order); 3: 100 keys on the topic
 * that becomes unwritable. Payloads from 0 B to 900 kB, one row in 50 a tombstone, one in
 * BAD_EVERY with headers that are not an object (dead-lettered by design). */
struct writer {
        pthread_t thread;
        int id;
        const char *topic;
        int keys; /* 0: NULL keys */
        int per_second;
        volatile int stop;
        volatile int written;
        char error[256];
};

static void *write_rows(void *arg) {
        struct writer *w = arg;
        PGconn *c = PQconnectdb(ts_conninfo());
        int64_t start = ts_now_ms(), failing_since = 0;

        while (!w->stop) {
                char sql[1400], key[128];
                int n = 10, at = w->written;
                int64_t due = start + (int64_t)at * 1000 / w->per_second;
                PGresult *res;

                while (ts_now_ms() < due && !w->stop)
                        usleep(2000);
                if (w->keys)
                        snprintf(key, sizeof(key), "'w%d-' || ((%d + g) %% %d)", w->id, at, w->keys);
                else
                        snprintf(key, sizeof(key), "NULL");
                snprintf(sql, sizeof(sql),
                         "INSERT INTO outbox (topic, key, payload, headers)"
                         " SELECT '%s', %s,"
                         "  CASE WHEN (%d + g) %% 50 = 3 THEN NULL"
                         "       WHEN (%d + g) %% 9973 = 5 THEN convert_to(repeat('L', 900000), 'UTF8')"
                         "       WHEN (%d + g) %% 997 = 6 THEN convert_to(repeat('m', 65536), 'UTF8')"
                         "       WHEN (%d + g) %% 31 = 7 THEN ''::bytea"
                         "       ELSE convert_to('w%d row ' || (%d + g) || repeat('.', (%d + g) %% 200), "
                         "'UTF8') END,"
                         "  CASE WHEN (%d + g) %% %d = 11 THEN '[\"not\", \"an object\"]'::jsonb"
                         "       ELSE jsonb_build_object('writer', '%d', 'n', (%d + g)::text) END"
                         " FROM generate_series(0, %d) g",
                         w->topic, key, at, at, at, at, w->id, at, at, at, BAD_EVERY * (w->id + 1), w->id, at,
                         n - 1);
                res = PQexec(c, sql);
                if (PQresultStatus(res) != PGRES_COMMAND_OK) {
                        /* the database restarting under the writer: again, on a new connection */
                        PQclear(res);
                        if (!failing_since)
                                failing_since = ts_now_ms();
                        if (ts_now_ms() - failing_since > 120000) {
                                snprintf(w->error, sizeof(w->error), "inserts fail for 120 s: %s",
                                         PQerrorMessage(c));
                                break;
                        }
                        PQfinish(c);
                        usleep(200 * 1000);
                        c = PQconnectdb(ts_conninfo());
                        continue;
                }
                PQclear(res);
                failing_since = 0;
                w->written = at + n;
        }
        PQfinish(c);
        return NULL;
}

/* ---- relays, each behind its own cuttable database link ---- */

struct relay {
        struct ts_relay r;
        struct ts_proxy *link;
        char conninfo[256];
        int batch; /* relay.batch_size of its file */
        bool running, frozen, cut;
};

static struct relay relays[RELAYS];

static void relay_conf(char *buf, size_t size, int batch) {
        snprintf(buf, size, RELAY_GROUP, batch);
}

static void relay_start(struct relay *x) {
        char group[256];

        relay_conf(group, sizeof(group), x->batch);
        ts_relay_start_opts(&x->r,
                            &(struct ts_relay_opts){ .relay_group = group,
                                                     .kafka_extra = KAFKA_EXTRA,
                                                     .extra_groups = GROUPS,
                                                     .conninfo = x->conninfo });
        x->running = true;
}

/* Writes the relay's file again, valid (with another batch size) or broken. */
static void relay_rewrite(struct relay *x, bool broken) {
        FILE *f = fopen(x->r.conf, "w");
        char group[256];

        if (!f)
                fail_msg("cannot write %s", x->r.conf);
        relay_conf(group, sizeof(group), x->batch);
        fprintf(f,
                "postgres = { conninfo = \"%s\"; };\n"
                "kafka = { bootstrap_servers = \"%s\"; %s };\n"
                "relay = { %s };\n"
                "log = { level = \"info\"; };\n%s%s",
                x->conninfo, ts_env("KAFKA_BOOTSTRAP"), KAFKA_EXTRA, group, GROUPS, TS_HTTP_GROUP);
        if (broken)
                fputs("relay = { batch_size = ; };\n", f);
        fclose(f);
}

/* ---- faults ---- */

enum kind {
        F_KILL, /* kill -9, restart after 1-3 s */
        F_TERM, /* SIGTERM: a clean stop (exit 0, drained), restart */
        F_FREEZE, /* SIGSTOP for 3-12 s (past the takeover), SIGCONT */
        F_HUP, /* SIGHUP with a valid file (another batch size) */
        F_HUP_BAD, /* SIGHUP with a broken file: kept running as it was; the file restored */
        F_CUT, /* one relay's database link cut for 3-10 s */
        F_PG_RESTART, /* pg_ctl restart -m fast */
        F_KAFKA, /* the broker stopped for 10-20 s, started again with its data */
        F_UNWRITABLE, /* one topic refuses writes (min.insync.replicas above the replicas) for 5-15 s */
        F_KINDS,
};

static const char *const kind_names[F_KINDS] = { "kill-9",     "sigterm",       "sigstop",
                                                 "sighup",     "sighup-broken", "link-cut",
                                                 "pg-restart", "kafka-stop",    "unwritable-topic" };
static const int weights[F_KINDS] = { 3, 2, 2, 2, 1, 2, 1, 1, 1 };

struct active {
        enum kind kind;
        int relay; /* -1: the whole test bed */
        int64_t end;
};

static struct active act[8];
static size_t n_act;
static int counts[F_KINDS];
static int sigterm_stops, sigterm_clean;
static const char *flaky_topic;

static bool relay_busy(int i) {
        for (size_t k = 0; k < n_act; k++)
                if (act[k].relay == i)
                        return true;
        return false;
}

static bool kind_active(enum kind kind) {
        for (size_t k = 0; k < n_act; k++)
                if (act[k].kind == kind)
                        return true;
        return false;
}

static void finish_fault(const struct active *a) {
        struct relay *x = a->relay >= 0 ? &relays[a->relay] : NULL;

        switch (a->kind) {
        case F_KILL:
                relay_start(x);
                say("relay %d restarted", a->relay);
                break;
        case F_FREEZE:
                kill(x->r.pid, SIGCONT);
                x->frozen = false;
                say("relay %d resumed (SIGCONT)", a->relay);
                break;
        case F_CUT:
                ts_proxy_restore(x->link);
                x->cut = false;
                say("relay %d's database link restored", a->relay);
                break;
        case F_KAFKA:
                ts_testbed("kafka-start");
                say("Kafka started again");
                break;
        case F_UNWRITABLE:
                ts_alter_topic(flaky_topic, "min.insync.replicas", "1");
                say("topic %s writable again", flaky_topic);
                break;
        case F_HUP_BAD:
                relay_rewrite(x, false);
                say("relay %d's file restored", a->relay);
                break;
        default:
                break;
        }
}

/* Starts one fault if its kind fits what is already going on: one fault per relay; one fault of
 * Kafka's at a time (a broker stop or an unwritable topic: the topic cannot be altered while the
 * broker is down); a SIGTERM only while Kafka has no fault (so the stop's cleanliness is its
 * own: a broker that goes away takes acknowledgements with it). */
static void start_fault(void) {
        int total = 0, w, i = pick(0, RELAYS - 1);
        enum kind kind = F_KILL;
        struct relay *x = &relays[i];
        struct active a = { .relay = -1 };

        for (int k = 0; k < F_KINDS; k++)
                total += weights[k];
        w = pick(0, total - 1);
        for (int k = 0; k < F_KINDS; k++) {
                if (w < weights[k]) {
                        kind = (enum kind)k;
                        break;
                }
                w -= weights[k];
        }
        if (n_act >= sizeof(act) / sizeof(act[0]))
                return;
        if (kind <= F_CUT && relay_busy(i))
                return;
        if ((kind == F_TERM || kind == F_KAFKA || kind == F_UNWRITABLE) &&
            (kind_active(F_KAFKA) || kind_active(F_UNWRITABLE)))
                return;
        a.kind = kind;
        counts[kind]++;
        switch (kind) {
        case F_KILL:
                ts_relay_stop(&x->r, SIGKILL, 5000);
                a.relay = i;
                a.end = ts_now_ms() + pick(1000, 3000);
                say("kill -9 relay %d", i);
                break;
        case F_TERM: {
                int status;
                int64_t t = ts_now_ms();

                say("SIGTERM relay %d", i);
                status = ts_relay_stop(&x->r, SIGTERM, 30000);
                sigterm_stops++;
                if (status == 0 && ts_relay_log_count(&x->r, "drained: published") == 1 &&
                    ts_relay_log_count(&x->r, "rolled back") == 0)
                        sigterm_clean++;
                else
                        ts_relay_dump_log(&x->r);
                say("relay %d exited %d after %lld ms (%s); restarting", i, status,
                    (long long)(ts_now_ms() - t), status == 0 ? "drained" : "NOT CLEAN");
                relay_start(x);
                return;
        }
        case F_FREEZE:
                kill(x->r.pid, SIGSTOP);
                x->frozen = true;
                a.relay = i;
                a.end = ts_now_ms() + pick(3000, 12000);
                say("SIGSTOP relay %d for %.1f s", i, (double)(a.end - ts_now_ms()) / 1000);
                break;
        case F_HUP:
                x->batch = pick(1, 4) * 250;
                relay_rewrite(x, false);
                kill(x->r.pid, SIGHUP);
                say("SIGHUP relay %d with batch_size %d", i, x->batch);
                return;
        case F_HUP_BAD:
                relay_rewrite(x, true);
                kill(x->r.pid, SIGHUP);
                a.relay = i;
                a.end = ts_now_ms() + 2000;
                say("SIGHUP relay %d with a broken file", i);
                break;
        case F_CUT:
                ts_proxy_cut(x->link);
                x->cut = true;
                a.relay = i;
                a.end = ts_now_ms() + pick(3000, 10000);
                say("relay %d's database link cut for %.1f s", i, (double)(a.end - ts_now_ms()) / 1000);
                break;
        case F_PG_RESTART:
                say("pg_ctl restart -m fast");
                ts_testbed("pg-restart");
                say("PostgreSQL restarted");
                return;
        case F_KAFKA:
                ts_testbed("kafka-stop");
                a.end = ts_now_ms() + pick(10000, 20000);
                say("Kafka stopped for %.1f s", (double)(a.end - ts_now_ms()) / 1000);
                break;
        case F_UNWRITABLE:
                ts_alter_topic(flaky_topic, "min.insync.replicas", "2");
                a.end = ts_now_ms() + pick(5000, 15000);
                say("topic %s unwritable for %.1f s", flaky_topic, (double)(a.end - ts_now_ms()) / 1000);
                break;
        default:
                return;
        }
        act[n_act++] = a;
}

static void end_due_faults(bool all) {
        for (size_t k = 0; k < n_act;) {
                if (all || ts_now_ms() >= act[k].end) {
                        struct active a = act[k];

                        act[k] = act[--n_act];
                        finish_fault(&a);
                } else {
                        k++;
                }
        }
}

/* ---- the run ---- */

static void one_run(uint64_t seed, int seconds) {
        PGconn *c = ts_pg_connect();
        char *topics[3];
        const char *list[4];
        struct writer w[WRITERS];
        struct ts_msgs msgs;
        struct ts_verify v;
        int64_t first, dead, designed, pending, events = 0;
        char faults[400] = "";
        size_t at = 0;
        bool ok;

        rng = seed ? seed : 1;
        t0 = ts_now_ms();
        n_act = 0;
        memset(counts, 0, sizeof(counts));
        sigterm_stops = sigterm_clean = 0;
        fprintf(stderr, "chaos: seed %" PRIu64 ", %d s of faults (replay: CHAOS_SEED=%" PRIu64 ")\n", seed,
                seconds, seed);
        topics[0] = ts_topic("chaos-hot");
        topics[1] = ts_topic("chaos-wide");
        topics[2] = ts_topic("chaos-flaky");
        for (int i = 0; i < 3; i++) {
                ts_create_topic(topics[i], 3, NULL, NULL);
                list[i] = topics[i];
        }
        list[3] = NULL;
        flaky_topic = topics[2];
        ts_pg_install_copy(c);
        /* This run's rows: ids from the sequence's next one (copies of earlier rows with such ids,
         * left from before a sequence was set back, are not this run's). */
        first = ts_pg_int(c,
                          "SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('outbox', 'id')),"
                          " 0) + 1");
        ts_pg_exec(c, "DELETE FROM outbox_test_copy WHERE id >= %" PRId64, first);
        for (int i = 0; i < RELAYS; i++) {
                struct relay *x = &relays[i];

                memset(x, 0, sizeof(*x));
                x->batch = 500;
                x->link = ts_proxy_start(atoi(ts_env("PGPORT")));
                snprintf(x->conninfo, sizeof(x->conninfo), "host=127.0.0.1 port=%d dbname=%s user=%s",
                         ts_proxy_port(x->link), ts_env("PGDATABASE"), ts_env("PGUSER"));
                relay_start(x);
        }
        for (int i = 0; i < WRITERS; i++) {
                w[i] = (struct writer){ .id = i,
                                        .topic = i == 1  ? topics[1]
                                                : i == 3 ? topics[2]
                                                         : topics[0],
                                        .keys = i == 0   ? 50
                                                : i == 1 ? 10000
                                                : i == 2 ? 0
                                                         : 100,
                                        .per_second = PER_SECOND / WRITERS };
                if (pthread_create(&w[i].thread, NULL, write_rows, &w[i]) != 0)
                        fail_msg("cannot start a writer");
        }

        /* faults, one every 1-5 s, until the time is up */
        while (ts_now_ms() - t0 < (int64_t)seconds * 1000) {
                int64_t pause = pick(1000, 5000), until = ts_now_ms() + pause;

                while (ts_now_ms() < until) {
                        end_due_faults(false);
                        usleep(50000);
                }
                start_fault();
        }
        end_due_faults(true);
        for (int i = 0; i < WRITERS; i++)
                w[i].stop = 1;
        for (int i = 0; i < WRITERS; i++) {
                pthread_join(w[i].thread, NULL);
                if (w[i].error[0])
                        fail_msg("writer %d: %s", i, w[i].error);
                events += w[i].written;
        }
        say("faults over, %" PRId64 " rows written; draining", events);

        /* drain, stop cleanly, consume everything, verify (on a new connection: PostgreSQL may
         * have restarted under the old one) */
        PQfinish(c);
        c = ts_pg_connect();
        ok = ts_wait_drained(c, list, 180000);
        /* A relay restarted by the last fault may not have set up its signal handling yet, and a
         * SIGTERM then ends it by the signal, not by a drain: seed 20261202 once restarted relay 0
         * at the last instant, and its stop found an empty log. So each must say it is ready. */
        for (int i = 0; i < RELAYS; i++)
                if (!ts_relay_log_wait(&relays[i].r, "ready", 30000)) {
                        ts_relay_dump_log(&relays[i].r);
                        fail_msg("chaos seed %" PRIu64 ": relay %d was not ready after the faults", seed, i);
                }
        for (int i = 0; i < RELAYS; i++)
                if (ts_relay_stop(&relays[i].r, SIGTERM, 30000) != 0) {
                        ts_relay_dump_log(&relays[i].r);
                        fail_msg("chaos seed %" PRIu64 ": relay %d did not stop cleanly at the end", seed, i);
                }
        events = ts_pg_int(c, "SELECT count(*) FROM outbox_test_copy WHERE id >= %" PRId64, first);
        /* A run that checked nothing must not pass (ids of the copy table ahead of the outbox's,
         * after a sequence set back, once made every run count 0 events). */
        if (events <= 0)
                fail_msg("chaos seed %" PRIu64 ": no committed row seen since id %" PRId64, seed, first);
        dead = ts_pg_int(c, "SELECT count(*) FROM outbox WHERE id >= %" PRId64 " AND dead_at IS NOT NULL",
                         first);
        designed = ts_pg_int(c,
                             "SELECT count(*) FROM outbox_test_copy WHERE id >= %" PRId64
                             " AND jsonb_typeof(headers) = 'array'",
                             first);
        pending = ts_pg_int(c,
                            "SELECT count(*) FROM outbox WHERE id >= %" PRId64
                            " AND dead_at IS NULL AND published_at IS NULL",
                            first);
        ts_consume(list, (size_t)(events - dead), 180000, 3000, &msgs);
        ts_verify(c, list, &msgs, true, &v);
        for (int k = 0; k < F_KINDS; k++)
                at += (size_t)snprintf(faults + at, sizeof(faults) - at, "%s%s %d", k ? ", " : "",
                                       kind_names[k], counts[k]);
        fprintf(stderr,
                "chaos: seed %" PRIu64 ", events %" PRId64 ", faults: %s; lost %zu, order violations %zu,"
                " duplicates %zu (SIGTERM: %d, %d of %d stops clean), mismatched %zu, dead-lettered %" PRId64
                " (designed %" PRId64 "), pending %" PRId64 "\n",
                seed, events, faults, v.missing, v.order_violations, v.duplicates,
                sigterm_stops - sigterm_clean, sigterm_clean, sigterm_stops, v.mismatched, dead, designed,
                pending);
        if (!ok || v.missing || v.order_violations || v.mismatched || v.unexpected ||
            sigterm_clean != sigterm_stops || dead != designed || pending)
                fail_msg("chaos seed %" PRIu64 " failed: replay with CHAOS_SEED=%" PRIu64, seed, seed);
        ts_msgs_free(&msgs);
        for (int i = 0; i < RELAYS; i++) {
                ts_proxy_stop(relays[i].link);
                relays[i].link = NULL;
        }
        for (int i = 0; i < 3; i++)
                free(topics[i]);
        PQfinish(c);
}

static int seconds_setting(void) {
        const char *s = getenv("CHAOS_SECONDS");

        return s ? atoi(s) : 25;
}

static void fixed_seed(void **state) {
        const char *s = getenv("CHAOS_SEED");

        (void)state;
        one_run(s ? strtoull(s, NULL, 10) : FIXED_SEED, seconds_setting());
}

static void random_seed(void **state) {
        (void)state;
        one_run(((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid(), seconds_setting());
}

static int teardown(void **state) {
        /* a failed run leaves faults behind: undo them so the next run (and test) start clean */
        for (size_t k = 0; k < n_act; k++)
                if (act[k].kind == F_FREEZE && relays[act[k].relay].r.pid > 0)
                        kill(relays[act[k].relay].r.pid, SIGCONT);
        end_due_faults(true);
        ts_teardown(state);
        for (int i = 0; i < RELAYS; i++) {
                ts_proxy_stop(relays[i].link);
                relays[i].link = NULL;
        }
        return 0;
}

int main(void) {
        const struct CMUnitTest both[] = {
                cmocka_unit_test_teardown(fixed_seed, teardown),
                cmocka_unit_test_teardown(random_seed, teardown),
        };
        const struct CMUnitTest one[] = {
                cmocka_unit_test_teardown(fixed_seed, teardown),
        };

        ts_env("KAFKA_BOOTSTRAP");
        ts_env("TESTBED_DIR");
        /* CHAOS_SEED given: that seed alone (a replay, or one run of the soak) */
        if (getenv("CHAOS_SEED"))
                return cmocka_run_group_tests(one, NULL, NULL);
        return cmocka_run_group_tests(both, NULL, NULL);
}
