/* test_inbox.c -- The consumer's inbox (sql/inbox.sql) and the example consumer: each event's effect once per group. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "support.h"

#define INBOX_DB "outbox_inbox_test"

static char inbox_conninfo[512];

/* The consumer's database: its own, as in production (the inbox lives beside the effects, not
 * beside the outbox), with sql/inbox.sql and the example's effect table applied. */
static void apply_file(PGconn *c, const char *rel) {
        char path[512];
        FILE *f;
        char *sql;
        long n;
        PGresult *res;

        snprintf(path, sizeof(path), "%s/%s", ts_env("OUTBOX_RELAY_SRCDIR"), rel);
        f = fopen(path, "r");
        if (!f)
                fail_msg("cannot read %s", path);
        fseek(f, 0, SEEK_END);
        n = ftell(f);
        rewind(f);
        sql = calloc(1, (size_t)n + 1);
        if (fread(sql, 1, (size_t)n, f) != (size_t)n)
                fail_msg("cannot read %s", path);
        fclose(f);
        res = PQexec(c, sql);
        if (PQresultStatus(res) != PGRES_COMMAND_OK)
                fail_msg("%s: %s", rel, PQresultErrorMessage(res));
        PQclear(res);
        free(sql);
}

static PGconn *inbox_connect(void) {
        PGconn *c = PQconnectdb(inbox_conninfo);

        if (PQstatus(c) != CONNECTION_OK)
                fail_msg("inbox database: %s", PQerrorMessage(c));
        PQclear(PQexec(c, "SET client_min_messages = warning"));
        return c;
}

static int setup_db(void **state) {
        PGconn *c = ts_pg_connect();
        PGresult *res;

        (void)state;
        res = PQexec(c, "SELECT 1 FROM pg_database WHERE datname = '" INBOX_DB "'");
        if (PQntuples(res) == 0)
                ts_pg_exec(c, "CREATE DATABASE " INBOX_DB);
        PQclear(res);
        PQfinish(c);
        /* libpq takes the last of a repeated keyword: this dbname wins over the test bed's. */
        snprintf(inbox_conninfo, sizeof(inbox_conninfo), "%s dbname=" INBOX_DB, ts_conninfo());
        c = inbox_connect();
        apply_file(c, "sql/inbox.sql");
        apply_file(c, "sql/inbox.sql"); /* it may be applied again */
        apply_file(c, "examples/inbox-consumer/effect.sql");
        PQfinish(c);
        return 0;
}

/* ---- the same event accepted from 8 connections at once ---- */

#define CONNS 8
#define ROUNDS 1000

enum conn_state { SENT_ACCEPT, SENT_END, DONE };

/* Reads conn's next result if it is there without waiting: 1 with *res, 0 not yet. */
static int ready(PGconn *c, PGresult **res) {
        if (!PQconsumeInput(c))
                fail_msg("connection: %s", PQerrorMessage(c));
        if (PQisBusy(c))
                return 0;
        *res = PQgetResult(c);
        /* Each query gives one result, then NULL. */
        PGresult *end = PQgetResult(c);
        if (end)
                fail_msg("more results than one");
        return 1;
}

/* Every round, 8 transactions accept one (group, source, id) at once and hold it until the
 * first to get true ends: it commits, or on every fifth round it rolls back, and then one of the
 * others must get true. Counted per round: trues that committed (exactly 1), errors (0). */
