/* test_backoff.c -- Unit tests for capped exponential backoff with full jitter and its xorshift RNG. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backoff.h"

#define MS(x) ((usec_t)(x)*USEC_PER_MSEC)
#define SEC(x) ((usec_t)(x)*USEC_PER_SEC)

#define JITTER_SAMPLES 20000
#define JITTER_BUCKETS 10

/* Calls backoff_next until the ceiling reaches the cap, returning how many calls it took. */
static unsigned saturate(struct backoff *b, struct rng *r) {
        unsigned n = 0;

        while (backoff_ceiling(b) < b->cap) {
                (void)backoff_next(b, r);
                n++;
                assert_true(n < 100);
        }
        return n;
}

static void test_ceiling_sequence(void **state) {
        static const usec_t expected[] = {
                MS(100), MS(200), MS(400), MS(800), SEC(1), SEC(1), SEC(1), SEC(1),
        };
        struct backoff b;
        struct rng r;

        (void)state;
        rng_seed(&r, 42);
        backoff_init(&b, MS(100), SEC(1));
        assert_int_equal(b.attempt, 0);
        for (size_t i = 0; i < ELEMENTSOF(expected); i++) {
                assert_int_equal(backoff_ceiling(&b), expected[i]);
                (void)backoff_next(&b, &r);
                assert_int_equal(b.attempt, i + 1);
        }
}

static void test_ceiling_does_not_draw(void **state) {
        struct backoff b;

        (void)state;
        backoff_init(&b, MS(100), SEC(1));
        /* Asking for the ceiling is not an attempt. */
        for (int i = 0; i < 5; i++)
                assert_int_equal(backoff_ceiling(&b), MS(100));
        assert_int_equal(b.attempt, 0);
}

static void test_reset_returns_to_base(void **state) {
        struct backoff b;
        struct rng r;

        (void)state;
        rng_seed(&r, 7);
        backoff_init(&b, MS(100), SEC(1));
        for (int i = 0; i < 6; i++)
                (void)backoff_next(&b, &r);
        assert_int_equal(backoff_ceiling(&b), SEC(1));

        backoff_reset(&b);
        assert_int_equal(b.attempt, 0);
        assert_int_equal(backoff_ceiling(&b), MS(100));
        /* base and cap survive a reset: the sequence starts over. */
        assert_int_equal(b.base, MS(100));
        assert_int_equal(b.cap, SEC(1));
        (void)backoff_next(&b, &r);
        assert_int_equal(backoff_ceiling(&b), MS(200));
}

static void test_cap_below_base_is_clamped(void **state) {
        struct backoff b;
        struct rng r;

        (void)state;
        rng_seed(&r, 3);
        backoff_init(&b, MS(500), MS(100));
        assert_int_equal(b.base, MS(500));
        assert_int_equal(b.cap, MS(500));
        for (int i = 0; i < 10; i++) {
                assert_int_equal(backoff_ceiling(&b), MS(500));
                assert_true(backoff_next(&b, &r) <= MS(500));
        }
}

static void test_cap_equal_base(void **state) {
        struct backoff b;
        struct rng r;

        (void)state;
        rng_seed(&r, 3);
        backoff_init(&b, SEC(2), SEC(2));
        for (int i = 0; i < 10; i++) {
                assert_int_equal(backoff_ceiling(&b), SEC(2));
                assert_true(backoff_next(&b, &r) <= SEC(2));
        }
}

static void test_huge_attempts_stay_at_cap(void **state) {
        struct backoff b;
        struct rng r;

        (void)state;
        rng_seed(&r, 11);
        backoff_init(&b, MS(100), SEC(1));
        for (int i = 0; i < 200; i++) {
                usec_t c = backoff_ceiling(&b);

                assert_true(c >= MS(100));
                assert_true(c <= SEC(1));
                assert_true(backoff_next(&b, &r) <= c);
        }
        assert_int_equal(backoff_ceiling(&b), SEC(1));
}

