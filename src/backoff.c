/* backoff.c -- Capped exponential backoff with full jitter; pure, clock and RNG injected. */
#include "backoff.h"

void backoff_init(struct backoff *b, usec_t base, usec_t cap) {
        b->base = base;
        b->cap = cap < base ? base : cap;
        b->attempt = 0;
}

usec_t backoff_ceiling(const struct backoff *b) {
        usec_t c = b->base;

        /* Doubling stops at the cap, so no shift can overflow. */
        for (unsigned i = 0; i < b->attempt && c < b->cap; i++)
                c = c > b->cap / 2 ? b->cap : c * 2;
        return c < b->cap ? c : b->cap;
}

usec_t backoff_next(struct backoff *b, struct rng *rng) {
        /* Full jitter (sleep = random(0, ceiling)): clients that failed together spread over
         * the whole window instead of returning in a herd at its upper half. */
        usec_t wait = (usec_t)rng_uniform(rng, backoff_ceiling(b));

        if (b->attempt < 64)
                b->attempt++;
        return wait;
}

void backoff_reset(struct backoff *b) {
        b->attempt = 0;
}

void rng_seed(struct rng *r, uint64_t seed) {
        r->state = seed ? seed : 0x9e3779b97f4a7c15ULL;
}

uint64_t rng_next(struct rng *r) {
        uint64_t x = r->state;

        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        r->state = x;
        return x * 0x2545f4914f6cdd1dULL;
}

uint64_t rng_uniform(struct rng *r, uint64_t bound) {
        if (bound == UINT64_MAX)
                return rng_next(r);
        /* Rejection sampling keeps the distribution exactly uniform. */
        uint64_t n = bound + 1, limit = UINT64_MAX - UINT64_MAX % n, x;

        do
                x = rng_next(r);
        while (x >= limit);
        return x % n;
}
