/* test_breaker.c -- Unit tests for the circuit breaker, driven by a fake clock and seeded RNG. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "breaker.h"

#define MS(x) ((usec_t)(x)*USEC_PER_MSEC)
#define SEC(x) ((usec_t)(x)*USEC_PER_SEC)

/* A ratio no full window can reach, to test the consecutive rule alone. */
#define NO_RATIO 2.0
/* A threshold no test reaches, to test the ratio rule alone. */
#define NO_THRESHOLD 1000

#define T0 SEC(1000)

/* Shortest open period for a cool-down `cd`: shortened by at most a fifth. */
static usec_t min_period(usec_t cd) {
        return cd - cd / 5;
}

/* Asserts the breaker is open for a period in [cd * 0.8, cd] counted from `now`. */
static void assert_open_for(const struct breaker *b, usec_t now, usec_t cd) {
        assert_int_equal(b->state, BREAKER_OPEN);
        assert_true(b->open_until >= now);
        assert_in_range(b->open_until - now, min_period(cd), cd);
}

/* Records failures until it opens; asserts it opens on exactly the `expected`-th one. */
static void open_by_failures(struct breaker *b, unsigned expected, usec_t now, struct rng *r) {
        for (unsigned i = 1; i < expected; i++)
                assert_int_equal(breaker_record(b, true, now, r), BREAKER_NONE);
        assert_int_equal(breaker_record(b, true, now, r), BREAKER_OPENED);
}

/* Advances the fake clock to the end of the open period and takes the probe. */
static void take_probe(struct breaker *b, usec_t *now) {
        enum breaker_event ev = BREAKER_CLOSED_AGAIN;

        *now = b->open_until;
        assert_true(breaker_allow(b, *now, &ev));
        assert_int_equal(ev, BREAKER_PROBING);
        assert_int_equal(b->state, BREAKER_HALF_OPEN);
}

static void test_starts_closed_and_allows(void **state) {
        struct breaker b;
        enum breaker_event ev = BREAKER_OPENED;
        usec_t now = T0;

        (void)state;
        assert_int_equal(breaker_init(&b, 3, 0.5, 10, SEC(10), SEC(60)), 0);
        assert_int_equal(b.state, BREAKER_CLOSED);
        assert_int_equal(b.consecutive, 0);
        assert_int_equal(b.ring_len, 0);
        assert_int_equal(b.ring_failures, 0);
        assert_int_equal(b.current_cooldown, SEC(10));
        assert_non_null(b.ring);
        for (int i = 0; i < 5; i++) {
                ev = BREAKER_OPENED;
                assert_true(breaker_allow(&b, now, &ev));
                assert_int_equal(ev, BREAKER_NONE);
                now += SEC(100);
        }
        /* A NULL event pointer is accepted. */
        assert_true(breaker_allow(&b, now, NULL));
        assert_int_equal(b.state, BREAKER_CLOSED);
        breaker_done(&b);
}

static void test_consecutive_failures_open_on_nth(void **state) {
        struct breaker b;
        struct rng r;
        usec_t now = T0;

        (void)state;
        rng_seed(&r, 1);
        assert_int_equal(breaker_init(&b, 5, NO_RATIO, 100, SEC(10), SEC(60)), 0);
        for (unsigned i = 1; i <= 4; i++) {
                assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_NONE);
                assert_int_equal(b.consecutive, i);
                assert_int_equal(b.state, BREAKER_CLOSED);
                assert_true(breaker_allow(&b, now, NULL));
                now += MS(10);
        }
        assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_OPENED);
        assert_open_for(&b, now, SEC(10));
        assert_false(breaker_allow(&b, now, NULL));
        breaker_done(&b);
}

static void test_success_resets_consecutive(void **state) {
        struct breaker b;
        struct rng r;
        usec_t now = T0;

        (void)state;
        rng_seed(&r, 2);
        assert_int_equal(breaker_init(&b, 3, NO_RATIO, 100, SEC(10), SEC(60)), 0);
        assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_NONE);
        assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_NONE);
        assert_int_equal(b.consecutive, 2);
        assert_int_equal(breaker_record(&b, false, now, &r), BREAKER_NONE);
        assert_int_equal(b.consecutive, 0);
        /* Two more would have made four in total, but only two in a row. */
        assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_NONE);
        assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_NONE);
        assert_int_equal(b.state, BREAKER_CLOSED);
        assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_OPENED);
        assert_int_equal(b.state, BREAKER_OPEN);
        breaker_done(&b);
}

