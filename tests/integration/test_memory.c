/* test_memory.c -- A relay under a long load keeps its memory flat: its RSS sampled from 10,000 to 1,000,000 published events stays within a few MiB, and every row is published once. */
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

#define ROWS 1000000
#define CHUNK 50000 /* rows per INSERT: the load comes while the relay drains */
/* Events published when the first sample counts. At 10,000, the end of a first backlog of
 * 10,000 rows, the relay had not yet grown to its steady size: a CI run sampled 15660 KiB there,
 * then 18036 KiB at most up to 100,000 and a peak of 21992 later (6332 over the first sample)
 * while the end was 176 KiB over the steady samples. By 50,000 it has drained full batches of a
 * 50,000-row backlog for a while. */
#define BASELINE_AT 50000
#define MAX_GROWTH_KIB (6 * 1024) /* "flat": what the RSS may grow past the first sample */
/* Past the warm-up (the first batches are not yet full, librdkafka's buffers still growing) the
 * RSS still steps up once in a while: when the broker is slow for a moment, more of the batches'
 * messages wait in librdkafka at once, and the allocator keeps the pages it grew. One such step
 * was 3456 KiB in a CI run (peak and end equal, nothing after it), about what two batches of
 * 2000 rows hold in flight. A leak keeps going: ten bytes a row shows here as 8.6 MiB. */
#define STEADY_AT 100000
#define MAX_STEADY_GROWTH_KIB (5 * 1024)
/* The end is compared with the highest sample up to STEADY_AT, not with the one sample there: the
 * allocator also gives pages back now and then, and a CI run sampled 15412 KiB at 100,000 events
 * after 17644 at 10,000, then ended at 21892 (its peak, 4248 over the first sample): a dip, not
 * growth, that broke the bound by 1360 KiB. */

/* The relay's resident set, KiB (VmRSS of /proc/PID/status). */
static long rss_kib(pid_t pid) {
        char path[64], line[256];
        long kib = -1;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        f = fopen(path, "r");
        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
                        break;
        fclose(f);
        return kib;
}

/* Events the relay says it published (its /metrics), -1 without an answer. */
static double published(const char *http, const char *topic) {
        char series[200], *body = NULL;
        double v = -1;

        snprintf(series, sizeof(series), "outbox_relay_events_published_total{topic=\"%s\"}", topic);
        if (ts_http(http, "GET", "/metrics", &body) == 200)
                v = ts_metric(body, series);
        free(body);
        return v;
}

static void rss_stays_flat(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("memory");
        const char *topics[] = { topic, NULL };
        struct ts_relay relay;
        const char *http;
        long base = -1, peak = 0, last = 0, steady = -1;
        double at_base = 0, n = 0;
        int inserted = 0;
        int64_t in_kafka;

        (void)state;
        ts_create_topic(topic, 3, NULL, NULL);
        ts_relay_start(&relay, "poll_interval = \"1s\";", NULL);
        assert_true(ts_relay_log_wait(&relay, "ready", 20000));
        http = ts_relay_http(&relay, 10000);
        while (inserted < ROWS || n < ROWS) {
                if (inserted < ROWS &&
                    ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s'", topic) < 2 * CHUNK) {
                        /* a first chunk of BASELINE_AT rows, so the first sample comes near it */
                        int chunk =
                                inserted ? (ROWS - inserted < CHUNK ? ROWS - inserted : CHUNK) : BASELINE_AT;

                        /* 200-byte payloads, 10,000 keys, 3 headers, as bench/run.sh writes them */
                        ts_pg_exec(c,
                                   "INSERT INTO outbox (topic, key, payload, headers)"
                                   " SELECT '%s', 'key-' || (g %% 10000),"
                                   " convert_to(rpad('row ' || g || ' ', 200, 'abcdefghij'), 'UTF8'),"
                                   " jsonb_build_object('trace-id', md5(g::text), 'source', 'memory',"
                                   " 'type', 'order.created')"
                                   " FROM generate_series(%d, %d) g",
                                   topic, inserted + 1, inserted + chunk);
                        inserted += chunk;
                }
                usleep(20 * 1000);
                n = published(http, topic);
                last = rss_kib(relay.pid);
                assert_true(last > 0);
                if (base < 0 && n >= BASELINE_AT) {
                        base = last;
                        at_base = n;
                }
                if (base >= 0 && n <= STEADY_AT && last > steady)
                        steady = last;
                if (base >= 0 && last > peak)
                        peak = last;
        }
        fprintf(stderr,
                "memory: RSS %ld KiB at %.0f events published, highest %ld KiB up to %d, "
                "peak %ld KiB up to %.0f, %ld KiB at the end "
                "(peak - first sample %ld KiB, at most %d; "
                "end - the highest sample up to %d %ld KiB, at most %d)\n",
                base, at_base, steady, STEADY_AT, peak, n, last, peak - base, MAX_GROWTH_KIB, STEADY_AT,
                last - steady, MAX_STEADY_GROWTH_KIB);
        assert_true(base > 0 && steady > 0);
        assert_true(peak - base <= MAX_GROWTH_KIB);
        assert_true(last - steady <= MAX_STEADY_GROWTH_KIB);
        assert_true(ts_wait_drained(c, topics, 60000));
        assert_int_equal(ts_relay_stop(&relay, SIGTERM, 30000), 0);
        /* Every row once: the table is empty, the topic holds exactly as many messages, and the
         * relay published each once (its own count and the metrics agree). */
        assert_int_equal(ts_pg_int(c, "SELECT count(*) FROM outbox WHERE topic = '%s'", topic), 0);
        in_kafka = ts_topic_messages(topic);
        fprintf(stderr, "memory: %d rows committed, %lld messages in the topic\n", inserted,
                (long long)in_kafka);
        assert_int_equal(in_kafka, ROWS);
        assert_true(n == ROWS);
        free(topic);
        PQfinish(c);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(rss_stays_flat, ts_teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
