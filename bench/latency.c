/* latency.c -- End-to-end latency at a steady insert rate: outbox row committed -> Kafka consumer.
 *
 * One thread consumes the benchmark topic from its current end; the main thread inserts rows
 * through outbox_enqueue() at a steady rate (paced on CLOCK_MONOTONIC), each payload carrying
 * the CLOCK_REALTIME microseconds taken just before its insert. Latency = consume time
 * (CLOCK_REALTIME) - insert time. Every inserted row must arrive: missing rows are reported and
 * make the exit status 2. Results go to stdout as key=value lines, a summary to stderr.
 *
 * Both clocks are read on this host, so no clock synchronisation is involved. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#define PAYLOAD_TAG "outbox-bench-latency"
#define PAYLOAD_BYTES "200" /* SQL literal: the payload length, as in the bulk rows */

struct options {
        const char *conninfo;
        const char *bootstrap;
        const char *topic;
        int seconds;
        int rate; /* rows per second */
        int per_tx; /* rows per insert transaction */
        int grace; /* seconds to wait for the last rows after the inserts end */
        int keys; /* distinct keys */
        const char *trace; /* file for one line per row, or NULL */
};

/* Shared between the inserter (main thread) and the consumer thread. The arrays are indexed by
 * row sequence number; each is written by one thread only and read by main after the join. */
struct state {
        size_t capacity;
        int64_t *latency_us; /* consumer: first arrival's latency, INT64_MIN = not seen */
        _Atomic int64_t received; /* distinct sequence numbers seen */
        _Atomic int64_t duplicates; /* arrivals of an already seen sequence number */
        _Atomic int64_t foreign; /* messages that are not ours (should stay 0) */
        _Atomic int64_t errors; /* consumer errors */
        atomic_bool stop;
        atomic_bool polling; /* the consumer thread entered its loop */
        rd_kafka_t *rk;
};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig) {
        (void)sig;
        interrupted = 1;
}

static int64_t clock_us(clockid_t id) {
        struct timespec ts;

        clock_gettime(id, &ts);
        return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
        va_list ap;

        fprintf(stderr, "latency: ");
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        exit(1);
}

static int parse_int(const char *s, const char *what, int min, int max) {
        char *end;
        long v;

        errno = 0;
        v = strtol(s, &end, 10);
        if (errno || end == s || *end || v < min || v > max)
                die("%s must be an integer in %d..%d (got '%s')", what, min, max, s);
        return (int)v;
}

/* "outbox-bench-latency seq=N t=US ...": returns false for anything else. */
static bool parse_payload(const void *p, size_t len, uint64_t *seq, int64_t *t_us) {
        char buf[96];
        unsigned long long s;
        long long t;

        if (!p || len < sizeof(PAYLOAD_TAG))
                return false;
        if (len >= sizeof(buf))
                len = sizeof(buf) - 1;
        memcpy(buf, p, len);
        buf[len] = 0;
        if (sscanf(buf, PAYLOAD_TAG " seq=%llu t=%lld ", &s, &t) != 2)
                return false;
        *seq = s;
        *t_us = t;
        return true;
}

static void *consume(void *arg) {
        struct state *st = arg;

        atomic_store(&st->polling, true);
        while (!atomic_load(&st->stop)) {
                rd_kafka_message_t *m = rd_kafka_consumer_poll(st->rk, 100);
                int64_t now = clock_us(CLOCK_REALTIME);
                uint64_t seq;
                int64_t t;

                if (!m)
                        continue;
                if (m->err) {
                        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                                atomic_fetch_add(&st->errors, 1);
                                fprintf(stderr, "latency: consumer: %s\n", rd_kafka_message_errstr(m));
                        }
                } else if (!parse_payload(m->payload, m->len, &seq, &t) || seq >= st->capacity) {
                        atomic_fetch_add(&st->foreign, 1);
                } else if (st->latency_us[seq] != INT64_MIN) {
                        atomic_fetch_add(&st->duplicates, 1);
                } else {
                        st->latency_us[seq] = now - t;
                        atomic_fetch_add(&st->received, 1);
                }
                rd_kafka_message_destroy(m);
        }
        return NULL;
}