static void test_huge_attempts_no_overflow_at_extremes(void **state) {
        struct backoff b;
        struct rng r;
        usec_t prev;

        (void)state;
        rng_seed(&r, 13);

        /* base=1, cap=max: doubling runs through every power of two and must end at the cap,
         * never wrap around to 0 or to a small value. */
        backoff_init(&b, 1, USEC_INFINITY);
        prev = 0;
        for (int i = 0; i < 200; i++) {
                usec_t c = backoff_ceiling(&b);

                if (i < 64)
                        assert_int_equal(c, (usec_t)1 << i);
                assert_true(c >= prev);
                prev = c;
                (void)backoff_next(&b, &r);
        }
        assert_int_equal(backoff_ceiling(&b), USEC_INFINITY);

        /* A base near the top of the range: the first doubling already hits the cap. */
        backoff_init(&b, (usec_t)3 << 62, USEC_INFINITY);
        assert_int_equal(backoff_ceiling(&b), (usec_t)3 << 62);
        for (int i = 0; i < 200; i++)
                (void)backoff_next(&b, &r);
        assert_int_equal(backoff_ceiling(&b), USEC_INFINITY);

        /* A cap that is not base * 2^k. */
        backoff_init(&b, MS(300), SEC(1));
        assert_int_equal(backoff_ceiling(&b), MS(300));
        (void)backoff_next(&b, &r);
        assert_int_equal(backoff_ceiling(&b), MS(600));
        (void)backoff_next(&b, &r);
        assert_int_equal(backoff_ceiling(&b), SEC(1));
        for (int i = 0; i < 200; i++)
                (void)backoff_next(&b, &r);
        assert_int_equal(backoff_ceiling(&b), SEC(1));
}

static void test_samples_within_ceiling(void **state) {
        struct backoff b;
        struct rng r;
        usec_t max_at_base = 0;

        (void)state;
        rng_seed(&r, 0x5eed);
        backoff_init(&b, MS(100), SEC(1));
        for (int round = 0; round < 2000; round++) {
                backoff_reset(&b);
                for (int i = 0; i < 8; i++) {
                        usec_t c = backoff_ceiling(&b);
                        usec_t w = backoff_next(&b, &r);

                        assert_true(w <= c);
                        if (i == 0 && w > max_at_base)
                                max_at_base = w;
                }
        }
        /* The first wait really spreads up to the base, not just somewhere below it. */
        assert_true(max_at_base > MS(95));
        assert_true(max_at_base <= MS(100));
}

static void test_samples_reach_ceiling_inclusive(void **state) {
        struct backoff b;
        struct rng r;
        unsigned seen[3] = { 0, 0, 0 };

        (void)state;
        /* Tiny windows make both ends observable: [0, 1] then [0, 2]. */
        rng_seed(&r, 77);
        backoff_init(&b, 1, 1);
        for (int i = 0; i < 1000; i++) {
                usec_t w = backoff_next(&b, &r);

                assert_true(w <= 1);
                seen[w]++;
        }
        assert_true(seen[0] > 0);
        assert_true(seen[1] > 0);

        backoff_init(&b, 1, 2);
        (void)backoff_next(&b, &r);
        assert_int_equal(backoff_ceiling(&b), 2);
        seen[0] = seen[1] = seen[2] = 0;
        for (int i = 0; i < 1000; i++) {
                usec_t w = backoff_next(&b, &r);

                assert_true(w <= 2);
                seen[w]++;
        }
        assert_true(seen[0] > 0);
        assert_true(seen[1] > 0);
        assert_true(seen[2] > 0);
}

static void test_full_jitter_covers_whole_window(void **state) {
        const usec_t cap = SEC(1);
        struct backoff b;
        struct rng r;
        usec_t min = USEC_INFINITY, max = 0;
        unsigned below_half = 0;
        unsigned buckets[JITTER_BUCKETS] = { 0 };

        (void)state;
        rng_seed(&r, 20240601);
        backoff_init(&b, MS(100), cap);
        assert_int_equal(saturate(&b, &r), 4);

        for (int i = 0; i < JITTER_SAMPLES; i++) {
                usec_t w;

                assert_int_equal(backoff_ceiling(&b), cap);
                w = backoff_next(&b, &r);
                assert_true(w <= cap);
                if (w < min)
                        min = w;
                if (w > max)
                        max = w;
                if (w < cap / 2)
                        below_half++;
                buckets[w * JITTER_BUCKETS / (cap + 1)]++;
        }

        /* Full jitter is uniform over [0, cap]; "equal jitter" would keep min >= cap/2. */
        assert_true(min < cap * 5 / 100);
        assert_true(max > cap * 95 / 100);
        assert_true(below_half >= JITTER_SAMPLES * 45 / 100);
        assert_true(below_half <= JITTER_SAMPLES * 55 / 100);
        for (int i = 0; i < JITTER_BUCKETS; i++) {
                assert_true(buckets[i] >= JITTER_SAMPLES * 8 / 100);
                assert_true(buckets[i] <= JITTER_SAMPLES * 12 / 100);
        }
}

