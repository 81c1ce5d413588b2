/* bench-util.c -- Small helpers for bench/run.sh: create and count the topic, wait for the drain.
 *
 *   bench-util create-topic --bootstrap B --topic T [--partitions N]
 *       Creates T (replication factor 1) through the Admin API unless it exists, then waits until
 *       the broker reports a leader for every partition. Exit 0, or 1 with a message.
 *       --warm-idempotence first sends one message with an idempotent producer to T-warmup.
 *   bench-util warm-broker --bootstrap B --topic T [--messages N]
 *       Produces N (3,000,000) messages shaped like the relay's (10,000 keys, 200-byte values, 5
 *       headers) with the relay's producer settings (idempotence, acks=all, lz4, linger.ms=5) to
 *       T, which must exist: the broker's JVM compiles its produce path under this load instead
 *       of under the measured one. Exit 0 once every message is acknowledged.
 *   bench-util watermarks --bootstrap B --topic T
 *       Prints the sum of the topic's high watermarks (messages ever written to it).
 *   bench-util wait-drain [--conninfo STR] [--timeout S] [--interval-ms MS] [--pid PID]
 *       Polls the outbox every MS until no pending row is left; fails after S seconds or as soon
 *       as PID (the relay) is gone. Prints drained_at_us=<CLOCK_REALTIME us> and polls=<n>.
 *       With --sample-app NAME it also samples, every --sample-ms, what the session with that
 *       application_name is doing (pg_stat_activity) and prints sample_<state>=<count> lines.
 *
 * The drain probe walks the pending-row index ("is any pending row left?") instead of a full
 * count(*): a sequential count over a 1M-row table every 200 ms would take a large share of a
 * 2-core machine away from the relay being measured. It starts at the lowest pending id it found
 * last time, as the relay's claim floor does. From the index's start every probe stepped over the
 * entries of every row finished so far (not yet vacuumed): 7.091-8.837 ms and 2,122-2,208 buffers a
 * probe in 1M-row drains, ten probes a second. From the last lowest id: 3.911-4.407 ms and 816-822
 * buffers (the rows finished since the last probe). A probe that finds none there looks once more
 * from the start before the drain counts as done, and a full count(*) runs once at the end and
 * must be 0. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
        va_list ap;

        fprintf(stderr, "bench-util: ");
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        exit(1);
}

static int64_t clock_us(clockid_t id) {
        struct timespec ts;

        clock_gettime(id, &ts);
        return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_ms(int ms) {
        struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

        while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
                ;
}

static long parse_long(const char *s, const char *what, long min, long max) {
        char *end;
        long v;

        errno = 0;
        v = strtol(s, &end, 10);
        if (errno || end == s || *end || v < min || v > max)
                die("%s must be an integer in %ld..%ld (got '%s')", what, min, max, s);
        return v;
}

static int create_topic(const char *bootstrap, const char *topic, int partitions) {
        char err[512];
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        rd_kafka_t *rk;
        rd_kafka_NewTopic_t *nt;
        rd_kafka_queue_t *q;
        rd_kafka_event_t *ev;
        const rd_kafka_CreateTopics_result_t *res;
        const rd_kafka_topic_result_t **tr;
        rd_kafka_AdminOptions_t *opts;
        size_t n;
        int64_t deadline;

        if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, err, sizeof(err)) != RD_KAFKA_CONF_OK)
                die("%s", err);
        rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
        if (!rk)
                die("%s", err);
        nt = rd_kafka_NewTopic_new(topic, partitions, 1, err, sizeof(err));
        if (!nt)
                die("%s", err);
        opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
        rd_kafka_AdminOptions_set_operation_timeout(opts, 20000, err, sizeof(err));
        rd_kafka_AdminOptions_set_request_timeout(opts, 30000, err, sizeof(err));
        q = rd_kafka_queue_new(rk);
        rd_kafka_CreateTopics(rk, &nt, 1, opts, q);
        ev = rd_kafka_queue_poll(q, 40000);
        if (!ev)
                die("CreateTopics: no answer within 40s");
        if (rd_kafka_event_error(ev))
                die("CreateTopics: %s", rd_kafka_event_error_string(ev));
        res = rd_kafka_event_CreateTopics_result(ev);
        if (!res)
                die("CreateTopics: unexpected event %s", rd_kafka_event_name(ev));
        tr = rd_kafka_CreateTopics_result_topics(res, &n);
        for (size_t i = 0; i < n; i++) {
                rd_kafka_resp_err_t e = rd_kafka_topic_result_error(tr[i]);

                if (e == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS)
                        fprintf(stderr, "bench-util: topic '%s' exists already\n", topic);
                else if (e)
                        die("creating topic '%s': %s", topic, rd_kafka_topic_result_error_string(tr[i]));
        }
        rd_kafka_event_destroy(ev);
        rd_kafka_AdminOptions_destroy(opts);
        rd_kafka_NewTopic_destroy(nt);
        rd_kafka_queue_destroy(q);

        /* Created is not yet usable: wait for a leader on every partition. */
        deadline = clock_us(CLOCK_MONOTONIC) + 30 * 1000000LL;
        for (;;) {
                rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
                const struct rd_kafka_metadata *md = NULL;
                bool ok = false;

                if (rd_kafka_metadata(rk, 0, rkt, &md, 2000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                        ok = md->topic_cnt == 1 && !md->topics[0].err &&
                                md->topics[0].partition_cnt == partitions;
                        for (int i = 0; ok && i < md->topics[0].partition_cnt; i++)
                                ok = md->topics[0].partitions[i].leader >= 0 &&
                                        !md->topics[0].partitions[i].err;
                        rd_kafka_metadata_destroy(md);
                }
                rd_kafka_topic_destroy(rkt);
                if (ok)
                        break;
                if (clock_us(CLOCK_MONOTONIC) >= deadline)
                        die("topic '%s' has no leader for all %d partitions after 30s", topic, partitions);
                sleep_ms(200);
        }
        rd_kafka_destroy(rk);
        fprintf(stderr, "bench-util: topic '%s' ready with %d partitions\n", topic, partitions);
        return 0;
}

