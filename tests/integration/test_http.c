/* test_http.c -- /health, /ready and /metrics of the running relay, asked with a real HTTP client, across outages, SIGTERM and abuse. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "support.h"

#define READY_OK "{\"ready\":true,\"database\":\"ok\",\"kafka\":\"ok\",\"stopping\":false}"

/* Every committed row of `topic` arrived as written, in key order, and at most `max_dup` twice
 * (duplicates only after a fault: a broker that went away with messages in flight). */
static void verify_all(PGconn *c, const char *topic, size_t rows, size_t max_dup) {
        const char *topics[] = { topic, NULL };
        struct ts_msgs m;
        struct ts_verify v;

        ts_consume(topics, rows, 120000, 1000, &m);
        ts_verify(c, topics, &m, false, &v);
        ts_verify_assert(&v, rows, max_dup);
        ts_msgs_free(&m);
}

/* promtool (Debian's prometheus package) accepts the text: exit 0, nothing said. */
static void promtool_accepts(const char *text) {
        char path[] = "/tmp/outbox-relay-metrics-XXXXXX", cmd[128], out[512] = "";
        int fd = mkstemp(path), rc;
        FILE *p;
        size_t n;

        assert_true(fd >= 0);
        assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
        close(fd);
        snprintf(cmd, sizeof(cmd), "promtool check metrics < %s 2>&1", path);
        p = popen(cmd, "r");
        assert_non_null(p);
        n = fread(out, 1, sizeof(out) - 1, p);
        out[n] = 0;
        rc = pclose(p);
        unlink(path);
        if (rc != 0 || n > 0)
                fail_msg("promtool check metrics (exit %d): %s\n%s", rc, out, text);
}

static char *get_metrics(const char *addr) {
        char *body = NULL;

        assert_int_equal(ts_http(addr, "GET", "/metrics", &body), 200);
        return body;
}

/* Waits until the series has the value (the lag and pending figures are read every 2 s). */
static void wait_metric(const char *addr, const char *series, double want, int timeout_ms) {
        int64_t until = ts_now_ms() + timeout_ms;

        for (;;) {
                char *m = get_metrics(addr);
                double v = ts_metric(m, series);

                free(m);
                if (v == want)
                        return;
                if (ts_now_ms() > until)
                        fail_msg("%s: %g after %d ms, expected %g", series, v, timeout_ms, want);
                usleep(100000);
        }
}

/* Waits until the series is at least `want` (the lag grows while nothing can be published). */
static void wait_metric_at_least(const char *addr, const char *series, double want, int timeout_ms) {
        int64_t until = ts_now_ms() + timeout_ms;

        for (;;) {
                char *m = get_metrics(addr);
                double v = ts_metric(m, series);

                free(m);
                if (v >= want)
                        return;
                if (ts_now_ms() > until)
                        fail_msg("%s: %g after %d ms, expected at least %g", series, v, timeout_ms, want);
                usleep(100000);
        }
}

static void insert_rows(PGconn *c, const char *topic, int from, int n) {
        ts_pg_exec(c,
                   "INSERT INTO outbox (topic, key, payload, headers) SELECT '%s', 'k' || (g %% 7), "
                   "convert_to('event ' || g, 'UTF8'), jsonb_build_object('n', g::text) FROM "
                   "generate_series(%d, %d) g",
                   topic, from, from + n - 1);
}

/* Start, PostgreSQL stopped and started, Kafka stopped (breaker open) and started, SIGTERM of a
 * relay whose batch waits on Kafka: the codes and bodies a load balancer and an operator see, and
 * /metrics agreeing with what reached Kafka. */
