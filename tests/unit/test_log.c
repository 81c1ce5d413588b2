/* test_log.c -- Journal fields of events, event names and ids, level names. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "log.h"

/* The fields an operator filters on, in order, NUL-separated. */
static void event_fields(void **state) {
        char buf[1024];
        const char *extra[] = {"OUTBOX_ROW_ID=42", "OUTBOX_REASON=too large", NULL};
        const char *want[] = {"MESSAGE=row 42 dead-lettered", "PRIORITY=4",
                              "MESSAGE_ID=ae0e40a5ea4e45998e4671e3aac24f58", "OUTBOX_EVENT=dead_letter",
                              "SYSLOG_IDENTIFIER=outbox-relay", "OUTBOX_ROW_ID=42", "OUTBOX_REASON=too large"};
        int n;
        const char *p = buf;

        (void)state;
        n = log_event_fields(buf, sizeof(buf), LOG_WARNING, LOG_EV_DEAD_LETTER, extra, "row 42 dead-lettered");
        assert_int_equal(n, 7);
        for (int i = 0; i < n; i++) {
                assert_string_equal(p, want[i]);
                p += strlen(p) + 1;
        }
        n = log_event_fields(buf, sizeof(buf), LOG_INFO, LOG_EV_READY, NULL, "ready");
        assert_int_equal(n, 5);
        assert_string_equal(buf + strlen(buf) + 1, "PRIORITY=6");
}

static void event_fields_too_small(void **state) {
        char buf[40];

        (void)state;
        assert_int_equal(log_event_fields(buf, sizeof(buf), LOG_INFO, LOG_EV_READY, NULL, "ready"), -ENOBUFS);
}

/* Every event has a distinct name and a distinct 128-bit id in journald's form. */
static void event_names_and_ids(void **state) {
        (void)state;
        for (int i = 0; i < _LOG_EV_MAX; i++) {
                const char *id = log_event_message_id((enum log_event)i);

                assert_int_equal(strlen(id), 32);
                assert_int_equal(strspn(id, "0123456789abcdef"), 32);
                assert_true(strlen(log_event_name((enum log_event)i)) > 0);
                for (int j = 0; j < i; j++) {
                        assert_string_not_equal(id, log_event_message_id((enum log_event)j));
                        assert_string_not_equal(log_event_name((enum log_event)i), log_event_name((enum log_event)j));
                }
        }
        assert_string_equal(log_event_name(LOG_EV_BREAKER_OPEN), "breaker_open");
        assert_string_equal(log_event_name(_LOG_EV_MAX), "?");
}

static void level_names(void **state) {
        (void)state;
        assert_int_equal(log_level_from_string("error"), LOG_ERR);
        assert_int_equal(log_level_from_string("warning"), LOG_WARNING);
        assert_int_equal(log_level_from_string("notice"), LOG_NOTICE);
        assert_int_equal(log_level_from_string("info"), LOG_INFO);
        assert_int_equal(log_level_from_string("debug"), LOG_DEBUG);
        assert_int_equal(log_level_from_string("verbose"), -EINVAL);
        assert_string_equal(log_level_to_string(LOG_NOTICE), "notice");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(event_fields),
                cmocka_unit_test(event_fields_too_small),
                cmocka_unit_test(event_names_and_ids),
                cmocka_unit_test(level_names),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
