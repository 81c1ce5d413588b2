/* test_http.c -- The HTTP side's rules: routing, the listen address, /health and /ready, the Prometheus text and /proc parsing. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <netinet/in.h>

#include "http.h"
#include "metrics.h"
#include "probe.h"
#include "procstat.h"

#define S USEC_PER_SEC

static void routes(void **state) {
        static const struct {
                const char *method, *path;
                unsigned code;
                enum http_page page;
        } cases[] = {
                { "GET", "/health", 0, HTTP_PAGE_HEALTH },
                { "HEAD", "/health", 0, HTTP_PAGE_HEALTH },
                { "GET", "/ready", 0, HTTP_PAGE_READY },
                { "GET", "/metrics", 0, HTTP_PAGE_METRICS },
                { "GET", "/metrics?name[]=x", 0, HTTP_PAGE_METRICS },
                { "POST", "/metrics", 405, 0 },
                { "PUT", "/ready", 405, 0 },
                { "DELETE", "/health", 405, 0 },
                { "get", "/health", 405, 0 }, /* methods are case-sensitive (RFC 9110) */
                { "GET", "/", 404, 0 },
                { "GET", "/health/", 404, 0 },
                { "GET", "/healthz", 404, 0 },
                { "GET", "/metricsx", 404, 0 },
                { "POST", "/nowhere", 404, 0 },
                { "GET", "", 404, 0 },
        };

        (void)state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                enum http_page page = (enum http_page)99;
                unsigned code = http_route(cases[i].method, cases[i].path, &page);

                if (code != cases[i].code || (code == 0 && page != cases[i].page))
                        fail_msg("%s %s: got %u (page %d), expected %u (page %d)", cases[i].method,
                                 cases[i].path, code, (int)page, cases[i].code, (int)cases[i].page);
        }
}

static void listen_addresses(void **state) {
        static const struct {
                const char *listen;
                int family; /* 0: refused */
                unsigned port;
                const char *why;
        } cases[] = {
                { "127.0.0.1:7460", AF_INET, 7460, NULL },
                { "0.0.0.0:0", AF_INET, 0, NULL },
                { "[::1]:7460", AF_INET6, 7460, NULL },
                { "[::]:80", AF_INET6, 80, NULL },
                { "localhost:7460", 0, 0, "not a numeric IPv4 address" },
                { "127.0.0.1", 0, 0, "expected \"ADDRESS:PORT\"" },
                { "127.0.0.1:", 0, 0, "the port must be" },
                { "127.0.0.1:65536", 0, 0, "the port must be" },
                { "127.0.0.1:-1", 0, 0, "the port must be" },
                { "127.0.0.1:80x", 0, 0, "the port must be" },
                { "127.0.0.1:+80", 0, 0, "the port must be" },
                { "127.0.0.1: 80", 0, 0, "the port must be" },
                { ":7460", 0, 0, "numeric address before the port" },
                { "::1:7460", 0, 0, "not a numeric IPv4 address" },
                { "[::1]7460", 0, 0, "\"[ADDRESS]:PORT\"" },
                { "[127.0.0.1]:80", 0, 0, "not a numeric IPv6 address" },
        };

        (void)state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct sockaddr_storage sa;
                socklen_t len = 0;
                char err[160] = "";
                int r = http_parse_listen(cases[i].listen, &sa, &len, err, sizeof(err));

                if (!cases[i].family) {
                        if (r >= 0 || !strstr(err, cases[i].why))
                                fail_msg("'%s': got %d '%s', expected a refusal saying '%s'", cases[i].listen,
                                         r, err, cases[i].why);
                        continue;
                }
                assert_int_equal(r, 0);
                assert_int_equal(sa.ss_family, cases[i].family);
                if (cases[i].family == AF_INET)
                        assert_int_equal(ntohs(((struct sockaddr_in *)&sa)->sin_port), cases[i].port);
                else
                        assert_int_equal(ntohs(((struct sockaddr_in6 *)&sa)->sin6_port), cases[i].port);
        }
}

