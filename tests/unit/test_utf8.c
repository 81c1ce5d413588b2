/* test_utf8.c -- Cutting and repairing the text that goes into last_error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "utf8.h"

static void repair(void **state) {
        static const struct {
                const char *in, *out;
        } cases[] = {
                { "", "" },
                { "plain ascii", "plain ascii" },
                { "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80" },
                /* cut at the end: dropped (what a byte-counted truncation leaves) */
                { "header 'x\xf0\x9f\x98", "header 'x" },
                { "ab\xe2\x82", "ab" },
                { "ab\xc3", "ab" },
                { "ab\xf0", "ab" },
                /* cut in the middle (a truncated part with text after it): replaced */
                { "topic 'a\xc3' can", "topic 'a?' can" },
                { "x\xf0\x9f\x98y", "x???y" },
                /* never well formed */
                { "\xff\xfe", "??" },
                { "\xc0\xaf", "??" }, /* overlong '/' */
                { "\xe0\x80\xaf", "???" }, /* overlong */
                { "\xed\xa0\x80", "???" }, /* a surrogate */
                { "\xf4\x90\x80\x80", "????" }, /* above U+10FFFF */
                { "\x80tail", "?tail" },
        };

        (void)state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char buf[64];

                strcpy(buf, cases[i].in);
                assert_int_equal(utf8_repair(buf), strlen(cases[i].out));
                assert_string_equal(buf, cases[i].out);
        }
}

static void fit(void **state) {
        static const struct {
                const char *s;
                size_t max, want;
        } cases[] = {
                { "abc", 10, 3 },
                { "abc", 2, 2 },
                { "abc", 0, 0 },
                { "a\xc3\xb6\xc3\xb6", 2, 1 }, /* not inside the first 'ö' */
                { "a\xc3\xb6\xc3\xb6", 3, 3 },
                { "a\xc3\xb6\xc3\xb6", 4, 3 },
                { "\xf0\x9f\x98\x80x", 3, 0 },
                { "\xf0\x9f\x98\x80x", 4, 4 },
                { "\xffz", 1, 1 }, /* a stray byte counts as one */
        };

        (void)state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
                assert_int_equal(utf8_fit(cases[i].s, cases[i].max), cases[i].want);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(repair),
                cmocka_unit_test(fit),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
