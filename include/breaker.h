/* breaker.h -- Circuit breaker around the producer; pure, clock and randomness injected. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "backoff.h"
#include "util.h"

enum breaker_state {
        BREAKER_CLOSED, /* batches flow */
        BREAKER_OPEN, /* claim nothing until open_until */
        BREAKER_HALF_OPEN, /* exactly one probe batch may run */
};

/* What a call changed, so the caller logs each transition exactly once. */
enum breaker_event {
        BREAKER_NONE,
        BREAKER_OPENED, /* closed -> open */
        BREAKER_PROBING, /* open -> half-open: the one probe is allowed now */
        BREAKER_REOPENED, /* half-open -> open after a failed probe (longer cool-down) */
        BREAKER_CLOSED_AGAIN, /* half-open -> closed after a successful probe */
};

#define BREAKER_WINDOW_MAX 10000

struct breaker {
        /* settings */
        unsigned failure_threshold; /* consecutive failures that open it */
        double failure_ratio; /* failed share of a full window that opens it */
        unsigned window; /* batches in the window, 1..BREAKER_WINDOW_MAX */
        usec_t cooldown; /* first open period */
        usec_t cooldown_max; /* cap of the growing open period */

        /* state */
        enum breaker_state state;
        unsigned consecutive; /* failures in a row */
        uint8_t *ring; /* last `window` outcomes, 1 = failure */
        unsigned ring_pos, ring_len, ring_failures;
        usec_t current_cooldown; /* doubles on each failed probe */
        usec_t open_until;
        bool probe_out; /* half-open: the probe was handed out */
};

/* Returns -ENOMEM or 0. */
int breaker_init(struct breaker *b, unsigned failure_threshold, double failure_ratio, unsigned window,
                 usec_t cooldown, usec_t cooldown_max);
void breaker_done(struct breaker *b);

/* May a batch run now? Moves open -> half-open when the cool-down is over (event PROBING) and
 * then allows exactly one probe until its outcome is recorded. */
bool breaker_allow(struct breaker *b, usec_t now, enum breaker_event *ev);

/* Records a batch outcome. `failure` means a transient Kafka failure of the whole batch; row-level
 * permanent errors must be recorded as success (the producer works). */
enum breaker_event breaker_record(struct breaker *b, bool failure, usec_t now, struct rng *rng);

/* SIGHUP: new settings; the state is kept, the ratio window restarts if its size changed.
 * Returns -ENOMEM (settings unchanged) or 0. */
int breaker_configure(struct breaker *b, unsigned failure_threshold, double failure_ratio, unsigned window,
                      usec_t cooldown, usec_t cooldown_max);

/* Half-open and the probe found nothing to send (empty claim): let the next batch probe. */
void breaker_cancel_probe(struct breaker *b);

const char *breaker_state_to_string(enum breaker_state s);
