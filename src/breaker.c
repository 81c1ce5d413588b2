/* breaker.c -- Circuit breaker around the producer; pure, clock and randomness injected. */
#include "breaker.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int breaker_init(struct breaker *b, unsigned failure_threshold, double failure_ratio, unsigned window,
                 usec_t cooldown, usec_t cooldown_max) {
        memset(b, 0, sizeof(*b));
        if (window == 0 || window > BREAKER_WINDOW_MAX)
                return -EINVAL;
        b->ring = calloc(window, 1);
        if (!b->ring)
                return -ENOMEM;
        b->failure_threshold = failure_threshold ? failure_threshold : 1;
        b->failure_ratio = failure_ratio;
        b->window = window;
        b->cooldown = cooldown;
        b->cooldown_max = cooldown_max < cooldown ? cooldown : cooldown_max;
        b->current_cooldown = cooldown;
        b->state = BREAKER_CLOSED;
        return 0;
}

void breaker_done(struct breaker *b) {
        free(b->ring);
        b->ring = NULL;
}

static void window_push(struct breaker *b, bool failure) {
        if (b->ring_len == b->window)
                b->ring_failures -= b->ring[b->ring_pos];
        else
                b->ring_len++;
        b->ring[b->ring_pos] = failure;
        b->ring_failures += failure;
        b->ring_pos = (b->ring_pos + 1) % b->window;
}

static void window_clear(struct breaker *b) {
        memset(b->ring, 0, b->window);
        b->ring_pos = b->ring_len = b->ring_failures = 0;
        b->consecutive = 0;
}

/* Opens for the current cool-down, shortened by up to a fifth at random so several relays
 * that opened together do not probe together. */
static void open_for_cooldown(struct breaker *b, usec_t now, struct rng *rng) {
        usec_t jitter = (usec_t)rng_uniform(rng, b->current_cooldown / 5);

        b->state = BREAKER_OPEN;
        b->open_until = now + b->current_cooldown - jitter;
        b->probe_out = false;
}

bool breaker_allow(struct breaker *b, usec_t now, enum breaker_event *ev) {
        if (ev)
                *ev = BREAKER_NONE;
        switch (b->state) {
        case BREAKER_CLOSED:
                return true;
        case BREAKER_OPEN:
                if (now < b->open_until)
                        return false;
                b->state = BREAKER_HALF_OPEN;
                b->probe_out = true;
                if (ev)
                        *ev = BREAKER_PROBING;
                return true;
        case BREAKER_HALF_OPEN:
                if (b->probe_out)
                        return false;
                b->probe_out = true;
                return true;
        }
        return false;
}

enum breaker_event breaker_record(struct breaker *b, bool failure, usec_t now, struct rng *rng) {
        switch (b->state) {
        case BREAKER_HALF_OPEN:
                if (failure) {
                        b->current_cooldown = b->current_cooldown > b->cooldown_max / 2
                                ? b->cooldown_max
                                : b->current_cooldown * 2;
                        open_for_cooldown(b, now, rng);
                        return BREAKER_REOPENED;
                }
                b->state = BREAKER_CLOSED;
                b->current_cooldown = b->cooldown;
                b->probe_out = false;
                window_clear(b);
                return BREAKER_CLOSED_AGAIN;
        case BREAKER_OPEN:
                return BREAKER_NONE; /* a straggler from before it opened */
        case BREAKER_CLOSED:
                break;
        }
        window_push(b, failure);
        b->consecutive = failure ? b->consecutive + 1 : 0;
        if (b->consecutive >= b->failure_threshold ||
            (b->ring_len == b->window && b->ring_failures > 0 &&
             (double)b->ring_failures >= b->failure_ratio * (double)b->window)) {
                window_clear(b);
                b->current_cooldown = b->cooldown;
                open_for_cooldown(b, now, rng);
                return BREAKER_OPENED;
        }
        return BREAKER_NONE;
}

int breaker_configure(struct breaker *b, unsigned failure_threshold, double failure_ratio, unsigned window,
                      usec_t cooldown, usec_t cooldown_max) {
        if (window == 0 || window > BREAKER_WINDOW_MAX)
                return -EINVAL;
        if (window != b->window) {
                uint8_t *ring = calloc(window, 1);

                if (!ring)
                        return -ENOMEM;
                free(b->ring);
                b->ring = ring;
                b->window = window;
                b->ring_pos = b->ring_len = b->ring_failures = 0;
        }
        b->failure_threshold = failure_threshold ? failure_threshold : 1;
        b->failure_ratio = failure_ratio;
        b->cooldown = cooldown;
        b->cooldown_max = cooldown_max < cooldown ? cooldown : cooldown_max;
        if (b->current_cooldown < b->cooldown)
                b->current_cooldown = b->cooldown;
        if (b->current_cooldown > b->cooldown_max)
                b->current_cooldown = b->cooldown_max;
        return 0;
}

void breaker_cancel_probe(struct breaker *b) {
        if (b->state == BREAKER_HALF_OPEN)
                b->probe_out = false;
}

const char *breaker_state_to_string(enum breaker_state s) {
        switch (s) {
        case BREAKER_CLOSED:
                return "closed";
        case BREAKER_OPEN:
                return "open";
        case BREAKER_HALF_OPEN:
                return "half-open";
        }
        return "?";
}