/* A producer for bootstrap with these settings (name, value pairs) and delivery callback. */
static rd_kafka_t *producer_new(const char *bootstrap, const char *const (*settings)[2], size_t n,
                                void (*on_delivery)(rd_kafka_t *, const rd_kafka_message_t *, void *),
                                void *opaque) {
        char err[512];
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        rd_kafka_t *rk;

        if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, err, sizeof(err)))
                die("%s", err);
        for (size_t i = 0; i < n; i++)
                if (rd_kafka_conf_set(conf, settings[i][0], settings[i][1], err, sizeof(err)))
                        die("%s", err);
        rd_kafka_conf_set_opaque(conf, opaque);
        rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
        rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
        if (!rk)
                die("%s", err);
        return rk;
}

static void on_warm_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
        (void)rk;
        *(rd_kafka_resp_err_t *)opaque = m->err;
}

/* A fresh broker answers the first idempotent producer's InitProducerId with "coordinator load
 * in progress" for a while: one idempotent message to a side topic pays that once, before the
 * relay's clock starts. */
static int warm_idempotence(const char *bootstrap, const char *topic) {
        static const char *const settings[][2] = {
                { "enable.idempotence", "true" },
                { "message.timeout.ms", "30000" },
        };
        rd_kafka_resp_err_t result = RD_KAFKA_RESP_ERR__IN_PROGRESS, e;
        rd_kafka_t *rk = producer_new(bootstrap, settings, sizeof(settings) / sizeof(settings[0]),
                                      on_warm_delivery, &result);

        e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_VALUE("warm-up", 7),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
        if (e)
                die("producing to '%s': %s", topic, rd_kafka_err2str(e));
        rd_kafka_flush(rk, 40000);
        if (result)
                die("the warm-up message to '%s' failed: %s", topic, rd_kafka_err2str(result));
        rd_kafka_destroy(rk);
        fprintf(stderr, "bench-util: idempotent producer warmed up on '%s'\n", topic);
        return 0;
}

static void on_load_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
        (void)rk;
        if (m->err)
                (*(long *)opaque)++;
}

/* A fresh broker runs its produce path interpreted and JIT-compiles it under the first few
 * million messages (measured: its CPU for a 1M-row drain went from 4.08 s for the first of nine
 * drains on one test bed to 0.78 s for the last; bench/README.md). Messages like the relay's, with
 * its producer settings, warm the same path. */