static void accept_concurrently(void **state) {
        PGconn *c[CONNS];
        int64_t start = ts_now_ms();
        int rolled_back_rounds = 0, waited = 0;

        (void)state;
        for (int i = 0; i < CONNS; i++)
                c[i] = inbox_connect();
        ts_pg_exec(c[0], "DELETE FROM outbox_inbox WHERE consumer_group = 'concurrency'");
        for (int round = 1; round <= ROUNDS; round++) {
                enum conn_state st[CONNS];
                char id[16];
                const char *params[1] = { id };
                int committed_true = 0, trues = 0, done = 0;
                bool roll_back = round % 5 == 0, rolled = false;

                snprintf(id, sizeof(id), "%d", round);
                for (int i = 0; i < CONNS; i++) {
                        PQclear(PQexec(c[i], "BEGIN"));
                        if (!PQsendQueryParams(
                                    c[i],
                                    "SELECT outbox_inbox_accept('concurrency', 'test/public.outbox', $1)", 1,
                                    NULL, params, NULL, NULL, 0))
                                fail_msg("send: %s", PQerrorMessage(c[i]));
                        st[i] = SENT_ACCEPT;
                }
                while (done < CONNS) {
                        struct pollfd p[CONNS];
                        int busy = 0;

                        for (int i = 0; i < CONNS; i++) {
                                PGresult *res;
                                bool first;

                                p[i] = (struct pollfd){ .fd = PQsocket(c[i]), .events = POLLIN };
                                if (st[i] == DONE || !ready(c[i], &res)) {
                                        busy += st[i] != DONE;
                                        continue;
                                }
                                if (st[i] == SENT_END) {
                                        if (PQresultStatus(res) != PGRES_COMMAND_OK)
                                                fail_msg("round %d: end: %s", round,
                                                         PQresultErrorMessage(res));
                                        PQclear(res);
                                        st[i] = DONE;
                                        done++;
                                        continue;
                                }
                                if (PQresultStatus(res) != PGRES_TUPLES_OK)
                                        fail_msg("round %d: accept on connection %d: %s", round, i,
                                                 PQresultErrorMessage(res));
                                first = PQgetvalue(res, 0, 0)[0] == 't';
                                PQclear(res);
                                trues += first;
                                if (first && roll_back && !rolled) {
                                        rolled = true;
                                        PQsendQuery(c[i], "ROLLBACK");
                                } else {
                                        committed_true += first;
                                        PQsendQuery(c[i], "COMMIT");
                                }
                                st[i] = SENT_END;
                        }
                        if (busy && done < CONNS) {
                                poll(p, CONNS, 1000);
                                waited++;
                        }
                }
                if (committed_true != 1)
                        fail_msg("round %d: %d committed transactions were told 'first', want 1", round,
                                 committed_true);
                if (roll_back) {
                        /* The one rolled back, then the one that took over. */
                        assert_int_equal(trues, 2);
                        rolled_back_rounds++;
                } else
                        assert_int_equal(trues, 1);
        }
        assert_int_equal(
                ts_pg_int(c[0], "SELECT count(*) FROM outbox_inbox WHERE consumer_group = 'concurrency'"),
                ROUNDS);
        fprintf(stderr,
                "inbox concurrency: %d rounds of %d connections, %d with the first rolled back: exactly one "
                "committed 'first' each, no error, %.1f s\n",
                ROUNDS, CONNS, rolled_back_rounds, (double)(ts_now_ms() - start) / 1000.0);
        (void)waited;
        for (int i = 0; i < CONNS; i++)
                PQfinish(c[i]);
}

/* ---- pruning while accepts go on ---- */

struct acceptor {
        pthread_t thread;
        volatile bool stop;
        int accepted, firsts;
        char error[256];
};

/* New events accepted one transaction each, as a consumer does, until told to stop. */
static void *accept_main(void *arg) {
        struct acceptor *a = arg;
        PGconn *c = PQconnectdb(inbox_conninfo);

        if (PQstatus(c) != CONNECTION_OK)
                snprintf(a->error, sizeof(a->error), "%s", PQerrorMessage(c));
        while (!a->error[0] && !a->stop) {
                char sql[160];
                PGresult *res;

                snprintf(sql, sizeof(sql), "SELECT outbox_inbox_accept('prune', 'test/public.outbox', %d)",
                         1000000 + a->accepted);
                res = PQexec(c, sql);
                if (PQresultStatus(res) != PGRES_TUPLES_OK)
                        snprintf(a->error, sizeof(a->error), "%s", PQresultErrorMessage(res));
                else {
                        a->accepted++;
                        a->firsts += PQgetvalue(res, 0, 0)[0] == 't';
                }
                PQclear(res);
        }
        PQfinish(c);
        return NULL;
}

struct pruner {
        pthread_t thread;
        int64_t deleted, calls, over; /* over: calls that deleted more than their limit */
        char error[256];
};

/* Prunes in calls of at most 1000 until one deletes fewer. */
static void *prune_main(void *arg) {
        struct pruner *p = arg;
        PGconn *c = PQconnectdb(inbox_conninfo);

        if (PQstatus(c) != CONNECTION_OK)
                snprintf(p->error, sizeof(p->error), "%s", PQerrorMessage(c));
        while (!p->error[0]) {
                PGresult *res = PQexec(c, "SELECT outbox_inbox_prune('14 days', 1000)");
                int64_t n;

                if (PQresultStatus(res) != PGRES_TUPLES_OK) {
                        snprintf(p->error, sizeof(p->error), "%s", PQresultErrorMessage(res));
                        PQclear(res);
                        break;
                }
                n = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
                PQclear(res);
                p->calls++;
                p->deleted += n;
                p->over += n > 1000;
                if (n < 1000)
                        break;
        }
        PQfinish(c);
        return NULL;
}

