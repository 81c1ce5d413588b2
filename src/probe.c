/* probe.c -- The rules of /health and /ready, and the pages the HTTP listener serves from the relay's figures. */
#include "probe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_gen.h>

#include "procstat.h"

bool probe_alive(const struct probe_state *s) {
        return s->stopping || s->now <= s->turn || s->now - s->turn <= s->alive_within;
}

bool probe_ready(const struct probe_state *s) {
        return !s->stopping && s->db_connected && s->producer_ok && s->breaker_state != 2;
}

static const char *kafka_state(const struct probe_state *s) {
        if (!s->producer_ok)
                return "producer failed";
        switch (s->breaker_state) {
        case 2:
                return "breaker open";
        case 1:
                return "probing (breaker half-open)";
        default:
                return "ok";
        }
}

/* A flat JSON object of the members given as name, kind ('b' boolean, 's' string, 'n' number
 * already written as text), value: compact text in a heap string, or NULL (out of memory). */
struct member {
        const char *name;
        char kind;
        bool b;
        const char *s;
};

static char *json_object_text(const struct member *m, size_t n) {
        yajl_gen g = yajl_gen_alloc(NULL);
        const unsigned char *buf;
        size_t len;
        char *out = NULL;
        bool ok = g && yajl_gen_map_open(g) == yajl_gen_status_ok;

        for (size_t i = 0; ok && i < n; i++) {
                ok = yajl_gen_string(g, (const unsigned char *)m[i].name, strlen(m[i].name)) ==
                        yajl_gen_status_ok;
                if (ok && m[i].kind == 'b')
                        ok = yajl_gen_bool(g, m[i].b) == yajl_gen_status_ok;
                else if (ok && m[i].kind == 's')
                        ok = yajl_gen_string(g, (const unsigned char *)m[i].s, strlen(m[i].s)) ==
                                yajl_gen_status_ok;
                else if (ok)
                        ok = yajl_gen_number(g, m[i].s, strlen(m[i].s)) == yajl_gen_status_ok;
        }
        if (ok && yajl_gen_map_close(g) == yajl_gen_status_ok &&
            yajl_gen_get_buf(g, &buf, &len) == yajl_gen_status_ok)
                out = strndup((const char *)buf, len);
        if (g)
                yajl_gen_free(g);
        return out;
}

char *probe_ready_json(const struct probe_state *s) {
        const struct member m[] = {
                { "ready", 'b', probe_ready(s), NULL },
                { "database", 's', false, s->db_connected ? "ok" : "not connected" },
                { "kafka", 's', false, kafka_state(s) },
                { "stopping", 'b', s->stopping, NULL },
        };

        return json_object_text(m, sizeof(m) / sizeof(m[0]));
}

static char *health_json(const struct probe_state *s) {
        char ago[32];
        const struct member m[] = {
                { "alive", 'b', probe_alive(s), NULL },
                { "loop_turned_seconds_ago", 'n', false, ago },
                { "stopping", 'b', s->stopping, NULL },
        };

        snprintf(ago, sizeof(ago), "%.6f",
                 s->now > s->turn ? (double)(s->now - s->turn) / USEC_PER_SEC : 0.0);
        return json_object_text(m, sizeof(m) / sizeof(m[0]));
}

/* A JSON body gets a newline, so curl in a terminal ends its line. */
static int json_reply(struct http_reply *reply, unsigned status, char *json) {
        if (!json || asprintf(&reply->body, "%s\n", json) < 0) {
                free(json);
                reply->body = NULL;
                return -ENOMEM;
        }
        free(json);
        reply->status = status;
        reply->content_type = "application/json";
        reply->len = strlen(reply->body);
        return 0;
}

int probe_answer(void *arg, enum http_page page, struct http_reply *reply) {
        struct probe_source *src = arg;
        struct metrics_data *d = malloc(sizeof(*d));
        struct probe_state s;
        struct metrics_process p;
        int ret = 0;

        if (!d)
                return -ENOMEM;
        metrics_read(src->metrics, d);
        s = (struct probe_state){ .now = now_usec(),
                                  .turn = atomic_load_explicit(&src->metrics->turn, memory_order_relaxed),
                                  .alive_within = src->alive_within,
                                  .stopping = atomic_load(src->stop) ||
                                          atomic_load_explicit(&src->metrics->exiting, memory_order_relaxed),
                                  .db_connected = d->db_connected,
                                  .producer_ok = d->producer_ok,
                                  .breaker_state = d->breaker_state };
        switch (page) {
        case HTTP_PAGE_HEALTH:
                ret = json_reply(reply, probe_alive(&s) ? 200 : 503, health_json(&s));
                break;
        case HTTP_PAGE_READY:
                ret = json_reply(reply, probe_ready(&s) ? 200 : 503, probe_ready_json(&s));
                break;
        case HTTP_PAGE_METRICS:
                procstat_read(&p);
                ret = metrics_render(d, &p, &src->build, &reply->body, &reply->len);
                reply->status = 200;
                reply->content_type = "text/plain; version=0.0.4; charset=utf-8";
                break;
        }
        free(d);
        return ret;
}