static int warm_broker(const char *bootstrap, const char *topic, long messages) {
        static const char *const settings[][2] = {
                { "enable.idempotence", "true" },    { "acks", "all" },
                { "compression.codec", "lz4" },      { "linger.ms", "5" },
                { "partitioner", "murmur2_random" }, { "message.timeout.ms", "60000" },
        };
        char key[32], value[200], id[24];
        long failed = 0;
        int64_t t0 = clock_us(CLOCK_MONOTONIC);
        rd_kafka_t *rk = producer_new(bootstrap, settings, sizeof(settings) / sizeof(settings[0]),
                                      on_load_delivery, &failed);

        memset(value, 'x', sizeof(value));
        for (long i = 0; i < messages; i++) {
                int klen = snprintf(key, sizeof(key), "key-%ld", i % 10000);
                int ilen = snprintf(id, sizeof(id), "%ld", i + 1);
                rd_kafka_headers_t *h = rd_kafka_headers_new(5);
                rd_kafka_resp_err_t e;

                memcpy(value, key, (size_t)klen);
                rd_kafka_header_add(h, "trace-id", -1, "0123456789abcdef0123456789abcdef", 32);
                rd_kafka_header_add(h, "source", -1, "outbox-bench", -1);
                rd_kafka_header_add(h, "type", -1, "order.created", -1);
                rd_kafka_header_add(h, "outbox-id", -1, id, ilen);
                rd_kafka_header_add(h, "outbox-source", -1, "outbox/public.outbox", -1);
                for (;;) {
                        e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, (size_t)klen),
                                              RD_KAFKA_V_VALUE(value, sizeof(value)),
                                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h),
                                              RD_KAFKA_V_END);
                        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL)
                                break;
                        rd_kafka_poll(rk, 10);
                }
                if (e) {
                        rd_kafka_headers_destroy(h);
                        die("producing to '%s': %s", topic, rd_kafka_err2str(e));
                }
                rd_kafka_poll(rk, 0);
        }
        while (rd_kafka_flush(rk, 1000) == RD_KAFKA_RESP_ERR__TIMED_OUT)
                if (clock_us(CLOCK_MONOTONIC) - t0 > 600 * 1000000LL)
                        die("the broker warm-up did not finish within 600 s");
        rd_kafka_destroy(rk);
        if (failed)
                die("%ld of %ld warm-up messages to '%s' failed", failed, messages, topic);
        fprintf(stderr, "bench-util: %ld warm-up messages acknowledged by the broker in %.1f s\n", messages,
                (double)(clock_us(CLOCK_MONOTONIC) - t0) / 1e6);
        return 0;
}

/* Sum of the high watermarks of every partition of the topic: messages ever written to it. */
static int watermarks(const char *bootstrap, const char *topic) {
        char err[512];
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_topic_t *rkt;
        rd_kafka_resp_err_t e;
        rd_kafka_t *rk;
        int64_t sum = 0;

        if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, err, sizeof(err)) != RD_KAFKA_CONF_OK)
                die("%s", err);
        rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
        if (!rk)
                die("%s", err);
        rkt = rd_kafka_topic_new(rk, topic, NULL);
        e = rd_kafka_metadata(rk, 0, rkt, &md, 10000);
        if (e || md->topic_cnt != 1 || md->topics[0].err)
                die("no metadata for topic '%s': %s", topic,
                    rd_kafka_err2str(e                       ? e
                                             : md->topic_cnt ? md->topics[0].err
                                                             : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC));
        for (int i = 0; i < md->topics[0].partition_cnt; i++) {
                int64_t lo, hi;

                e = rd_kafka_query_watermark_offsets(rk, topic, md->topics[0].partitions[i].id, &lo, &hi,
                                                     10000);
                if (e)
                        die("watermarks of %s[%d]: %s", topic, md->topics[0].partitions[i].id,
                            rd_kafka_err2str(e));
                sum += hi;
        }
        rd_kafka_metadata_destroy(md);
        rd_kafka_topic_destroy(rkt);
        rd_kafka_destroy(rk);
        printf("%" PRId64 "\n", sum);
        return 0;
}

static PGresult *query(PGconn *pg, const char *sql) {
        PGresult *res = PQexec(pg, sql);

        if (PQresultStatus(res) != PGRES_TUPLES_OK)
                die("%s: %s", sql, PQresultErrorMessage(res));
        return res;
}

/* What the relay's pipelines' database sessions are doing, sampled from pg_stat_activity: where a
 * batch's time goes (claim, finish, or idle in transaction = waiting for Kafka and the relay's own
 * CPU). The relay's first connection (the oldest) listens and looks; the others are its
 * pipelines, each counted. */
enum sample_kind { S_CLAIM, S_FINISH, S_ACTIVE_OTHER, S_IDLE_TX, S_IDLE, S_NONE, S_KINDS };
static const char *const sample_names[S_KINDS] = {
        "active_claim", "active_finish", "active_other", "idle_in_transaction", "idle", "no_session",
};

