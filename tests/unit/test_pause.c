/* test_pause.c -- Pause sets: growing pauses, expiry, forgetting, the text[] literal. */
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
        assert_int_equal(pause_set_add(&s, "t", now), 10 * S);
        assert_int_equal(pause_set_add(&s, "t", now + 5 * S), 0); /* still paused */
        assert_true(pause_set_paused(&s, "t", now + 9 * S));
        assert_false(pause_set_paused(&s, "t", now + 10 * S));
        assert_int_equal(pause_set_add(&s, "t", now + 10 * S), 20 * S);
        assert_int_equal(pause_set_add(&s, "t", now + 30 * S), 40 * S);
        assert_int_equal(pause_set_add(&s, "t", now + 70 * S), 60 * S);
        assert_int_equal(pause_set_add(&s, "t", now + 130 * S), 60 * S);
        assert_true(pause_set_known(&s, "t"));
        assert_false(pause_set_known(&s, "u"));
        pause_set_done(&s);
}

static void forget_restarts_short(void **state) {
        struct pause_set s;

        (void)state;
        pause_set_init(&s, 2 * S, 100 * S);
        pause_set_add(&s, "a", 0);
        pause_set_add(&s, "a", 2 * S);
        pause_set_add(&s, "b", 0);
        assert_true(pause_set_forget(&s, "a"));
        assert_false(pause_set_forget(&s, "a"));
        assert_false(pause_set_known(&s, "a"));
        assert_true(pause_set_known(&s, "b"));
        assert_int_equal(pause_set_add(&s, "a", 10 * S), 2 * S);
        pause_set_done(&s);
}

static void literal_quotes_and_expiry(void **state) {
        struct pause_set s;
        char *lit;

        (void)state;
        pause_set_init(&s, 10 * S, 10 * S);
        lit = pause_set_literal(&s, 0);
        assert_string_equal(lit, "{}");
        free(lit);
        pause_set_add(&s, "plain", 0);
        pause_set_add(&s, "quo\"te", 0);
        pause_set_add(&s, "back\\slash", 0);
        pause_set_add(&s, "early", 0);
        pause_set_add(&s, "late", 5 * S);
        lit = pause_set_literal(&s, 6 * S);
        assert_string_equal(lit, "{\"plain\",\"quo\\\"te\",\"back\\\\slash\",\"early\",\"late\"}");
        free(lit);
        lit = pause_set_literal(&s, 12 * S); /* only "late" is still paused */
        assert_string_equal(lit, "{\"late\"}");
        free(lit);
        pause_set_done(&s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(grows_and_caps),
                cmocka_unit_test(forget_restarts_short),
                cmocka_unit_test(literal_quotes_and_expiry),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