static void test_threshold_zero_means_one(void **state) {
        struct breaker b;
        struct rng r;

        (void)state;
        rng_seed(&r, 3);
        assert_int_equal(breaker_init(&b, 0, NO_RATIO, 10, SEC(10), SEC(60)), 0);
        assert_int_equal(b.failure_threshold, 1);
        assert_int_equal(breaker_record(&b, false, T0, &r), BREAKER_NONE);
        assert_int_equal(breaker_record(&b, true, T0, &r), BREAKER_OPENED);
        breaker_done(&b);
}

/* Alternating outcomes with window 10 and ratio 0.5: the 10th record fills the window with
 * exactly 5 failures and opens it, whichever outcome comes first. */
static void alternating_opens_on_tenth(bool first_failure) {
        struct breaker b;
        struct rng r;
        usec_t now = T0;

        rng_seed(&r, 4);
        assert_int_equal(breaker_init(&b, NO_THRESHOLD, 0.5, 10, SEC(10), SEC(60)), 0);
        for (unsigned i = 1; i <= 9; i++) {
                bool failure = (i % 2 == 1) == first_failure;

                assert_int_equal(breaker_record(&b, failure, now, &r), BREAKER_NONE);
                assert_int_equal(b.ring_len, i);
                now += MS(1);
        }
        assert_int_equal(b.ring_failures, first_failure ? 5 : 4);
        assert_int_equal(breaker_record(&b, !first_failure, now, &r), BREAKER_OPENED);
        assert_open_for(&b, now, SEC(10));
        /* Opening clears the history. */
        assert_int_equal(b.ring_len, 0);
        assert_int_equal(b.ring_failures, 0);
        assert_int_equal(b.consecutive, 0);
        breaker_done(&b);
}

static void test_ratio_alternating_failure_first(void **state) {
        (void)state;
        /* The window fills with a success, yet 5 of 10 failed: it opens on that success. */
        alternating_opens_on_tenth(true);
}

static void test_ratio_alternating_success_first(void **state) {
        (void)state;
        alternating_opens_on_tenth(false);
}

static void test_ratio_below_never_opens(void **state) {
        /* Every 10 consecutive outcomes of this pattern hold exactly 4 failures. */
        static const bool pattern[] = { true, true, false, false, false };
        struct breaker b;
        struct rng r;
        usec_t now = T0;

        (void)state;
        rng_seed(&r, 5);
        assert_int_equal(breaker_init(&b, NO_THRESHOLD, 0.5, 10, SEC(10), SEC(60)), 0);
        for (unsigned i = 0; i < 1000; i++) {
                assert_int_equal(breaker_record(&b, pattern[i % ELEMENTSOF(pattern)], now, &r), BREAKER_NONE);
                now += MS(1);
        }
        assert_int_equal(b.state, BREAKER_CLOSED);
        assert_int_equal(b.ring_len, 10);
        assert_int_equal(b.ring_failures, 4);
        breaker_done(&b);
}

static void test_ratio_window_not_full_never_opens(void **state) {
        struct breaker b;
        struct rng r;

        (void)state;
        rng_seed(&r, 6);
        assert_int_equal(breaker_init(&b, NO_THRESHOLD, 0.5, 10, SEC(10), SEC(60)), 0);
        /* 9 of 9 failed: 100 %, but the window is not full yet. */
        for (unsigned i = 1; i <= 9; i++) {
                assert_int_equal(breaker_record(&b, true, T0, &r), BREAKER_NONE);
                assert_int_equal(b.ring_failures, i);
        }
        assert_int_equal(b.state, BREAKER_CLOSED);
        assert_int_equal(breaker_record(&b, true, T0, &r), BREAKER_OPENED);
        breaker_done(&b);
}