static void sample(PGconn *pg, const char *app, long *samples) {
        const char *params[1] = { app };
        PGresult *res = PQexecParams(pg,
                                     "SELECT state, left(query, 12) FROM pg_stat_activity"
                                     " WHERE application_name = $1 ORDER BY backend_start, pid OFFSET 1",
                                     1, NULL, params, NULL, NULL, 0);

        if (PQresultStatus(res) != PGRES_TUPLES_OK)
                die("sampling pg_stat_activity: %s", PQresultErrorMessage(res));
        if (PQntuples(res) == 0)
                samples[S_NONE]++;
        for (int i = 0; i < PQntuples(res); i++) {
                const char *state = PQgetvalue(res, i, 0), *q = PQgetvalue(res, i, 1);
                enum sample_kind k;

                if (strcmp(state, "active") == 0)
                        /* the unordered claim, or an ordered one (a CTE) */
                        k = strncmp(q, "SELECT o.id", 11) == 0 || strncmp(q, "WITH", 4) == 0 ? S_CLAIM
                                : strncmp(q, "DELETE", 6) == 0 || strncmp(q, "UPDATE", 6) == 0
                                ? S_FINISH
                                : S_ACTIVE_OTHER;
                else if (strncmp(state, "idle in transaction", 19) == 0)
                        k = S_IDLE_TX;
                else
                        k = S_IDLE;
                samples[k]++;
        }
        PQclear(res);
}

static int wait_drain(const char *conninfo, long timeout_s, long interval_ms, pid_t pid,
                      const char *sample_app, long sample_ms) {
        /* Same predicate as the claim, so the partial index answers it: the lowest pending id at
         * or above `from`. */
        static const char probe_fmt[] = "SELECT id FROM outbox WHERE published_at IS NULL"
                                        " AND dead_at IS NULL AND id >= %" PRId64 " ORDER BY id LIMIT 1";
        char probe[sizeof(probe_fmt) + 24];
        int64_t from = 0;
        PGconn *pg = PQconnectdb(conninfo);
        int64_t start = clock_us(CLOCK_MONOTONIC), deadline = start + timeout_s * 1000000LL;
        int64_t next_probe = start, tick = (sample_app ? sample_ms : interval_ms) * 1000;
        long polls = 0, samples[S_KINDS] = { 0 };
        PGresult *res;

        if (PQstatus(pg) != CONNECTION_OK)
                die("connecting to PostgreSQL: %s", PQerrorMessage(pg));
        for (;;) {
                int64_t t = clock_us(CLOCK_MONOTONIC);

                if (sample_app)
                        sample(pg, sample_app, samples);
                if (t >= next_probe) {
                        bool left;

                        next_probe += interval_ms * 1000;
                        for (;;) {
                                snprintf(probe, sizeof(probe), probe_fmt, from);
                                res = query(pg, probe);
                                polls++;
                                left = PQntuples(res) > 0;
                                if (left)
                                        from = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
                                PQclear(res);
                                if (left || from == 0)
                                        break;
                                from = 0; /* none above: once more from the start */
                        }
                        if (!left)
                                break;
                        if (pid > 0 && kill(pid, 0) != 0)
                                die("the relay (pid %ld) exited before the outbox was drained", (long)pid);
                        if (t >= deadline) {
                                res = query(pg, "SELECT count(*) FROM outbox");
                                die("the outbox did not drain within %lds: %s rows left", timeout_s,
                                    PQgetvalue(res, 0, 0));
                        }
                }
                t = tick - (clock_us(CLOCK_MONOTONIC) - t);
                if (t > 0)
                        sleep_ms((int)(t / 1000));
        }
        printf("drained_at_us=%" PRId64 "\n", clock_us(CLOCK_REALTIME));
        printf("polls=%ld\n", polls);
        for (int k = 0; sample_app && k < S_KINDS; k++)
                printf("sample_%s=%ld\n", sample_names[k], samples[k]);
        fflush(stdout);
        res = query(pg, "SELECT count(*), count(*) FILTER (WHERE dead_at IS NOT NULL) FROM outbox");
        if (strcmp(PQgetvalue(res, 0, 0), "0") != 0)
                die("no pending row left, but the outbox still holds %s rows (%s dead-lettered)",
                    PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1));
        PQclear(res);
        PQfinish(pg);
        return 0;
}