static void prune_in_batches(void **state) {
        PGconn *c = inbox_connect();
        struct acceptor a = { 0 };
        struct pruner other = { 0 };
        int64_t start, deleted = 0, calls = 0, ms;
        PGresult *res;

        (void)state;
        ts_pg_exec(c, "DELETE FROM outbox_inbox WHERE consumer_group = 'prune'");
        /* 50,000 entries accepted 30 days ago, 5,000 an hour ago. */
        ts_pg_exec(
                c,
                "INSERT INTO outbox_inbox (consumer_group, source, outbox_id, received_at)"
                " SELECT 'prune', 'test/public.outbox', g, now() - interval '30 days' + g * interval '1 ms'"
                " FROM generate_series(1, 50000) g");
        ts_pg_exec(c,
                   "INSERT INTO outbox_inbox (consumer_group, source, outbox_id, received_at)"
                   " SELECT 'prune', 'test/public.outbox', g, now() - interval '1 hour'"
                   " FROM generate_series(50001, 55000) g");
        ts_pg_exec(c, "VACUUM ANALYZE outbox_inbox");
        /* Bad arguments are errors, not a silent no-op (or a pruning of everything). */
        res = PQexec(c, "SELECT outbox_inbox_prune('0', 10)");
        assert_int_equal(PQresultStatus(res), PGRES_FATAL_ERROR);
        assert_non_null(strstr(PQresultErrorMessage(res), "the retention must be a positive interval"));
        PQclear(res);
        res = PQexec(c, "SELECT outbox_inbox_prune('1 day', 0)");
        assert_int_equal(PQresultStatus(res), PGRES_FATAL_ERROR);
        PQclear(res);

        assert_int_equal(pthread_create(&a.thread, NULL, accept_main, &a), 0);
        for (int64_t until = ts_now_ms() + 10000; a.accepted == 0 && !a.error[0] && ts_now_ms() < until;)
                usleep(1000); /* the accepts are under way before the pruning starts */
        /* Two pruners at once, as two cron jobs might: SKIP LOCKED shares the work out. */
        assert_int_equal(pthread_create(&other.thread, NULL, prune_main, &other), 0);
        start = ts_now_ms();
        for (;;) {
                int64_t n = ts_pg_int(c, "SELECT outbox_inbox_prune('14 days', 1000)");

                calls++;
                assert_true(n >= 0 && n <= 1000); /* bounded: one short transaction each */
                deleted += n;
                if (n < 1000)
                        break;
        }
        pthread_join(other.thread, NULL);
        ms = ts_now_ms() - start;
        a.stop = true;
        pthread_join(a.thread, NULL);
        if (a.error[0])
                fail_msg("an accept failed during the pruning: %s", a.error);
        if (other.error[0])
                fail_msg("the second pruner failed: %s", other.error);
        assert_true(other.over == 0);
        deleted += other.deleted;
        calls += other.calls;
        assert_int_equal(deleted, 50000); /* every old entry once, between the two */
        assert_true(calls >= 50);
        assert_true(a.accepted > 0);
        assert_int_equal(a.firsts, a.accepted); /* new events, each first */
        /* What is younger than the retention stays; what was accepted meanwhile too. */
        assert_int_equal(ts_pg_int(c, "SELECT count(*) FROM outbox_inbox WHERE consumer_group = 'prune'"),
                         5000 + a.accepted);
        assert_int_equal(ts_pg_int(c,
                                   "SELECT count(*) FROM outbox_inbox WHERE consumer_group = 'prune'"
                                   " AND received_at < now() - interval '14 days'"),
                         0);
        /* The limit of the guarantee, tested: a pruned event that comes again is accepted again;
         * one still in the inbox is not. */
        assert_int_equal(ts_pg_int(c, "SELECT outbox_inbox_accept('prune', 'test/public.outbox', 17)::int"),
                         1);
        assert_int_equal(
                ts_pg_int(c, "SELECT outbox_inbox_accept('prune', 'test/public.outbox', 50017)::int"), 0);
        /* The procedure commits between its batches and leaves nothing past the retention. */
        ts_pg_exec(c,
                   "INSERT INTO outbox_inbox (consumer_group, source, outbox_id, received_at)"
                   " SELECT 'prune', 'test/public.outbox', g, now() - interval '30 days'"
                   " FROM generate_series(2000001, 2012345) g");
        ts_pg_exec(c, "CALL outbox_inbox_prune_all('14 days', 500)");
        assert_int_equal(ts_pg_int(c,
                                   "SELECT count(*) FROM outbox_inbox WHERE consumer_group = 'prune'"
                                   " AND received_at < now() - interval '14 days'"),
                         0);
        fprintf(stderr,
                "inbox prune: 50000 entries in %" PRId64 " calls of at most 1000 by two pruners (%" PRId64
                " by the second) in %" PRId64 " ms (%.0f entries/s) while %d accepts went on\n",
                calls, other.deleted, ms, ms ? 50000.0 * 1000.0 / (double)ms : 0.0, a.accepted);
        ts_pg_exec(c, "DELETE FROM outbox_inbox WHERE consumer_group = 'prune'");
        PQfinish(c);
}

