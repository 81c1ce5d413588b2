/* probe.h -- The rules of /health and /ready, and the pages the HTTP listener serves from the relay's figures. */
#pragma once

#include <signal.h>
#include <stdbool.h>

#include "http.h"
#include "metrics.h"
#include "util.h"

/* What the rules look at. */
struct probe_state {
        usec_t now;
        usec_t turn; /* when the loop last turned (served its watchdog) */
        usec_t alive_within; /* the loop must have turned this recently */
        bool stopping; /* SIGTERM or SIGINT came */
        bool db_connected;
        bool producer_ok;
        int breaker_state; /* as metrics_data: 0 closed, 1 half-open, 2 open */
};

/* /health: the process is alive: its loop turned within alive_within, or it is stopping (a
 * drain has its own deadline; a restart would only cut it short). Checks nothing external, so an
 * outage of PostgreSQL or Kafka never reads as "restart me". */
bool probe_alive(const struct probe_state *s);

/* /ready: usable: PostgreSQL connected, the producer there, the breaker not open, not stopping. */
bool probe_ready(const struct probe_state *s);

/* The JSON body of /ready: every check and its state, and "ready". Heap; NULL when out of memory. */
char *probe_ready_json(const struct probe_state *s);

/* Where the listener's pages read from. */
struct probe_source {
        struct metrics *metrics;
        const atomic_bool *stop; /* set by the signal handler: read directly, so /ready turns
                                  * 503 the moment SIGTERM lands */
        usec_t alive_within;
        struct metrics_build build;
};

/* http_answer_fn for a struct probe_source. */
int probe_answer(void *arg, enum http_page page, struct http_reply *reply);