/* Consumer assigned to every partition of the topic at its current end. The end offsets are
 * resolved here, before the first insert (what OFFSET_END would resolve lazily, later), so no
 * row produced after this returns can slip in between "end" and the fetch start. */
static rd_kafka_t *consumer_open(const struct options *o) {
        char err[512], group[64];
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_topic_partition_list_t *parts;
        rd_kafka_topic_t *rkt;
        rd_kafka_t *rk;
        int64_t deadline = clock_us(CLOCK_MONOTONIC) + 30 * 1000000LL;
        const char *settings[][2] = {
                { "bootstrap.servers", o->bootstrap },
                { "group.id", group }, /* required by the consumer API; nothing is committed */
                { "enable.auto.commit", "false" },
                { "enable.auto.offset.store", "false" },
                { "enable.partition.eof", "false" },
                { "fetch.wait.max.ms", "100" },
                { "fetch.error.backoff.ms", "50" },
        };

        snprintf(group, sizeof(group), "outbox-bench-latency-%ld", (long)getpid());
        for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++)
                if (rd_kafka_conf_set(conf, settings[i][0], settings[i][1], err, sizeof(err)) !=
                    RD_KAFKA_CONF_OK)
                        die("consumer: %s", err);
        rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
        if (!rk)
                die("consumer: %s", err);
        rd_kafka_poll_set_consumer(rk);

        rkt = rd_kafka_topic_new(rk, o->topic, NULL);
        for (;;) {
                rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, 2000);

                if (e == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1 &&
                    md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR && md->topics[0].partition_cnt > 0)
                        break;
                if (clock_us(CLOCK_MONOTONIC) >= deadline)
                        die("no metadata for topic '%s' within 30s (%s)", o->topic,
                            e                       ? rd_kafka_err2str(e)
                                    : md->topic_cnt ? rd_kafka_err2str(md->topics[0].err)
                                                    : "no topic");
                if (md)
                        rd_kafka_metadata_destroy(md);
                md = NULL;
                nanosleep(&(struct timespec){ .tv_nsec = 200000000 }, NULL);
        }
        parts = rd_kafka_topic_partition_list_new(md->topics[0].partition_cnt);
        for (int i = 0; i < md->topics[0].partition_cnt; i++) {
                int32_t p = md->topics[0].partitions[i].id;
                int64_t lo, hi;
                rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(rk, o->topic, p, &lo, &hi, 10000);

                if (e)
                        die("end offset of %s[%d]: %s", o->topic, p, rd_kafka_err2str(e));
                rd_kafka_topic_partition_list_add(parts, o->topic, p)->offset = hi;
                fprintf(stderr, "latency: %s[%" PRId32 "] from offset %" PRId64 "\n", o->topic, p, hi);
        }
        rd_kafka_metadata_destroy(md);
        rd_kafka_topic_destroy(rkt);
        if (rd_kafka_assign(rk, parts))
                die("assigning the partitions failed");
        rd_kafka_topic_partition_list_destroy(parts);
        return rk;
}