static void test_ratio_window_slides(void **state) {
        struct breaker b;
        struct rng r;

        (void)state;
        rng_seed(&r, 7);
        assert_int_equal(breaker_init(&b, NO_THRESHOLD, 0.5, 10, SEC(10), SEC(60)), 0);
        /* S S S S S S F F F F: full window, 4 failures. */
        for (unsigned i = 0; i < 6; i++)
                assert_int_equal(breaker_record(&b, false, T0, &r), BREAKER_NONE);
        for (unsigned i = 0; i < 4; i++)
                assert_int_equal(breaker_record(&b, true, T0, &r), BREAKER_NONE);
        assert_int_equal(b.ring_len, 10);
        assert_int_equal(b.ring_failures, 4);
        /* The 11th pushes out a success and makes it 5 of 10. */
        assert_int_equal(breaker_record(&b, true, T0, &r), BREAKER_OPENED);
        breaker_done(&b);
}

static void test_ratio_old_failures_slide_out(void **state) {
        struct breaker b;
        struct rng r;

        (void)state;
        rng_seed(&r, 8);
        assert_int_equal(breaker_init(&b, NO_THRESHOLD, 0.5, 10, SEC(10), SEC(60)), 0);
        /* F F F F S S S S S S, then four more successes push the failures out. */
        for (unsigned i = 0; i < 4; i++)
                assert_int_equal(breaker_record(&b, true, T0, &r), BREAKER_NONE);
        for (unsigned i = 0; i < 10; i++)
                assert_int_equal(breaker_record(&b, false, T0, &r), BREAKER_NONE);
        assert_int_equal(b.ring_len, 10);
        assert_int_equal(b.ring_failures, 0);
        /* Now 4 failures in the window again are not enough ... */
        for (unsigned i = 0; i < 4; i++)
                assert_int_equal(breaker_record(&b, true, T0, &r), BREAKER_NONE);
        assert_int_equal(b.ring_failures, 4);
        /* ... and the 5th is. */
        assert_int_equal(breaker_record(&b, true, T0, &r), BREAKER_OPENED);
        breaker_done(&b);
}

static void test_open_blocks_until_open_until(void **state) {
        struct breaker b;
        struct rng r;
        enum breaker_event ev;
        usec_t now = T0;

        (void)state;
        rng_seed(&r, 9);
        assert_int_equal(breaker_init(&b, 2, NO_RATIO, 10, SEC(10), SEC(60)), 0);
        open_by_failures(&b, 2, now, &r);
        assert_open_for(&b, now, SEC(10));
        for (now = T0; now < b.open_until; now += MS(500)) {
                ev = BREAKER_PROBING;
                assert_false(breaker_allow(&b, now, &ev));
                assert_int_equal(ev, BREAKER_NONE);
                assert_int_equal(b.state, BREAKER_OPEN);
        }
        ev = BREAKER_PROBING;
        assert_false(breaker_allow(&b, b.open_until - 1, &ev));
        assert_int_equal(ev, BREAKER_NONE);
        assert_int_equal(b.state, BREAKER_OPEN);
        breaker_done(&b);
}

static void test_open_period_jitter_bounds(void **state) {
        struct breaker b;
        unsigned distinct = 0, shortened = 0;
        usec_t first = 0;

        (void)state;
        for (uint64_t seed = 1; seed <= 200; seed++) {
                struct rng r;
                usec_t period;

                rng_seed(&r, seed);
                assert_int_equal(breaker_init(&b, 1, NO_RATIO, 10, SEC(10), SEC(60)), 0);
                open_by_failures(&b, 1, T0, &r);
                period = b.open_until - T0;
                /* Never longer than the cool-down, never shorter by more than a fifth. */
                assert_in_range(period, SEC(8), SEC(10));
                if (seed == 1)
                        first = period;
                else if (period != first)
                        distinct++;
                if (period < SEC(10))
                        shortened++;
                breaker_done(&b);
        }
        /* Different seeds do not all land on the same instant, and jitter really shortens. */
        assert_true(distinct > 0);
        assert_true(shortened > 0);
}

static void test_open_period_same_seed_same_result(void **state) {
        struct breaker a, b;
        struct rng ra, rb;

        (void)state;
        rng_seed(&ra, 77);
        rng_seed(&rb, 77);
        assert_int_equal(breaker_init(&a, 1, NO_RATIO, 10, SEC(10), SEC(60)), 0);
        assert_int_equal(breaker_init(&b, 1, NO_RATIO, 10, SEC(10), SEC(60)), 0);
        open_by_failures(&a, 1, T0, &ra);
        open_by_failures(&b, 1, T0, &rb);
        assert_int_equal(a.open_until, b.open_until);
        breaker_done(&a);
        breaker_done(&b);
}

