/* probe.c -- The rules of /health and /ready, and the pages the HTTP listener serves from the relay's figures. */
#include "probe.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The object as compact text in a heap string, or NULL when o is NULL (out of memory) or `built`
 * is false (a member could not be added); o is freed either way. */
static char *json_text(json_object *o, bool built) {
        const char *text = o && built ? json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN) : NULL;
        char *out = text ? strdup(text) : NULL;

        json_object_put(o);
        return out;
}

char *probe_ready_json(const struct probe_state *s) {
        json_object *o = json_object_new_object();
        bool built = o && json_object_object_add(o, "ready", json_object_new_boolean(probe_ready(s))) == 0 &&
                json_object_object_add(o, "database",
                                       json_object_new_string(s->db_connected ? "ok" : "not connected")) ==
                        0 &&
                json_object_object_add(o, "kafka", json_object_new_string(kafka_state(s))) == 0 &&
                json_object_object_add(o, "stopping", json_object_new_boolean(s->stopping)) == 0;

        return json_text(o, built);
}

static char *health_json(const struct probe_state *s) {
        json_object *o = json_object_new_object();
        double ago = s->now > s->turn ? (double)(s->now - s->turn) / USEC_PER_SEC : 0.0;
        bool built = o && json_object_object_add(o, "alive", json_object_new_boolean(probe_alive(s))) == 0 &&
                json_object_object_add(o, "loop_turned_seconds_ago", json_object_new_double(ago)) == 0 &&
                json_object_object_add(o, "stopping", json_object_new_boolean(s->stopping)) == 0;

        return json_text(o, built);
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