static void health_and_ready(void **state) {
        static const struct {
                const char *name;
                struct probe_state s;
                bool alive, ready;
                const char *json;
        } cases[] = {
                { "all well",
                  { 100 * S, 99 * S, 30 * S, false, true, true, 0 },
                  true,
                  true,
                  "{\"ready\":true,\"database\":\"ok\",\"kafka\":\"ok\",\"stopping\":false}" },
                { "the loop is stuck past the watchdog interval",
                  { 100 * S, 69 * S, 30 * S, false, true, true, 0 },
                  false,
                  true,
                  NULL },
                { "exactly at the interval: still alive",
                  { 100 * S, 70 * S, 30 * S, false, true, true, 0 },
                  true,
                  true,
                  NULL },
                { "a turn after the clock was read (the loop is quicker than the reader)",
                  { 100 * S, 101 * S, 30 * S, false, true, true, 0 },
                  true,
                  true,
                  NULL },
                { "database down: alive (a restart cures nothing), not ready",
                  { 100 * S, 99 * S, 30 * S, false, false, true, 0 },
                  true,
                  false,
                  "{\"ready\":false,\"database\":\"not connected\",\"kafka\":\"ok\",\"stopping\":false}" },
                { "breaker open: alive, not ready",
                  { 100 * S, 99 * S, 30 * S, false, true, true, 2 },
                  true,
                  false,
                  "{\"ready\":false,\"database\":\"ok\",\"kafka\":\"breaker open\",\"stopping\":false}" },
                { "breaker half-open: a probe runs, ready",
                  { 100 * S, 99 * S, 30 * S, false, true, true, 1 },
                  true,
                  true,
                  "{\"ready\":true,\"database\":\"ok\",\"kafka\":\"probing (breaker "
                  "half-open)\",\"stopping\":false}" },
                { "producer failed: not ready",
                  { 100 * S, 99 * S, 30 * S, false, true, false, 0 },
                  true,
                  false,
                  "{\"ready\":false,\"database\":\"ok\",\"kafka\":\"producer failed\",\"stopping\":false}" },
                { "stopping: not ready at once, alive until the exit",
                  { 100 * S, 99 * S, 30 * S, true, true, true, 0 },
                  true,
                  false,
                  "{\"ready\":false,\"database\":\"ok\",\"kafka\":\"ok\",\"stopping\":true}" },
                { "stopping with a long drain: alive although the loop waits",
                  { 100 * S, 10 * S, 30 * S, true, true, true, 2 },
                  true,
                  false,
                  NULL },
        };

        (void)state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char *json = probe_ready_json(&cases[i].s);

                assert_non_null(json);
                if (probe_alive(&cases[i].s) != cases[i].alive ||
                    probe_ready(&cases[i].s) != cases[i].ready ||
                    (cases[i].json && strcmp(json, cases[i].json) != 0))
                        fail_msg("%s: alive %d ready %d %s", cases[i].name, probe_alive(&cases[i].s),
                                 probe_ready(&cases[i].s), json);
                free(json);
        }
}

/* The page for d, with process figures of a test's own; `heap` the allocator's bytes in use. */
static char *render_heap(const struct metrics_data *d, uint64_t heap) {
        struct metrics_process p = { 1.5, 4096, 8192, 7, 1024, heap };
        struct metrics_build b = { "0.1.0", "2.0.2", "15.18" };
        char *out = NULL;
        size_t len = 0;

        assert_int_equal(metrics_render(d, &p, &b, &out, &len), 0);
        assert_int_equal(strlen(out), len);
        return out;
}

static char *render(const struct metrics_data *d) {
        return render_heap(d, 65536);
}

static void has_line(const char *text, const char *line) {
        const char *p = text;
        size_t n = strlen(line);

        while ((p = strstr(p, line))) {
                if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == 0))
                        return;
                p += n;
        }
        fail_msg("no line '%s' in:\n%s", line, text);
}

static void histograms_are_cumulative(void **state) {
        struct metrics m;
        struct metrics_data d;
        struct metrics_batch b = { .add = { .published = 3, .batches = 1 },
                                   .claim = 2 * USEC_PER_MSEC,
                                   .finish = 400 * USEC_PER_MSEC,
                                   .total = 20 * S };
        char *text;

        (void)state;
        histogram_observe(&b.delivery, 0.0005); /* below the first bound */
        histogram_observe(&b.delivery, 0.001); /* on a bound: counts in it (le) */
        histogram_observe(&b.delivery, 0.003);
        histogram_observe(&b.delivery, 1000); /* above every bound: only +Inf */
        assert_int_equal(metrics_init(&m, 1700000000 * S), 0);
        metrics_add_batch(&m, &b);
        metrics_read(&m, &d);
        text = render(&d);
        has_line(text, "# TYPE outbox_relay_kafka_delivery_seconds histogram");
        has_line(text, "outbox_relay_kafka_delivery_seconds_bucket{le=\"0.001\"} 2");
        has_line(text, "outbox_relay_kafka_delivery_seconds_bucket{le=\"0.0025\"} 2");
        has_line(text, "outbox_relay_kafka_delivery_seconds_bucket{le=\"0.005\"} 3");
        has_line(text, "outbox_relay_kafka_delivery_seconds_bucket{le=\"300\"} 3");
        has_line(text, "outbox_relay_kafka_delivery_seconds_bucket{le=\"+Inf\"} 4");
        has_line(text, "outbox_relay_kafka_delivery_seconds_count 4");
        has_line(text, "outbox_relay_claim_duration_seconds_bucket{le=\"0.001\"} 0");
        has_line(text, "outbox_relay_claim_duration_seconds_bucket{le=\"0.0025\"} 1");
        has_line(text, "outbox_relay_finish_duration_seconds_bucket{le=\"0.25\"} 0");
        has_line(text, "outbox_relay_finish_duration_seconds_bucket{le=\"0.5\"} 1");
        has_line(text, "outbox_relay_batch_duration_seconds_bucket{le=\"10\"} 0");
        has_line(text, "outbox_relay_batch_duration_seconds_bucket{le=\"30\"} 1");
        has_line(text, "outbox_relay_batches_total 1");
        has_line(text, "process_start_time_seconds 1700000000");
        has_line(text, "process_cpu_seconds_total 1.50");
        has_line(text, "process_open_fds 7");
        has_line(text, "outbox_relay_build_info{version=\"0.1.0\",librdkafka=\"2.0.2\",libpq=\"15.18\"} 1");
        /* Nothing read yet: no lag and no pending rows rather than a false 0. */
        assert_null(strstr(text, "\noutbox_relay_oldest_pending_age_seconds "));
        assert_null(strstr(text, "\noutbox_relay_pending_rows "));
        free(text);
        metrics_done(&m);
}