static void test_cooldown_ends_with_exactly_one_probe(void **state) {
        struct breaker b;
        struct rng r;
        enum breaker_event ev;
        usec_t now = T0;

        (void)state;
        rng_seed(&r, 10);
        assert_int_equal(breaker_init(&b, 1, NO_RATIO, 10, SEC(10), SEC(60)), 0);
        open_by_failures(&b, 1, now, &r);
        now = b.open_until;
        ev = BREAKER_NONE;
        assert_true(breaker_allow(&b, now, &ev));
        assert_int_equal(ev, BREAKER_PROBING);
        assert_int_equal(b.state, BREAKER_HALF_OPEN);
        assert_true(b.probe_out);
        /* No second batch while the probe runs, however long it takes. */
        for (int i = 0; i < 10; i++) {
                ev = BREAKER_PROBING;
                assert_false(breaker_allow(&b, now, &ev));
                assert_int_equal(ev, BREAKER_NONE);
                assert_int_equal(b.state, BREAKER_HALF_OPEN);
                now += SEC(60);
        }
        assert_int_equal(breaker_record(&b, false, now, &r), BREAKER_CLOSED_AGAIN);
        assert_true(breaker_allow(&b, now, &ev));
        assert_int_equal(ev, BREAKER_NONE);
        breaker_done(&b);
}

static void test_probe_after_late_allow(void **state) {
        struct breaker b;
        struct rng r;
        enum breaker_event ev = BREAKER_NONE;

        (void)state;
        rng_seed(&r, 11);
        assert_int_equal(breaker_init(&b, 1, NO_RATIO, 10, SEC(10), SEC(60)), 0);
        open_by_failures(&b, 1, T0, &r);
        /* Long after the cool-down the first allow is still the single probe. */
        assert_true(breaker_allow(&b, T0 + SEC(3600), &ev));
        assert_int_equal(ev, BREAKER_PROBING);
        assert_false(breaker_allow(&b, T0 + SEC(3600), &ev));
        assert_int_equal(ev, BREAKER_NONE);
        breaker_done(&b);
}

static void test_probe_success_closes_and_clears_history(void **state) {
        struct breaker b;
        struct rng r;
        enum breaker_event ev;
        usec_t now = T0;

        (void)state;
        rng_seed(&r, 12);
        assert_int_equal(breaker_init(&b, 4, 0.5, 10, SEC(10), SEC(60)), 0);
        /* Fill the window with failures and successes first, then open by consecutive. */
        for (unsigned i = 0; i < 3; i++)
                assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_NONE);
        for (unsigned i = 0; i < 3; i++)
                assert_int_equal(breaker_record(&b, false, now, &r), BREAKER_NONE);
        open_by_failures(&b, 4, now, &r);
        take_probe(&b, &now);
        assert_int_equal(breaker_record(&b, false, now, &r), BREAKER_CLOSED_AGAIN);
        assert_int_equal(b.state, BREAKER_CLOSED);
        assert_false(b.probe_out);
        assert_int_equal(b.consecutive, 0);
        assert_int_equal(b.ring_len, 0);
        assert_int_equal(b.ring_failures, 0);
        assert_int_equal(b.current_cooldown, SEC(10));
        ev = BREAKER_PROBING;
        assert_true(breaker_allow(&b, now, &ev));
        assert_int_equal(ev, BREAKER_NONE);
        assert_true(breaker_allow(&b, now, &ev));
        /* threshold - 1 failures after closing do not reopen it ... */
        for (unsigned i = 0; i < 3; i++)
                assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_NONE);
        assert_int_equal(b.state, BREAKER_CLOSED);
        /* ... the threshold-th does. */
        assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_OPENED);
        assert_open_for(&b, now, SEC(10));
        breaker_done(&b);
}

static void test_probe_success_clears_ratio_window(void **state) {
        struct breaker b;
        struct rng r;
        usec_t now = T0;

        (void)state;
        rng_seed(&r, 13);
        assert_int_equal(breaker_init(&b, NO_THRESHOLD, 0.5, 10, SEC(10), SEC(60)), 0);
        open_by_failures(&b, 10, now, &r);
        take_probe(&b, &now);
        assert_int_equal(breaker_record(&b, false, now, &r), BREAKER_CLOSED_AGAIN);
        /* The probe's success is not counted in the window either: 9 more failures leave it
         * not full, the 10th fills it with 100 % failures. */
        for (unsigned i = 0; i < 9; i++)
                assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_NONE);
        assert_int_equal(b.ring_len, 9);
        assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_OPENED);
        breaker_done(&b);
}