static void test_same_seed_same_sequence(void **state) {
        struct backoff b1, b2;
        struct rng r1, r2;

        (void)state;
        rng_seed(&r1, 12345);
        rng_seed(&r2, 12345);
        for (int i = 0; i < 1000; i++)
                assert_int_equal(rng_next(&r1), rng_next(&r2));

        rng_seed(&r1, 12345);
        rng_seed(&r2, 12345);
        backoff_init(&b1, MS(100), SEC(1));
        backoff_init(&b2, MS(100), SEC(1));
        for (int i = 0; i < 200; i++) {
                if (i % 20 == 0) {
                        backoff_reset(&b1);
                        backoff_reset(&b2);
                }
                assert_int_equal(backoff_next(&b1, &r1), backoff_next(&b2, &r2));
        }
}

static void test_different_seeds_different_sequences(void **state) {
        struct backoff b1, b2;
        struct rng r1, r2;
        unsigned differ = 0;

        (void)state;
        rng_seed(&r1, 1);
        rng_seed(&r2, 2);
        for (int i = 0; i < 100; i++)
                differ += rng_next(&r1) != rng_next(&r2);
        assert_true(differ >= 99);

        rng_seed(&r1, 1);
        rng_seed(&r2, 2);
        backoff_init(&b1, MS(100), SEC(1));
        backoff_init(&b2, MS(100), SEC(1));
        differ = 0;
        for (int i = 0; i < 100; i++)
                differ += backoff_next(&b1, &r1) != backoff_next(&b2, &r2);
        assert_true(differ >= 90);
}

static void test_rng_uniform_zero_bound(void **state) {
        struct rng r;

        (void)state;
        rng_seed(&r, 99);
        for (int i = 0; i < 1000; i++)
                assert_int_equal(rng_uniform(&r, 0), 0);
}

static void test_rng_uniform_bound_inclusive(void **state) {
        struct rng r;
        unsigned seen[2] = { 0, 0 };
        unsigned seen10[10] = { 0 };

        (void)state;
        rng_seed(&r, 99);
        for (int i = 0; i < 1000; i++) {
                uint64_t v = rng_uniform(&r, 1);

                assert_true(v <= 1);
                seen[v]++;
        }
        assert_true(seen[0] > 0);
        assert_true(seen[1] > 0);
        assert_true(seen[0] > 400 && seen[1] > 400);

        for (int i = 0; i < 10000; i++) {
                uint64_t v = rng_uniform(&r, 9);

                assert_true(v <= 9);
                seen10[v]++;
        }
        for (int i = 0; i < 10; i++)
                assert_true(seen10[i] > 800);
}

static void test_rng_uniform_full_range(void **state) {
        struct rng r1, r2;

        (void)state;
        /* bound = UINT64_MAX is the whole range: exactly the raw generator output. */
        rng_seed(&r1, 4242);
        rng_seed(&r2, 4242);
        for (int i = 0; i < 100; i++)
                assert_int_equal(rng_uniform(&r1, UINT64_MAX), rng_next(&r2));
}

static void test_rng_seed_zero_not_stuck(void **state) {
        struct rng r;
        uint64_t prev, v;
        unsigned zeros = 0, repeats = 0;

        (void)state;
        rng_seed(&r, 0);
        assert_int_not_equal(r.state, 0);
        prev = rng_next(&r);
        zeros += prev == 0;
        for (int i = 0; i < 1000; i++) {
                v = rng_next(&r);
                zeros += v == 0;
                repeats += v == prev;
                prev = v;
        }
        assert_int_equal(zeros, 0);
        assert_int_equal(repeats, 0);
        assert_int_not_equal(r.state, 0);

        /* And the backoff drawn from it still spreads. */
        {
                struct backoff b;
                unsigned nonzero = 0;

                rng_seed(&r, 0);
                backoff_init(&b, SEC(1), SEC(1));
                for (int i = 0; i < 100; i++)
                        nonzero += backoff_next(&b, &r) != 0;
                assert_true(nonzero >= 99);
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_ceiling_sequence),
                cmocka_unit_test(test_ceiling_does_not_draw),
                cmocka_unit_test(test_reset_returns_to_base),
                cmocka_unit_test(test_cap_below_base_is_clamped),
                cmocka_unit_test(test_cap_equal_base),
                cmocka_unit_test(test_huge_attempts_stay_at_cap),
                cmocka_unit_test(test_huge_attempts_no_overflow_at_extremes),
                cmocka_unit_test(test_samples_within_ceiling),
                cmocka_unit_test(test_samples_reach_ceiling_inclusive),
                cmocka_unit_test(test_full_jitter_covers_whole_window),
                cmocka_unit_test(test_same_seed_same_sequence),
                cmocka_unit_test(test_different_seeds_different_sequences),
                cmocka_unit_test(test_rng_uniform_zero_bound),
                cmocka_unit_test(test_rng_uniform_bound_inclusive),
                cmocka_unit_test(test_rng_uniform_full_range),
                cmocka_unit_test(test_rng_seed_zero_not_stuck),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