static int cmp_i64(const void *a, const void *b) {
        int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

        return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted array. */
static int64_t percentile(const int64_t *v, size_t n, double p) {
        size_t rank = (size_t)((p / 100.0) * (double)n + 0.999999999);

        if (rank < 1)
                rank = 1;
        if (rank > n)
                rank = n;
        return v[rank - 1];
}

static void usage(FILE *f) {
        fprintf(f,
                "Usage: latency [OPTIONS]\n"
                "Inserts outbox rows at a steady rate and measures how long each takes to reach Kafka.\n\n"
                "  --conninfo STR   libpq connection string (default: PG* environment)\n"
                "  --bootstrap B    Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP)\n"
                "  --topic NAME     topic the rows go to and the consumer reads (default outbox-bench)\n"
                "  --seconds N      how long to insert (default 30)\n"
                "  --rate N         rows per second (default 1000)\n"
                "  --per-tx N       rows per insert transaction (default 10)\n"
                "  --keys N         distinct keys (default 10000)\n"
                "  --grace N        seconds to wait for the last rows to arrive (default 30)\n"
                "  --trace FILE     write one line per row: sequence number, when its insert began (ms\n"
                "                   from the first insert), how long its insert took (ms), its latency\n"
                "                   (ms, -1 if it never arrived)\n\n"
                "Exit status: 0 every row arrived, 2 rows missing, 1 error.\n");
}

int main(int argc, char **argv) {
        enum {
                O_CONNINFO = 0x100,
                O_BOOTSTRAP,
                O_TOPIC,
                O_SECONDS,
                O_RATE,
                O_PERTX,
                O_KEYS,
                O_GRACE,
                O_TRACE
        };
        static const struct option longopts[] = {
                { "conninfo", required_argument, NULL, O_CONNINFO },
                { "bootstrap", required_argument, NULL, O_BOOTSTRAP },
                { "topic", required_argument, NULL, O_TOPIC },
                { "seconds", required_argument, NULL, O_SECONDS },
                { "rate", required_argument, NULL, O_RATE },
                { "per-tx", required_argument, NULL, O_PERTX },
                { "keys", required_argument, NULL, O_KEYS },
                { "grace", required_argument, NULL, O_GRACE },
                { "trace", required_argument, NULL, O_TRACE },
                { "help", no_argument, NULL, 'h' },
                { 0 },
        };
        struct options o = {
                .conninfo = "",
                .bootstrap = getenv("KAFKA_BOOTSTRAP"),
                .topic = "outbox-bench",
                .seconds = 30,
                .rate = 1000,
                .per_tx = 10,
                .grace = 30,
                .keys = 10000,
        };
        struct state st = { 0 };
        pthread_t thread;
        PGconn *pg;
        size_t n_tx, n_rows, n_lat = 0;
        int64_t *lat, *began = NULL, *took = NULL, t0, t_end, late = 0, max_behind = 0, inserted = 0,
                      wait_until;
        int64_t interval_ns;
        char topic_p[256], first_p[24], insert_p[24], n_p[16], keys_p[16];
        const char *params[5] = { topic_p, first_p, insert_p, n_p, keys_p };
        int c, status = 0;

        while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
                switch (c) {
                case O_CONNINFO:
                        o.conninfo = optarg;
                        break;
                case O_BOOTSTRAP:
                        o.bootstrap = optarg;
                        break;
                case O_TOPIC:
                        o.topic = optarg;
                        break;
                case O_SECONDS:
                        o.seconds = parse_int(optarg, "--seconds", 1, 3600);
                        break;
                case O_RATE:
                        o.rate = parse_int(optarg, "--rate", 1, 1000000);
                        break;
                case O_PERTX:
                        o.per_tx = parse_int(optarg, "--per-tx", 1, 10000);
                        break;
                case O_KEYS:
                        o.keys = parse_int(optarg, "--keys", 1, INT_MAX);
                        break;
                case O_GRACE:
                        o.grace = parse_int(optarg, "--grace", 1, 3600);
                        break;
                case O_TRACE:
                        o.trace = optarg;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 1;
                }
        }
        if (!o.bootstrap || !*o.bootstrap)
                die("no Kafka bootstrap servers (--bootstrap or KAFKA_BOOTSTRAP)");
        if (strlen(o.topic) >= sizeof(topic_p))
                die("topic name too long");
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);

        n_tx = (size_t)o.seconds * (size_t)o.rate / (size_t)o.per_tx;
        if (n_tx == 0)
                die("--seconds x --rate must be at least --per-tx");
        n_rows = n_tx * (size_t)o.per_tx;
        interval_ns = (int64_t)o.per_tx * 1000000000LL / o.rate;

        st.capacity = n_rows;
        st.latency_us = malloc(n_rows * sizeof(*st.latency_us));
        lat = malloc(n_rows * sizeof(*lat));
        began = malloc(n_tx * sizeof(*began));
        took = malloc(n_tx * sizeof(*took));
        if (!st.latency_us || !lat || !began || !took)
                die("out of memory");
        for (size_t i = 0; i < n_rows; i++)
                st.latency_us[i] = INT64_MIN;

        pg = PQconnectdb(o.conninfo);
        if (PQstatus(pg) != CONNECTION_OK)
                die("connecting to PostgreSQL: %s", PQerrorMessage(pg));
        /* One statement = one transaction of per_tx rows, each through outbox_enqueue(text),
         * 200-byte payloads, the same three headers as the bulk rows, keys spread like theirs. */
        {
                PGresult *res =
                        PQprepare(pg, "enqueue",
                                  "SELECT count(outbox_enqueue($1::text, 'key-' || (s % $5::int8),"
                                  " rpad(format('" PAYLOAD_TAG " seq=%s t=%s ', s, $3::int8), "
                                  "      " PAYLOAD_BYTES ", '.'),"
                                  " jsonb_build_object('trace-id', md5(s::text), 'source', 'outbox-bench',"
                                  "                    'type', 'order.created')))"
                                  " FROM generate_series($2::int8, $2::int8 + $4::int8 - 1) s",
                                  5, NULL);

                if (PQresultStatus(res) != PGRES_COMMAND_OK)
                        die("preparing the insert: %s", PQresultErrorMessage(res));
                PQclear(res);
        }

        st.rk = consumer_open(&o);
        if (pthread_create(&thread, NULL, consume, &st) != 0)
                die("cannot start the consumer thread");
        while (!atomic_load(&st.polling))
                nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
        /* Let the fetcher start on the assigned offsets before the clock runs. */
        nanosleep(&(struct timespec){ .tv_sec = 1 }, NULL);

        snprintf(topic_p, sizeof(topic_p), "%s", o.topic);
        snprintf(n_p, sizeof(n_p), "%d", o.per_tx);
        snprintf(keys_p, sizeof(keys_p), "%d", o.keys);
        fprintf(stderr, "latency: inserting %zu rows in %zu transactions of %d over %ds (%d rows/s)\n",
                n_rows, n_tx, o.per_tx, o.seconds, o.rate);
        t0 = clock_us(CLOCK_MONOTONIC) * 1000 + 10000000; /* ns, 10 ms from now */
        for (size_t i = 0; i < n_tx && !interrupted; i++) {
                int64_t target_ns = t0 + (int64_t)i * interval_ns, now_ns, behind;
                struct timespec ts = { .tv_sec = target_ns / 1000000000, .tv_nsec = target_ns % 1000000000 };
                PGresult *res;

                while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR && !interrupted)
                        ;
                now_ns = clock_us(CLOCK_MONOTONIC) * 1000;
                behind = now_ns - target_ns;
                if (behind > max_behind)
                        max_behind = behind;
                if (behind > interval_ns)
                        late++;
                snprintf(first_p, sizeof(first_p), "%zu", i * (size_t)o.per_tx);
                snprintf(insert_p, sizeof(insert_p), "%" PRId64, clock_us(CLOCK_REALTIME));
                res = PQexecPrepared(pg, "enqueue", 5, params, NULL, NULL, 0);
                if (PQresultStatus(res) != PGRES_TUPLES_OK)
                        die("insert %zu failed: %s", i, PQresultErrorMessage(res));
                PQclear(res);
                began[i] = now_ns / 1000 - t0 / 1000;
                took[i] = clock_us(CLOCK_MONOTONIC) - now_ns / 1000;
                inserted += o.per_tx;
        }
        t_end = clock_us(CLOCK_MONOTONIC);
        fprintf(stderr, "latency: inserted %" PRId64 " rows in %.3fs; waiting up to %ds for the last\n",
                inserted, (double)(t_end - t0 / 1000) / 1e6, o.grace);

        wait_until = t_end + (int64_t)o.grace * 1000000;
        while (atomic_load(&st.received) < inserted && clock_us(CLOCK_MONOTONIC) < wait_until && !interrupted)
                nanosleep(&(struct timespec){ .tv_nsec = 20000000 }, NULL);
        /* A short look for duplicates arriving after the last row. */
        nanosleep(&(struct timespec){ .tv_nsec = 500000000 }, NULL);
        atomic_store(&st.stop, true);
        pthread_join(thread, NULL);
        rd_kafka_consumer_close(st.rk);
        rd_kafka_destroy(st.rk);
        PQfinish(pg);

        if (o.trace) {
                FILE *f = fopen(o.trace, "w");

                if (!f)
                        die("cannot write %s: %s", o.trace, strerror(errno));
                fprintf(f, "seq began_ms insert_ms latency_ms\n");
                for (size_t i = 0; i < (size_t)inserted; i++) {
                        size_t tx = i / (size_t)o.per_tx;

                        fprintf(f, "%zu %.3f %.3f %.3f\n", i, (double)began[tx] / 1e3, (double)took[tx] / 1e3,
                                st.latency_us[i] == INT64_MIN ? -1.0 : (double)st.latency_us[i] / 1e3);
                }
                if (fclose(f) != 0)
                        die("cannot write %s: %s", o.trace, strerror(errno));
        }
        for (size_t i = 0; i < (size_t)inserted; i++)
                if (st.latency_us[i] != INT64_MIN)
                        lat[n_lat++] = st.latency_us[i];
        qsort(lat, n_lat, sizeof(*lat), cmp_i64);

        printf("inserted=%" PRId64 "\n", inserted);
        printf("insert_seconds=%.3f\n", (double)(t_end - t0 / 1000) / 1e6);
        printf("rows_per_tx=%d\n", o.per_tx);
        printf("late_tx=%" PRId64 "\n", late);
        printf("max_behind_ms=%.3f\n", (double)max_behind / 1e6);
        printf("received=%zu\n", n_lat);
        printf("missing=%" PRId64 "\n", inserted - (int64_t)n_lat);
        printf("duplicates=%" PRId64 "\n", atomic_load(&st.duplicates));
        printf("foreign=%" PRId64 "\n", atomic_load(&st.foreign));
        printf("consumer_errors=%" PRId64 "\n", atomic_load(&st.errors));
        if (n_lat) {
                double sum = 0;

                for (size_t i = 0; i < n_lat; i++)
                        sum += (double)lat[i];
                printf("min_ms=%.3f\n", (double)lat[0] / 1e3);
                printf("mean_ms=%.3f\n", sum / (double)n_lat / 1e3);
                printf("p50_ms=%.3f\n", (double)percentile(lat, n_lat, 50) / 1e3);
                printf("p90_ms=%.3f\n", (double)percentile(lat, n_lat, 90) / 1e3);
                printf("p99_ms=%.3f\n", (double)percentile(lat, n_lat, 99) / 1e3);
                printf("p999_ms=%.3f\n", (double)percentile(lat, n_lat, 99.9) / 1e3);
                printf("max_ms=%.3f\n", (double)lat[n_lat - 1] / 1e3);
        }
        /* The insert's own time is in every latency above: a slow commit is not the relay's. */
        if (inserted > 0) {
                size_t n = (size_t)inserted / (size_t)o.per_tx;

                qsort(took, n, sizeof(*took), cmp_i64);
                printf("insert_p50_ms=%.3f\n", (double)percentile(took, n, 50) / 1e3);
                printf("insert_p99_ms=%.3f\n", (double)percentile(took, n, 99) / 1e3);
                printf("insert_p999_ms=%.3f\n", (double)percentile(took, n, 99.9) / 1e3);
                printf("insert_max_ms=%.3f\n", (double)took[n - 1] / 1e3);
        }
        free(began);
        free(took);
        fflush(stdout);
        if (inserted - (int64_t)n_lat > 0) {
                fprintf(stderr, "latency: %" PRId64 " of %" PRId64 " rows did not arrive within %ds\n",
                        inserted - (int64_t)n_lat, inserted, o.grace);
                status = 2;
        }
        if (interrupted)
                status = 1;
        free(lat);
        free(st.latency_us);
        return status;
}
