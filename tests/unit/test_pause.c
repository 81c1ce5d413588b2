/* test_pause.c -- Pause sets: growing pauses, expiry, forgetting, (topic, key) scoping, the active list. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pause.h"

#define S USEC_PER_SEC

static void grows_and_caps(void **state) {
        struct pause_set s;
        usec_t now = 1000 * S;

        (void)state;
        pause_set_init(&s, 10 * S, 60 * S);
        assert_int_equal(pause_set_add(&s, "t", NULL, now), 10 * S);
        assert_int_equal(pause_set_add(&s, "t", NULL, now + 5 * S), 0); /* still paused */
        assert_true(pause_set_paused(&s, "t", NULL, now + 9 * S));
        assert_false(pause_set_paused(&s, "t", NULL, now + 10 * S));
        assert_int_equal(pause_set_add(&s, "t", NULL, now + 10 * S), 20 * S);
        assert_int_equal(pause_set_add(&s, "t", NULL, now + 30 * S), 40 * S);
        assert_int_equal(pause_set_add(&s, "t", NULL, now + 70 * S), 60 * S);
        assert_int_equal(pause_set_add(&s, "t", NULL, now + 130 * S), 60 * S);
        assert_true(pause_set_known(&s, "t", NULL));
        assert_false(pause_set_known(&s, "u", NULL));
        pause_set_done(&s);
}

static void forget_restarts_short(void **state) {
        struct pause_set s;

        (void)state;
        pause_set_init(&s, 2 * S, 100 * S);
        pause_set_add(&s, "a", NULL, 0);
        pause_set_add(&s, "a", NULL, 2 * S);
        pause_set_add(&s, "b", NULL, 0);
        assert_true(pause_set_forget(&s, "a", NULL));
        assert_false(pause_set_forget(&s, "a", NULL));
        assert_false(pause_set_known(&s, "a", NULL));
        assert_true(pause_set_known(&s, "b", NULL));
        assert_int_equal(pause_set_add(&s, "a", NULL, 10 * S), 2 * S);
        pause_set_done(&s);
}

static void active_lists_and_expiry(void **state) {
        struct pause_set s;
        const char *t[8], *k[8];

        (void)state;
        pause_set_init(&s, 10 * S, 10 * S);
        assert_int_equal(pause_set_active(&s, 0, t, k, 8), 0);
        pause_set_add(&s, "early", NULL, 0);
        pause_set_add(&s, "late", NULL, 5 * S);
        assert_int_equal(pause_set_active(&s, 6 * S, t, k, 8), 2);
        assert_int_equal(pause_set_active(&s, 6 * S, t, k, 1), 1); /* capped */
        assert_int_equal(pause_set_active(&s, 12 * S, t, NULL, 8), 1); /* only "late" is still paused */
        assert_string_equal(t[0], "late");
        /* the count /metrics shows: paused now, not the expired entry kept for its strikes */
        assert_int_equal(pause_set_count_active(&s, 0), 2);
        assert_int_equal(pause_set_count_active(&s, 12 * S), 1);
        assert_int_equal(pause_set_count_active(&s, 16 * S), 0);
        assert_int_equal(s.n, 2);
        pause_set_done(&s);
}

/* Order lives per (topic, key): the same key in another topic is another sequence. */
static void keys_are_scoped_to_their_topic(void **state) {
        struct pause_set s;
        const char *t[8], *k[8];

        (void)state;
        pause_set_init(&s, 10 * S, 60 * S);
        assert_int_equal(pause_set_add(&s, "ta", "k1", 0), 10 * S);
        assert_true(pause_set_paused(&s, "ta", "k1", S));
        assert_false(pause_set_paused(&s, "tb", "k1", S));
        assert_false(pause_set_known(&s, "ta", NULL));
        assert_false(pause_set_known(&s, "ta", "k2"));
        assert_int_equal(pause_set_add(&s, "tb", "k1", 0), 10 * S); /* its own entry, first strike */
        assert_int_equal(pause_set_active(&s, S, t, k, 8), 2);
        assert_string_equal(t[0], "ta");
        assert_string_equal(k[0], "k1");
        assert_string_equal(t[1], "tb");
        assert_true(pause_set_forget(&s, "tb", "k1"));
        assert_true(pause_set_known(&s, "ta", "k1"));
        pause_set_clear(&s);
        assert_int_equal(s.n, 0);
        assert_false(pause_set_known(&s, "ta", "k1"));
        pause_set_done(&s);
}

/* A full set refuses new entries, after making room from expired ones. */
static void bounded(void **state) {
        struct pause_set s;

        (void)state;
        pause_set_init(&s, 10 * S, 60 * S);
        s.max = 2;
        assert_true(pause_set_add(&s, "t", "a", 0) > 0);
        assert_true(pause_set_add(&s, "t", "b", 5 * S) > 0);
        assert_int_equal(pause_set_add(&s, "t", "c", 6 * S), 0); /* full, nothing expired */
        assert_false(pause_set_known(&s, "t", "c"));
        assert_true(pause_set_add(&s, "t", "c", 11 * S) > 0); /* "a" expired and made room */
        assert_false(pause_set_known(&s, "t", "a"));
        pause_set_done(&s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(grows_and_caps),
                cmocka_unit_test(forget_restarts_short),
                cmocka_unit_test(active_lists_and_expiry),
                cmocka_unit_test(keys_are_scoped_to_their_topic),
                cmocka_unit_test(bounded),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