static void usage(FILE *f) {
        fprintf(f,
                "Usage: bench-util create-topic --bootstrap B --topic T [--partitions N] "
                "[--warm-idempotence]\n"
                "       bench-util warm-broker --bootstrap B --topic T [--messages N]\n"
                "       bench-util watermarks --bootstrap B --topic T\n"
                "       bench-util wait-drain [--conninfo STR] [--timeout S] [--interval-ms MS] [--pid PID]\n"
                "                             [--sample-app NAME [--sample-ms MS]]\n");
}

int main(int argc, char **argv) {
        enum {
                O_BOOTSTRAP = 0x100,
                O_TOPIC,
                O_PARTITIONS,
                O_CONNINFO,
                O_TIMEOUT,
                O_INTERVAL,
                O_PID,
                O_SAMPLE_APP,
                O_SAMPLE_MS,
                O_WARM,
                O_MESSAGES
        };
        static const struct option longopts[] = {
                { "bootstrap", required_argument, NULL, O_BOOTSTRAP },
                { "topic", required_argument, NULL, O_TOPIC },
                { "partitions", required_argument, NULL, O_PARTITIONS },
                { "conninfo", required_argument, NULL, O_CONNINFO },
                { "timeout", required_argument, NULL, O_TIMEOUT },
                { "interval-ms", required_argument, NULL, O_INTERVAL },
                { "pid", required_argument, NULL, O_PID },
                { "sample-app", required_argument, NULL, O_SAMPLE_APP },
                { "sample-ms", required_argument, NULL, O_SAMPLE_MS },
                { "warm-idempotence", no_argument, NULL, O_WARM },
                { "messages", required_argument, NULL, O_MESSAGES },
                { "help", no_argument, NULL, 'h' },
                { 0 },
        };
        const char *bootstrap = getenv("KAFKA_BOOTSTRAP"), *topic = NULL, *conninfo = "", *cmd,
                   *sample_app = NULL;
        long partitions = 3, messages = 3000000, timeout_s = 600, interval_ms = 200, pid = 0, sample_ms = 20;
        bool warm = false;
        int c;

        if (argc < 2) {
                usage(stderr);
                return 1;
        }
        cmd = argv[1];
        optind = 2;
        while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
                switch (c) {
                case O_BOOTSTRAP:
                        bootstrap = optarg;
                        break;
                case O_TOPIC:
                        topic = optarg;
                        break;
                case O_PARTITIONS:
                        partitions = parse_long(optarg, "--partitions", 1, 1000);
                        break;
                case O_CONNINFO:
                        conninfo = optarg;
                        break;
                case O_TIMEOUT:
                        timeout_s = parse_long(optarg, "--timeout", 1, 86400);
                        break;
                case O_INTERVAL:
                        interval_ms = parse_long(optarg, "--interval-ms", 1, 60000);
                        break;
                case O_PID:
                        pid = parse_long(optarg, "--pid", 1, 1L << 30);
                        break;
                case O_SAMPLE_APP:
                        sample_app = optarg;
                        break;
                case O_WARM:
                        warm = true;
                        break;
                case O_MESSAGES:
                        messages = parse_long(optarg, "--messages", 1, 1000000000);
                        break;
                case O_SAMPLE_MS:
                        sample_ms = parse_long(optarg, "--sample-ms", 1, 10000);
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 1;
                }
        }
        if (strcmp(cmd, "create-topic") == 0) {
                if (!bootstrap || !*bootstrap || !topic)
                        die("create-topic needs --bootstrap (or KAFKA_BOOTSTRAP) and --topic");
                if (warm) {
                        char side[300];

                        snprintf(side, sizeof(side), "%s-warmup", topic);
                        create_topic(bootstrap, side, 1);
                        warm_idempotence(bootstrap, side);
                }
                return create_topic(bootstrap, topic, (int)partitions);
        }
        if (strcmp(cmd, "warm-broker") == 0) {
                if (!bootstrap || !*bootstrap || !topic)
                        die("warm-broker needs --bootstrap (or KAFKA_BOOTSTRAP) and --topic");
                return warm_broker(bootstrap, topic, messages);
        }
        if (strcmp(cmd, "watermarks") == 0) {
                if (!bootstrap || !*bootstrap || !topic)
                        die("watermarks needs --bootstrap (or KAFKA_BOOTSTRAP) and --topic");
                return watermarks(bootstrap, topic);
        }
        if (strcmp(cmd, "wait-drain") == 0) {
                if (sample_app && interval_ms % sample_ms != 0)
                        die("--interval-ms must be a multiple of --sample-ms");
                return wait_drain(conninfo, timeout_s, interval_ms, (pid_t)pid, sample_app, sample_ms);
        }
        usage(stderr);
        return 1;
}