static void test_probe_failure_doubles_cooldown_to_cap(void **state) {
        static const usec_t expected[] = { SEC(20), SEC(40), SEC(80), SEC(80), SEC(80) };
        struct breaker b;
        struct rng r;
        usec_t now = T0;

        (void)state;
        rng_seed(&r, 14);
        assert_int_equal(breaker_init(&b, 1, NO_RATIO, 10, SEC(10), SEC(80)), 0);
        open_by_failures(&b, 1, now, &r);
        assert_open_for(&b, now, SEC(10));
        for (size_t i = 0; i < ELEMENTSOF(expected); i++) {
                take_probe(&b, &now);
                now += MS(250); /* the probe takes a while */
                assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_REOPENED);
                assert_int_equal(b.current_cooldown, expected[i]);
                assert_false(b.probe_out);
                assert_open_for(&b, now, expected[i]);
                assert_false(breaker_allow(&b, now, NULL));
                assert_false(breaker_allow(&b, b.open_until - 1, NULL));
        }
        /* A successful probe closes it; the next opening is back at the base cool-down. */
        take_probe(&b, &now);
        assert_int_equal(breaker_record(&b, false, now, &r), BREAKER_CLOSED_AGAIN);
        assert_int_equal(b.current_cooldown, SEC(10));
        now += SEC(1);
        assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_OPENED);
        assert_open_for(&b, now, SEC(10));
        /* ... and a failed probe from there doubles from the base again. */
        take_probe(&b, &now);
        assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_REOPENED);
        assert_open_for(&b, now, SEC(20));
        breaker_done(&b);
}

static void test_probe_failure_cap_not_power_of_two(void **state) {
        struct breaker b;
        struct rng r;
        usec_t now = T0;

        (void)state;
        rng_seed(&r, 15);
        assert_int_equal(breaker_init(&b, 1, NO_RATIO, 10, SEC(10), SEC(35)), 0);
        open_by_failures(&b, 1, now, &r);
        take_probe(&b, &now);
        assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_REOPENED);
        assert_open_for(&b, now, SEC(20));
        take_probe(&b, &now);
        assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_REOPENED);
        /* 40 s would exceed the cap: it is 35 s. */
        assert_int_equal(b.current_cooldown, SEC(35));
        assert_open_for(&b, now, SEC(35));
        take_probe(&b, &now);
        assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_REOPENED);
        assert_int_equal(b.current_cooldown, SEC(35));
        assert_open_for(&b, now, SEC(35));
        breaker_done(&b);
}

static void test_stragglers_while_open_change_nothing(void **state) {
        struct breaker b;
        struct rng r;
        usec_t now = T0, open_until;
        uint64_t rng_state;

        (void)state;
        rng_seed(&r, 16);
        assert_int_equal(breaker_init(&b, 2, 0.5, 4, SEC(10), SEC(60)), 0);
        open_by_failures(&b, 2, now, &r);
        open_until = b.open_until;
        rng_state = r.state;
        for (int i = 0; i < 20; i++) {
                now += MS(100);
                assert_int_equal(breaker_record(&b, i % 3 != 0, now, &r), BREAKER_NONE);
                assert_int_equal(b.state, BREAKER_OPEN);
                assert_int_equal(b.open_until, open_until);
                assert_int_equal(b.current_cooldown, SEC(10));
                assert_int_equal(b.consecutive, 0);
                assert_int_equal(b.ring_len, 0);
                assert_int_equal(b.ring_failures, 0);
                assert_int_equal(b.ring_pos, 0);
                assert_false(b.probe_out);
                assert_int_equal(r.state, rng_state);
        }
        /* Even after open_until, until someone asks to run a batch. */
        assert_int_equal(breaker_record(&b, true, open_until + SEC(1), &r), BREAKER_NONE);
        assert_int_equal(b.state, BREAKER_OPEN);
        assert_int_equal(b.open_until, open_until);
        /* The probe still works normally afterwards. */
        take_probe(&b, &now);
        assert_int_equal(now, open_until);
        assert_int_equal(breaker_record(&b, false, now, &r), BREAKER_CLOSED_AGAIN);
        assert_int_equal(b.consecutive, 0);
        assert_int_equal(b.ring_len, 0);
        breaker_done(&b);
}