static void topics_are_capped_and_escaped(void **state) {
        struct metrics m;
        struct metrics_data *d = malloc(sizeof(*d));
        char name[64], *text;

        (void)state;
        assert_non_null(d);
        assert_int_equal(metrics_init(&m, 0), 0);
        metrics_published(&m, "a\"b\\c\nd", 2);
        for (int i = 0; i < METRICS_TOPICS + 10; i++) {
                snprintf(name, sizeof(name), "topic-%d", i);
                metrics_published(&m, name, 1);
        }
        metrics_published(&m, "topic-0", 5);
        metrics_read(&m, d);
        assert_int_equal(d->n_topics, METRICS_TOPICS);
        text = render(d);
        has_line(text, "outbox_relay_events_published_total{topic=\"a\\\"b\\\\c\\nd\"} 2");
        has_line(text, "outbox_relay_events_published_total{topic=\"topic-0\"} 6");
        has_line(text, "outbox_relay_events_published_total{topic=\"topic-62\"} 1");
        /* 63 topics of their own after the first: the other 11 share one series */
        assert_null(strstr(text, "topic=\"topic-63\""));
        has_line(text, "outbox_relay_events_published_total{topic=\"(other)\"} 11");
        free(text);
        free(d);
        metrics_done(&m);
}

static void gauges(void **state) {
        struct metrics m;
        struct metrics_data d;
        char *text;

        (void)state;
        assert_int_equal(metrics_init(&m, 0), 0);
        metrics_transition(&m, METRICS_TO_OPEN);
        metrics_transition(&m, METRICS_TO_OPEN);
        metrics_transition(&m, METRICS_TO_CLOSED);
        metrics_reconnected(&m);
        metrics_read(&m, &d);
        d.lag_known = true;
        d.oldest_pending_age = 2.5;
        d.pending_rows = 12345;
        d.breaker_state = 2;
        d.ordering = "single";
        text = render(&d);
        has_line(text, "outbox_relay_breaker_transitions_total{to=\"open\"} 2");
        has_line(text, "outbox_relay_breaker_transitions_total{to=\"closed\"} 1");
        has_line(text, "outbox_relay_breaker_transitions_total{to=\"reopen\"} 0");
        has_line(text, "outbox_relay_database_reconnects_total 1");
        has_line(text, "outbox_relay_oldest_pending_age_seconds 2.500000");
        has_line(text, "outbox_relay_pending_rows 12345");
        has_line(text, "outbox_relay_breaker_state 2");
        has_line(text, "outbox_relay_ordering_info{ordering=\"single\"} 1");
        has_line(text, "outbox_relay_heap_bytes 65536");
        free(text);
        text = render_heap(&d, 0); /* no figure from the allocator (a sanitizer, valgrind): no series */
        assert_null(strstr(text, "outbox_relay_heap_bytes"));
        free(text);
        metrics_done(&m);
}

static void proc_stat(void **state) {
        /* A name with a space and a ')' of its own: fields count from the last ')'. */
        static const char line[] =
                "4242 (outbox ) relay) S 1 4242 4242 0 -1 4194560 1523 0 0 0 250 75 0 0 20 0 "
                "9 0 12345 265809920 3644 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 "
                "1 0 0 0 0 0\n";
        struct metrics_process p = { 0 };

        (void)state;
        assert_int_equal(procstat_parse(line, 100, 4096, &p), 0);
        assert_true(p.cpu_seconds > 3.2499 && p.cpu_seconds < 3.2501);
        assert_int_equal(p.virtual_bytes, 265809920);
        assert_int_equal(p.resident_bytes, 3644ULL * 4096);
        assert_int_equal(procstat_parse("4242 relay S 1", 100, 4096, &p), -EINVAL);
        assert_int_equal(procstat_parse("4242 (relay) S 1 2", 100, 4096, &p), -EINVAL);
        assert_int_equal(procstat_parse(line, 0, 4096, &p), -EINVAL);
        procstat_read(&p);
        assert_true(p.resident_bytes > 0);
        assert_true(p.open_fds >= 3);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(routes),
                cmocka_unit_test(listen_addresses),
                cmocka_unit_test(health_and_ready),
                cmocka_unit_test(histograms_are_cumulative),
                cmocka_unit_test(topics_are_capped_and_escaped),
                cmocka_unit_test(gauges),
                cmocka_unit_test(proc_stat),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