/* ---- end to end: relays that crash, consumers that crash, effects once per group ---- */

struct consumer {
        pid_t pid;
        char name[32];
        char log[512];
};

/* Consumers running now: the teardown kills those a failed test left behind. */
static pid_t running[8];

static void track(pid_t pid, bool add) {
        for (size_t i = 0; i < sizeof(running) / sizeof(running[0]); i++)
                if (add ? running[i] == 0 : running[i] == pid) {
                        running[i] = add ? pid : 0;
                        return;
                }
}

static int teardown(void **state) {
        for (size_t i = 0; i < sizeof(running) / sizeof(running[0]); i++)
                if (running[i] > 0) {
                        kill(running[i], SIGKILL);
                        waitpid(running[i], NULL, 0);
                        running[i] = 0;
                }
        return ts_teardown(state);
}

static void consumer_start(struct consumer *k, const char *name, const char *group, const char *topic) {
        const char *base = getenv("OUTBOX_TEST_TMPDIR");
        static char conninfo[700];

        snprintf(k->name, sizeof(k->name), "%s", name);
        snprintf(k->log, sizeof(k->log), "%s/inbox-consumer-%s-%d.log", base && *base ? base : "/tmp", name,
                 (int)getpid());
        snprintf(conninfo, sizeof(conninfo), "%s application_name=inbox-%s", inbox_conninfo, name);
        k->pid = fork();
        if (k->pid < 0)
                fail_msg("fork: %s", strerror(errno));
        if (k->pid == 0) {
                const char *bin = getenv("INBOX_CONSUMER_BIN");
                int fd = open(k->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

                if (fd < 0 || !bin)
                        _exit(127);
                dup2(fd, STDOUT_FILENO);
                dup2(fd, STDERR_FILENO);
                /* A member that died is out of the group after 6 s, not librdkafka's 45. */
                execl(bin, bin, "-b", "200", "-X", "session.timeout.ms=6000", "-X",
                      "heartbeat.interval.ms=1000", ts_env("KAFKA_BOOTSTRAP"), group, conninfo, topic,
                      (char *)NULL);
                _exit(127);
        }
        track(k->pid, true);
}

/* Signals the consumer and waits; returns its exit status (128 + signal when killed). */
static int consumer_stop(struct consumer *k, int sig) {
        int status;

        kill(k->pid, sig);
        for (int i = 0; i < 3000; i++) {
                if (waitpid(k->pid, &status, WNOHANG) == k->pid) {
                        track(k->pid, false);
                        k->pid = 0;
                        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                }
                usleep(10000);
        }
        kill(k->pid, SIGKILL);
        waitpid(k->pid, &status, 0);
        track(k->pid, false);
        k->pid = 0;
        fail_msg("consumer %s did not stop within 30 s of signal %d", k->name, sig);
        return -1;
}

/* "… N applied, M repeats skipped …" from the consumer's last summary line; -1 without one. */
static long long consumer_said(const struct consumer *k, const char *what) {
        FILE *f = fopen(k->log, "r");
        char line[512];
        long long v = -1;

        while (f && fgets(line, sizeof(line), f)) {
                const char *p = strstr(line, what);

                if (strncmp(line, "inbox-consumer: group", 21) != 0 || !p)
                        continue;
                while (p > line && p[-1] == ' ')
                        p--;
                while (p > line && p[-1] >= '0' && p[-1] <= '9')
                        p--;
                v = strtoll(p, NULL, 10);
        }
        if (f)
                fclose(f);
        return v;
}

#define E2E_RELAYS 3
#define E2E_PARTITIONS 4

/* Whether `group` has committed every partition of `topic` up to its end (the high watermark):
 * then its members have read, applied or skipped, and committed every message, duplicates
 * included. Asked of the group coordinator by a client that does not join the group. */
static bool group_caught_up(const char *group, const char *topic) {
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(E2E_PARTITIONS);
        char errstr[256];
        bool done = true;
        rd_kafka_t *rk;

        rd_kafka_conf_set(conf, "bootstrap.servers", ts_env("KAFKA_BOOTSTRAP"), errstr, sizeof(errstr));
        rd_kafka_conf_set(conf, "group.id", group, errstr, sizeof(errstr));
        rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
        if (!rk)
                fail_msg("consumer: %s", errstr);
        for (int p = 0; p < E2E_PARTITIONS; p++)
                rd_kafka_topic_partition_list_add(parts, topic, p);
        if (rd_kafka_committed(rk, parts, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR)
                done = false;
        for (int p = 0; done && p < E2E_PARTITIONS; p++) {
                int64_t lo, hi;

                if (rd_kafka_query_watermark_offsets(rk, topic, p, &lo, &hi, 10000) !=
                            RD_KAFKA_RESP_ERR_NO_ERROR ||
                    parts->elems[p].offset < hi)
                        done = false;
        }
        rd_kafka_topic_partition_list_destroy(parts);
        rd_kafka_destroy(rk);
        return done;
}

static void exactly_once_per_group(void **state) {
        PGconn *c = ts_pg_connect(), *inbox = inbox_connect();
        char *topic = ts_topic("inbox-e2e");
        const char *topics[] = { topic, NULL };
        struct ts_relay relay[E2E_RELAYS];
        struct consumer a1, a2, b1;
        struct ts_load *load;
        uint64_t seed = (uint64_t)ts_now_ms() | 1;
        int rows = 0, kills = 0, freezes = 0;
        int64_t after_kills;
        int64_t in_topic, killed_mid_batch_at = -1;
        char source[256];
        struct ts_msgs m;
        struct ts_verify v;

        (void)state;
        fprintf(stderr, "inbox e2e: seed %" PRIu64 "\n", seed);
        ts_pg_install_copy(c);
        ts_create_topic(topic, E2E_PARTITIONS, NULL, NULL);
        ts_pg_exec(inbox, "TRUNCATE inbox_example_effect");
        ts_pg_exec(inbox, "DELETE FROM outbox_inbox WHERE consumer_group IN ('e2e-a', 'e2e-b')");
        for (int i = 0; i < E2E_RELAYS; i++)
                ts_relay_start(&relay[i], "poll_interval = \"1s\"; batch_size = 500;", NULL);
        consumer_start(&a1, "a1", "e2e-a", topic);
        consumer_start(&a2, "a2", "e2e-a", topic);
        consumer_start(&b1, "b1", "e2e-b", topic);

        /* Load with relays killed (-9) under it: a relay killed between Kafka's acknowledgement and
         * its commit sends its batch again. */
        load = ts_load_start(topic, 20000, 4000, 200);
        while (ts_load_written(load) < 20000 || kills < 4) {
                int victim = (int)(ts_rand(&seed) % E2E_RELAYS);

                usleep(400000 + (useconds_t)(ts_rand(&seed) % 400000));
                assert_int_equal(ts_relay_stop(&relay[victim], SIGKILL, 5000), 128 + SIGKILL);
                kills++;
                ts_relay_start(&relay[victim], "poll_interval = \"1s\"; batch_size = 500;", NULL);
                /* Once, while a consumer of group a holds a batch in its open transaction. */
                if (killed_mid_batch_at < 0 && a1.pid > 0) {
                        int64_t until = ts_now_ms() + 5000;

                        while (ts_now_ms() < until &&
                               ts_pg_int(inbox,
                                         "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                                         "'inbox-a1' AND xact_start IS NOT NULL AND state <> 'idle'") == 0)
                                usleep(200);
                        if (ts_now_ms() < until) {
                                assert_int_equal(consumer_stop(&a1, SIGKILL), 128 + SIGKILL);
                                killed_mid_batch_at = ts_load_written(load);
                        }
                }
                if (killed_mid_batch_at >= 0 && a1.pid == 0 && ts_rand(&seed) % 2 == 0)
                        consumer_start(&a1, "a1", "e2e-a", topic);
        }
        rows += ts_load_finish(load);
        assert_true(ts_wait_drained(c, topics, 120000));
        in_topic = ts_topic_messages(topic);
        /* A kill -9 makes duplicates only when it lands between the acknowledgement and the commit,
         * a few milliseconds of each batch: some runs get none. Then, under more load, every relay
         * is frozen (SIGSTOP) while one has a batch published and not committed ('idle in
         * transaction'), the server ends those transactions, and the relays go on (SIGCONT): the
         * frozen batches' messages are delivered and their rows, unlocked, are claimed and sent
         * again. One round always, so both kinds of fault are in every run; at most 5. A batch
         * holds its rows locked, so its transaction has an id: sharing relays also sit 'idle in
         * transaction' after a claim that came back empty, about to commit it (no id, nothing to
         * send again), and a run that froze only those in all five rounds saw no duplicate. */
        after_kills = in_topic - rows;
        for (int round = 0; (round == 0 || in_topic <= rows) && round < 5; round++) {
                int64_t until;

                load = ts_load_start(topic, 5000, 4000, 200);
                for (until = ts_now_ms() + 5000; ts_now_ms() < until &&
                     ts_pg_int(c,
                               "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'outbox-relay'"
                               " AND state = 'idle in transaction' AND backend_xid IS NOT NULL") == 0;)
                        usleep(200);
                for (int i = 0; i < E2E_RELAYS; i++)
                        kill(relay[i].pid, SIGSTOP);
                ts_pg_exec(c,
                           "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = "
                           "'outbox-relay' AND state = 'idle in transaction'");
                usleep(300000);
                for (int i = 0; i < E2E_RELAYS; i++)
                        kill(relay[i].pid, SIGCONT);
                freezes++;
                rows += ts_load_finish(load);
                assert_true(ts_wait_drained(c, topics, 120000));
                in_topic = ts_topic_messages(topic);
        }
        if (a1.pid == 0)
                consumer_start(&a1, "a1", "e2e-a", topic);
        if (killed_mid_batch_at < 0)
                fail_msg("consumer a1 was never seen inside a transaction: not killed mid-batch");
        in_topic = ts_topic_messages(topic);
        fprintf(stderr,
                "inbox e2e: %d rows, %d relay kills (-9) (%" PRId64
                " duplicates after them), %d freezes with the "
                "transactions ended, the topic holds %" PRId64 " messages\n",
                rows, kills, after_kills, freezes, in_topic);
        assert_true(in_topic > rows); /* the relays really sent duplicates */

        /* Every event's effect, once per group: wait for both groups to have them all. */
        ts_pg_exec(inbox, "SET statement_timeout = '10s'");
        for (int64_t until = ts_now_ms() + 120000;;) {
                int64_t ga = ts_pg_int(inbox,
                                       "SELECT count(DISTINCT outbox_id) FROM inbox_example_effect WHERE "
                                       "consumer_group = 'e2e-a' AND topic = '%s'",
                                       topic);
                int64_t gb = ts_pg_int(inbox,
                                       "SELECT count(DISTINCT outbox_id) FROM inbox_example_effect WHERE "
                                       "consumer_group = 'e2e-b' AND topic = '%s'",
                                       topic);

                if (ga == rows && gb == rows)
                        break;
                if (ts_now_ms() > until)
                        fail_msg("effects after 120 s: group a %" PRId64 ", group b %" PRId64 " of %d events",
                                 ga, gb, rows);
                usleep(200000);
        }
        /* and until each group has read and committed everything, the duplicates at the end too */
        for (int64_t until = ts_now_ms() + 60000;
             !group_caught_up("e2e-a", topic) || !group_caught_up("e2e-b", topic);) {
                if (ts_now_ms() > until)
                        fail_msg("the groups did not commit every partition to its end within 60 s");
                usleep(300000);
        }
        assert_int_equal(consumer_stop(&a1, SIGTERM), 0);
        assert_int_equal(consumer_stop(&a2, SIGTERM), 0);
        assert_int_equal(consumer_stop(&b1, SIGTERM), 0);
        for (int i = 0; i < E2E_RELAYS; i++)
                assert_int_equal(ts_relay_stop(&relay[i], SIGTERM, 30000), 0);

        /* What a user checks: each committed row's effect exactly once per group (0 missing, 0
         * doubled), with the identity the relay sent. */
        snprintf(source, sizeof(source), "%s/public.outbox", PQdb(c));
        ts_pg_exec(inbox, "CREATE TEMP TABLE written (id bigint PRIMARY KEY)");
        {
                PGresult *res = PQexecParams(
                        c, "SELECT string_agg(id::text, ',') FROM outbox_test_copy WHERE topic = $1", 1, NULL,
                        (const char *[]){ topic }, NULL, NULL, 0);
                char *sql;

                assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
                sql = malloc(strlen(PQgetvalue(res, 0, 0)) + 64);
                sprintf(sql, "INSERT INTO written SELECT unnest('{%s}'::bigint[])", PQgetvalue(res, 0, 0));
                ts_pg_exec(inbox, "%s", sql);
                free(sql);
                PQclear(res);
        }
        assert_int_equal(ts_pg_int(inbox, "SELECT count(*) FROM written"), rows);
        for (int g = 0; g < 2; g++) {
                const char *group = g ? "e2e-b" : "e2e-a";
                int64_t missing =
                        ts_pg_int(inbox,
                                  "SELECT count(*) FROM written w WHERE NOT EXISTS (SELECT 1 FROM "
                                  "inbox_example_effect e WHERE e.consumer_group = '%s' AND e.outbox_id = "
                                  "w.id AND e.topic = '%s')",
                                  group, topic);
                int64_t doubled =
                        ts_pg_int(inbox,
                                  "SELECT count(*) FROM (SELECT outbox_id FROM inbox_example_effect WHERE "
                                  "consumer_group = '%s' AND topic = '%s' GROUP BY outbox_id HAVING "
                                  "count(*) > 1) d",
                                  group, topic);
                int64_t foreign =
                        ts_pg_int(inbox,
                                  "SELECT count(*) FROM inbox_example_effect WHERE consumer_group = '%s' AND "
                                  "topic = '%s' AND (source <> '%s' OR outbox_id NOT IN (SELECT id FROM "
                                  "written))",
                                  group, topic, source);

                fprintf(stderr, "inbox e2e: group %s: %d events, missing %" PRId64 ", doubled %" PRId64 "\n",
                        group, rows, missing, doubled);
                assert_int_equal(missing, 0);
                assert_int_equal(doubled, 0);
                assert_int_equal(foreign, 0);
                assert_int_equal(
                        ts_pg_int(
                                inbox,
                                "SELECT count(*) FROM outbox_inbox WHERE consumer_group = '%s' AND source = "
                                "'%s' AND outbox_id IN (SELECT id FROM written)",
                                group, source),
                        rows);
        }
        /* Group b's one consumer, never killed, saw every duplicate the topic holds and skipped it. */
        fprintf(stderr, "inbox e2e: consumer b1 applied %lld, skipped %lld repeats; a2 applied %lld\n",
                consumer_said(&b1, "applied"), consumer_said(&b1, "repeats skipped"),
                consumer_said(&a2, "applied"));
        assert_int_equal(consumer_said(&b1, "applied"), rows);
        assert_true(consumer_said(&b1, "repeats skipped") >= in_topic - rows);

        /* And the relays kept their own promise: nothing lost or changed, per-key order. */
        ts_consume(topics, (size_t)in_topic, 60000, 1000, &m);
        ts_verify(c, topics, &m, false, &v);
        fprintf(stderr, "inbox e2e: verify: consumed %zu, missing %zu, duplicates %zu, order %zu\n",
                v.consumed, v.missing, v.duplicates, v.order_violations);
        ts_verify_assert(&v, (size_t)rows, (size_t)(kills + freezes * E2E_RELAYS) * 1000);
        ts_msgs_free(&m);
        ts_pg_exec(c, "DELETE FROM outbox WHERE topic = '%s'", topic);
        free(topic);
        PQfinish(inbox);
        PQfinish(c);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(accept_concurrently, ts_teardown),
                cmocka_unit_test_teardown(prune_in_batches, ts_teardown),
                cmocka_unit_test_teardown(exactly_once_per_group, teardown),
        };

        return cmocka_run_group_tests(tests, setup_db, NULL);
}