static void test_permanent_errors_do_not_count(void **state) {
        struct breaker b;
        struct rng r;
        usec_t now = T0;

        (void)state;
        rng_seed(&r, 17);
        /* The relay records a batch whose rows hit only permanent errors as success. Two
         * transient failures, one such batch, repeated: never three in a row. */
        assert_int_equal(breaker_init(&b, 3, NO_RATIO, 10, SEC(10), SEC(60)), 0);
        for (int i = 0; i < 100; i++) {
                assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_NONE);
                assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_NONE);
                assert_int_equal(breaker_record(&b, false, now, &r), BREAKER_NONE);
                now += MS(100);
        }
        assert_int_equal(b.state, BREAKER_CLOSED);
        assert_int_equal(b.consecutive, 0);
        breaker_done(&b);

        /* The same failures without the interleaved batches open it on the third. */
        assert_int_equal(breaker_init(&b, 3, NO_RATIO, 10, SEC(10), SEC(60)), 0);
        open_by_failures(&b, 3, now, &r);
        breaker_done(&b);
}

static void test_cancel_probe_lets_next_batch_probe(void **state) {
        struct breaker b;
        struct rng r;
        enum breaker_event ev;
        usec_t now = T0, open_until;

        (void)state;
        rng_seed(&r, 21);
        assert_int_equal(breaker_init(&b, 1, NO_RATIO, 10, SEC(10), SEC(60)), 0);
        /* Closed: cancelling changes nothing, batches still flow. */
        breaker_cancel_probe(&b);
        assert_int_equal(b.state, BREAKER_CLOSED);
        assert_false(b.probe_out);
        open_by_failures(&b, 1, now, &r);
        open_until = b.open_until;
        /* Open: cancelling neither ends the cool-down nor hands out a probe. */
        breaker_cancel_probe(&b);
        assert_int_equal(b.state, BREAKER_OPEN);
        assert_int_equal(b.open_until, open_until);
        assert_false(breaker_allow(&b, open_until - 1, NULL));
        take_probe(&b, &now);
        assert_false(breaker_allow(&b, now, NULL));
        /* The probe found nothing to send: the next batch is the probe, once. */
        breaker_cancel_probe(&b);
        assert_int_equal(b.state, BREAKER_HALF_OPEN);
        assert_false(b.probe_out);
        ev = BREAKER_OPENED;
        assert_true(breaker_allow(&b, now, &ev));
        assert_int_equal(ev, BREAKER_NONE); /* PROBING was already reported */
        assert_true(b.probe_out);
        assert_false(breaker_allow(&b, now, &ev));
        assert_int_equal(ev, BREAKER_NONE);
        /* Its outcome counts as the probe's. */
        assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_REOPENED);
        assert_open_for(&b, now, SEC(20));
        breaker_done(&b);
}

static void test_init_rejects_bad_window(void **state) {
        struct breaker b;

        (void)state;
        assert_int_equal(breaker_init(&b, 3, 0.5, 0, SEC(10), SEC(60)), -EINVAL);
        assert_null(b.ring);
        breaker_done(&b); /* harmless after a failed init */
        assert_int_equal(breaker_init(&b, 3, 0.5, BREAKER_WINDOW_MAX + 1, SEC(10), SEC(60)), -EINVAL);
        assert_null(b.ring);
        assert_int_equal(breaker_init(&b, 3, 0.5, UINT32_MAX, SEC(10), SEC(60)), -EINVAL);
        assert_null(b.ring);

        assert_int_equal(breaker_init(&b, 3, 0.5, BREAKER_WINDOW_MAX, SEC(10), SEC(60)), 0);
        assert_non_null(b.ring);
        assert_int_equal(b.window, BREAKER_WINDOW_MAX);
        breaker_done(&b);
        assert_int_equal(breaker_init(&b, 3, 0.5, 1, SEC(10), SEC(60)), 0);
        assert_int_equal(b.window, 1);
        breaker_done(&b);
}