static void probes_follow_the_relay(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("http");
        struct ts_relay a, b;
        struct ts_relay_opts oa = { .relay_group = "poll_interval = \"1s\"; status_interval = \"1s\";",
                                    .kafka_extra = "message_timeout_ms = 2000;",
                                    .extra_groups =
                                            "breaker = { failure_threshold = 1; cooldown = \"3s\"; };\n"
                                            "retry = { base = \"100ms\"; cap = \"1s\"; };\n" };
        struct ts_relay_opts ob = { .relay_group = "poll_interval = \"1s\"; drain_timeout = \"4s\";",
                                    .kafka_extra = "message_timeout_ms = 30000;" };
        char series[300], *m, *body = NULL;
        const char *addr, *baddr;
        int64_t t0, exited_ms;
        int status;

        (void)state;
        ts_pg_install_copy(c);
        ts_relay_start_opts(&a, &oa);
        addr = ts_relay_http(&a, 10000);
        /* alive at once; ready once connected */
        ts_http_wait(addr, "/health", 200, "\"alive\":true", 5000);
        ts_http_wait(addr, "/ready", 200, READY_OK, 20000);
        assert_int_equal(ts_http(addr, "HEAD", "/ready", NULL), 200);
        assert_int_equal(ts_http(addr, "POST", "/ready", NULL), 405);
        assert_int_equal(ts_http(addr, "DELETE", "/metrics", NULL), 405);
        assert_int_equal(ts_http(addr, "GET", "/", NULL), 404);
        assert_int_equal(ts_http(addr, "GET", "/metrics/x", NULL), 404);

        insert_rows(c, topic, 1, 300);
        verify_all(c, topic, 300, 0);
        /* published_total says what the consumer verified; the lag falls to 0 */
        snprintf(series, sizeof(series), "outbox_relay_events_published_total{topic=\"%s\"}", topic);
        wait_metric(addr, series, 300, 10000);
        wait_metric(addr, "outbox_relay_pending_rows", 0, 10000);
        wait_metric(addr, "outbox_relay_oldest_pending_age_seconds", 0, 10000);
        m = get_metrics(addr);
        promtool_accepts(m);
        assert_true(ts_metric(m, "outbox_relay_kafka_delivery_seconds_count") >= 300);
        assert_true(ts_metric(m, "outbox_relay_end_to_end_seconds_count") >= 300);
        assert_true(ts_metric(m, "outbox_relay_batches_total") >= 1);
        assert_true(ts_metric(m, "outbox_relay_breaker_state") == 0);
        assert_true(ts_metric(m, "outbox_relay_database_connected") == 1);
        free(m);

        /* PostgreSQL stopped: not ready, still alive */
        ts_testbed("pg-stop");
        ts_http_wait(addr, "/ready", 503, "\"database\":\"not connected\"", 20000);
        ts_http_wait(addr, "/health", 200, "\"alive\":true", 1000);
        /* the lag cannot be read: absent, not the last value */
        m = get_metrics(addr);
        assert_true(ts_metric(m, "outbox_relay_oldest_pending_age_seconds") == -1);
        assert_true(ts_metric(m, "outbox_relay_pending_rows") == -1);
        assert_true(ts_metric(m, "outbox_relay_database_connected") == 0);
        promtool_accepts(m);
        free(m);
        ts_testbed("pg-start");
        PQfinish(c);
        c = ts_pg_connect();
        ts_http_wait(addr, "/ready", 200, READY_OK, 30000);
        m = get_metrics(addr);
        assert_true(ts_metric(m, "outbox_relay_database_reconnects_total") >= 1);
        free(m);

        /* Kafka stopped with rows to send: the breaker opens, not ready, still alive */
        ts_testbed("kafka-stop");
        insert_rows(c, topic, 301, 100);
        ts_http_wait(addr, "/ready", 503, "\"kafka\":\"breaker open\"", 30000);
        ts_http_wait(addr, "/health", 200, "\"alive\":true", 1000);
        /* nothing goes out, and the lag says so: read while the breaker is open, growing */
        wait_metric_at_least(addr, "outbox_relay_oldest_pending_age_seconds", 3, 15000);
        m = get_metrics(addr);
        assert_true(ts_metric(m, "outbox_relay_pending_rows") == 100);
        assert_true(ts_metric(m, "outbox_relay_breaker_transitions_total{to=\"open\"}") >= 1);
        promtool_accepts(m);
        free(m);

        /* A second relay claims while the first one's breaker is open, and waits on Kafka. SIGTERM:
         * /ready says 503 as soon as the relay has the signal, /health 200 until the process is
         * gone. kill() only marks the signal pending: the HTTP threads block signals, and one of
         * them may answer a request before the main thread runs the handler (a CI run saw 200
         * for the first request), so the first 503 may take a moment, at most a second. */
        ts_relay_start_opts(&b, &ob);
        baddr = ts_relay_http(&b, 10000);
        ts_http_wait(baddr, "/ready", 200, READY_OK, 20000);
        sleep(3); /* it claimed at once, and its batch waits on the dead broker */
        kill(b.pid, SIGTERM);
        t0 = ts_now_ms();
        for (;;) {
                long code = ts_http(baddr, "GET", "/ready", &body);

                if (code == 503)
                        break;
                assert_int_equal(code, 200); /* not yet handled: still ready */
                free(body);
                if (ts_now_ms() - t0 > 1000)
                        fail_msg("/ready still 200 a second after SIGTERM");
                usleep(10000);
        }
        assert_non_null(strstr(body, "\"stopping\":true"));
        free(body);
        fprintf(stderr, "/ready 503 %lld ms after SIGTERM\n", (long long)(ts_now_ms() - t0));
        for (;;) {
                siginfo_t si = { 0 };
                long code;

                /* WNOWAIT: seen exited, left for ts_relay_stop to reap (and forget) */
                if (waitid(P_PID, (id_t)b.pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == b.pid)
                        break;
                code = ts_http(baddr, "GET", "/health", NULL);
                /* 0: the listener closed in the instant before the exit */
                if (code != 200 && code != 0)
                        fail_msg("/health said %ld during the drain", code);
                if (ts_now_ms() - t0 > 20000)
                        fail_msg("the relay did not exit within 20 s of SIGTERM");
                usleep(100000);
        }
        exited_ms = ts_now_ms() - t0;
        status = ts_relay_stop(&b, 0, 1000);
        fprintf(stderr, "exit %d, %lld ms after SIGTERM\n", status, (long long)exited_ms);
        assert_int_equal(status, 0);
        /* the drain took its time (the batch waited on Kafka), and /ready was 503 from the start */
        assert_true(exited_ms >= 2000);

        /* Kafka back: ready again, every row arrived once, and the counter says so */
        ts_testbed("kafka-start");
        ts_http_wait(addr, "/ready", 200, READY_OK, 60000);
        assert_true(ts_wait_drained(c, (const char *[]){ topic, NULL }, 60000));
        verify_all(c, topic, 400, 100); /* the broker stopped with 100 rows to send */
        wait_metric(addr, series, 400, 10000);
        wait_metric(addr, "outbox_relay_pending_rows", 0, 10000);
        m = get_metrics(addr);
        assert_true(ts_metric(m, "outbox_relay_breaker_transitions_total{to=\"closed\"}") >= 1);
        promtool_accepts(m);
        free(m);
        assert_int_equal(ts_relay_stop(&a, SIGTERM, 20000), 0);
        PQfinish(c);
        free(topic);
}

static long rss_kib(pid_t pid) {
        char path[64], line[256];
        long kib = -1;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        f = fopen(path, "r");
        assert_non_null(f);
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
                        break;
        fclose(f);
        return kib;
}

static int dial(const char *addr) {
        struct sockaddr_in sa = { .sin_family = AF_INET };
        char host[64];
        const char *colon = strrchr(addr, ':');
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        assert_true(fd >= 0 && colon);
        snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
        inet_pton(AF_INET, host, &sa.sin_addr);
        sa.sin_port = htons((uint16_t)atoi(colon + 1));
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

/* Sends `req` (a whole request: it ends in an empty line) and reads whatever comes back until the
 * server closes or 2 s pass. A request cut short is the slow clients' part below: the listener
 * keeps such a connection until its timeout, whatever the client does. */
static void abuse_once(const char *addr, const char *req, size_t len) {
        struct pollfd p;
        char buf[4096];
        int fd = dial(addr);

        if (fd < 0)
                return; /* refused past the connection limit: fine */
        p = (struct pollfd){ .fd = fd, .events = POLLIN };
        (void)!send(fd, req, len, MSG_NOSIGNAL);
        shutdown(fd, SHUT_WR);
        while (poll(&p, 1, 2000) > 0 && recv(fd, buf, sizeof(buf), 0) > 0)
                ;
        close(fd);
}

/* 10,000 malformed or oversized requests, slow clients holding every connection, and more
 * connections than the limit, while a writer inserts at a steady rate: the relay keeps up with
 * the writer, its memory stays flat, the listener answers again once the slow clients are timed
 * out, and every row arrives. */
static void bad_requests_do_no_harm(void **state) {
        PGconn *c = ts_pg_connect();
        char *topic = ts_topic("http-abuse");
        struct ts_relay r;
        struct ts_relay_opts o = { .relay_group = "poll_interval = \"1s\"; status_interval = \"1s\";",
                                   .extra_groups = "http = { listen = \"127.0.0.1:0\"; connection_limit = 8; "
                                                   "timeout = \"2s\"; };\n" };
        static char big[70000];
        const char *reqs[] = {
                "GARBAGE\r\n\r\n",
                "GET /metrics HTTP/9.9\r\n\r\n",
                "GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
                "POST /ready HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
                "GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                "\x16\x03\x01\x02\x01\xfc\r\n\r\n", /* binary bytes where a request line belongs */
                "GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
                big, /* a 64 KiB header */
        };
        struct ts_load *l;
        int slow[16], n_slow = 0, rows = 30000;
        long rss_before, rss_after;
        int64_t t0;
        char series[300], *m;

        (void)state;
        memcpy(big, "GET /metrics HTTP/1.1\r\nX-Big: ", 30);
        memset(big + 30, 'a', sizeof(big) - 35);
        memcpy(big + sizeof(big) - 5, "\r\n\r\n", 5);
        ts_pg_install_copy(c);
        ts_relay_start_opts(&r, &o);
        const char *addr = ts_relay_http(&r, 10000);
        ts_http_wait(addr, "/ready", 200, READY_OK, 20000);
        l = ts_load_start(topic, rows, 2000, 100);
        ts_load_wait(l, 4000, 20000);
        rss_before = rss_kib(r.pid);

        t0 = ts_now_ms();
        for (int i = 0; i < 10000; i++) {
                const char *q = reqs[i % (sizeof(reqs) / sizeof(reqs[0]))];

                abuse_once(addr, q, q == big ? sizeof(big) - 1 : strlen(q));
        }
        fprintf(stderr, "10000 bad requests in %lld ms\n", (long long)(ts_now_ms() - t0));
        /* slow clients: every slot and more, each sending half a request (or the start of a TLS
         * hello, as a client speaking https would) and nothing more */
        for (int i = 0; i < 12; i++) {
                int fd = dial(addr);

                if (fd >= 0) {
                        if (i % 2)
                                (void)!send(fd, "GET /health HTTP/1.1\r\nHo", 24, MSG_NOSIGNAL);
                        else
                                (void)!send(fd, "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11,
                                            MSG_NOSIGNAL);
                        slow[n_slow++] = fd;
                }
        }
        /* the timeout frees the slots: answered again within it and a bit */
        ts_http_wait(addr, "/health", 200, "\"alive\":true", 6000);
        for (int i = 0; i < n_slow; i++)
                close(slow[i]);
        /* the relay kept pace with the writer the whole time: what is pending is seconds old */
        m = get_metrics(addr);
        fprintf(stderr, "lag %.3f s, %d rows written so far\n",
                ts_metric(m, "outbox_relay_oldest_pending_age_seconds"), ts_load_written(l));
        assert_true(ts_metric(m, "outbox_relay_oldest_pending_age_seconds") < 5);
        free(m);
        assert_int_equal(ts_load_finish(l), rows);
        assert_true(ts_wait_drained(c, (const char *[]){ topic, NULL }, 30000));
        rss_after = rss_kib(r.pid);
        fprintf(stderr, "RSS %ld KiB before the abuse, %ld KiB after\n", rss_before, rss_after);
#ifdef __SANITIZE_ADDRESS__
        /* AddressSanitizer keeps freed memory in quarantine (up to 256 MiB): RSS says nothing
         * about leaks there, LeakSanitizer does (the relay exits non-zero on one). The plain run
         * holds the bound. */
        (void)rss_before;
#else
        assert_true(rss_after - rss_before < 4096);
#endif
        verify_all(c, topic, (size_t)rows, 0);
        snprintf(series, sizeof(series), "outbox_relay_events_published_total{topic=\"%s\"}", topic);
        wait_metric(addr, series, rows, 10000);
        assert_int_equal(ts_relay_stop(&r, SIGTERM, 20000), 0);
        PQfinish(c);
        free(topic);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(probes_follow_the_relay, ts_teardown),
                cmocka_unit_test_teardown(bad_requests_do_no_harm, ts_teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
