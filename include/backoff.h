/* backoff.h -- Capped exponential backoff with full jitter; pure, clock and RNG injected. */
#pragma once

#include <stdint.h>

#include "util.h"

struct backoff {
        usec_t base;
        usec_t cap;
        unsigned attempt; /* failures since the last success */
};

/* xorshift64* state; any non-zero seed. */
struct rng {
        uint64_t state;
};

void backoff_init(struct backoff *b, usec_t base, usec_t cap);

/* The wait before the next try: uniform in [0, min(cap, base * 2^attempt)], then attempt++. */
usec_t backoff_next(struct backoff *b, struct rng *rng);

/* Upper bound of the next wait, without drawing (for messages and tests). */
usec_t backoff_ceiling(const struct backoff *b);

void backoff_reset(struct backoff *b);

void rng_seed(struct rng *r, uint64_t seed);
uint64_t rng_next(struct rng *r);
/* Uniform in [0, bound] inclusive. */
uint64_t rng_uniform(struct rng *r, uint64_t bound);