static void test_window_of_one(void **state) {
        struct breaker b;
        struct rng r;

        (void)state;
        rng_seed(&r, 18);
        assert_int_equal(breaker_init(&b, NO_THRESHOLD, 0.5, 1, SEC(10), SEC(60)), 0);
        for (int i = 0; i < 5; i++)
                assert_int_equal(breaker_record(&b, false, T0, &r), BREAKER_NONE);
        assert_int_equal(b.ring_len, 1);
        assert_int_equal(breaker_record(&b, true, T0, &r), BREAKER_OPENED);
        breaker_done(&b);
}

static void test_cooldown_max_below_cooldown_is_clamped(void **state) {
        struct breaker b;
        struct rng r;
        usec_t now = T0;

        (void)state;
        rng_seed(&r, 19);
        assert_int_equal(breaker_init(&b, 1, NO_RATIO, 10, SEC(30), SEC(5)), 0);
        assert_int_equal(b.cooldown, SEC(30));
        assert_int_equal(b.cooldown_max, SEC(30));
        open_by_failures(&b, 1, now, &r);
        assert_open_for(&b, now, SEC(30));
        /* Failed probes cannot grow it past the clamped cap. */
        for (int i = 0; i < 3; i++) {
                take_probe(&b, &now);
                assert_int_equal(breaker_record(&b, true, now, &r), BREAKER_REOPENED);
                assert_int_equal(b.current_cooldown, SEC(30));
                assert_open_for(&b, now, SEC(30));
        }
        breaker_done(&b);
}

static void test_done_frees_and_is_idempotent(void **state) {
        struct breaker b;
        struct rng r;

        (void)state;
        rng_seed(&r, 20);
        /* Many init/done cycles of a large window: ASan reports any leak. */
        for (int i = 0; i < 50; i++) {
                assert_int_equal(breaker_init(&b, 2, 0.5, BREAKER_WINDOW_MAX, SEC(1), SEC(2)), 0);
                open_by_failures(&b, 2, T0, &r);
                breaker_done(&b);
                assert_null(b.ring);
        }
        breaker_done(&b);
        assert_null(b.ring);
}

static void test_state_to_string(void **state) {
        (void)state;
        assert_string_equal(breaker_state_to_string(BREAKER_CLOSED), "closed");
        assert_string_equal(breaker_state_to_string(BREAKER_OPEN), "open");
        assert_string_equal(breaker_state_to_string(BREAKER_HALF_OPEN), "half-open");
        assert_string_equal(breaker_state_to_string((enum breaker_state)42), "?");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_starts_closed_and_allows),
                cmocka_unit_test(test_consecutive_failures_open_on_nth),
                cmocka_unit_test(test_success_resets_consecutive),
                cmocka_unit_test(test_threshold_zero_means_one),
                cmocka_unit_test(test_ratio_alternating_failure_first),
                cmocka_unit_test(test_ratio_alternating_success_first),
                cmocka_unit_test(test_ratio_below_never_opens),
                cmocka_unit_test(test_ratio_window_not_full_never_opens),
                cmocka_unit_test(test_ratio_window_slides),
                cmocka_unit_test(test_ratio_old_failures_slide_out),
                cmocka_unit_test(test_open_blocks_until_open_until),
                cmocka_unit_test(test_open_period_jitter_bounds),
                cmocka_unit_test(test_open_period_same_seed_same_result),
                cmocka_unit_test(test_cooldown_ends_with_exactly_one_probe),
                cmocka_unit_test(test_probe_after_late_allow),
                cmocka_unit_test(test_probe_success_closes_and_clears_history),
                cmocka_unit_test(test_probe_success_clears_ratio_window),
                cmocka_unit_test(test_probe_failure_doubles_cooldown_to_cap),
                cmocka_unit_test(test_probe_failure_cap_not_power_of_two),
                cmocka_unit_test(test_stragglers_while_open_change_nothing),
                cmocka_unit_test(test_permanent_errors_do_not_count),
                cmocka_unit_test(test_cancel_probe_lets_next_batch_probe),
                cmocka_unit_test(test_init_rejects_bad_window),
                cmocka_unit_test(test_window_of_one),
                cmocka_unit_test(test_cooldown_max_below_cooldown_is_clamped),
                cmocka_unit_test(test_done_frees_and_is_idempotent),
                cmocka_unit_test(test_state_to_string),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
