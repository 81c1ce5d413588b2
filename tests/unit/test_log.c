/* test_log.c -- Journal fields of events, event names and ids, level names. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "log.h"

/* The fields an operator filters on, in order, NUL-separated. */
static void event_fields(void **state) {
        char buf[1024];
        const char *extra[] = { "OUTBOX_ROW_ID=42", "OUTBOX_REASON=too large", NULL };
        const char *want[] = { "MESSAGE=row 42 dead-lettered",
                               "PRIORITY=4",
                               "MESSAGE_ID=ae0e40a5ea4e45998e4671e3aac24f58",
                               "OUTBOX_EVENT=dead_letter",
                               "SYSLOG_IDENTIFIER=outbox-relay",
                               "OUTBOX_ROW_ID=42",
                               "OUTBOX_REASON=too large" };
        int n;
        const char *p = buf;

        (void)state;
        n = log_event_fields(buf, sizeof(buf), LOG_WARNING, LOG_EV_DEAD_LETTER, extra,
                             "row 42 dead-lettered");
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
                        assert_string_not_equal(log_event_name((enum log_event)i),
                                                log_event_name((enum log_event)j));
                }
        }
        assert_string_equal(log_event_name(LOG_EV_BREAKER_OPEN), "breaker_open");
        assert_string_equal(log_event_name(_LOG_EV_MAX), "?");
}

/* README's journal table, pinned: operators filter on these names and ids, so neither may
 * change, and every event has its row. */
static const struct {
        enum log_event ev;
        const char *name, *id;
} readme_events[] = {
        { LOG_EV_STARTED, "started", "889fd886b460483ca313c667e966a6dc" },
        { LOG_EV_READY, "ready", "6c4a6e6ea42e4303abb914f1ce5b08a6" },
        { LOG_EV_SUMMARY, "summary", "7c66e008dd1041989935798ac2044162" },
        { LOG_EV_BREAKER_OPEN, "breaker_open", "f7baf0c754d7480fb56aa125330d1af4" },
        { LOG_EV_BREAKER_CLOSED, "breaker_closed", "21ec1d39ff97402f82fba60c8e540ce3" },
        { LOG_EV_DB_LOST, "database_lost", "a2dbe43c5c364f37b17a517cd913e21e" },
        { LOG_EV_DB_BACK, "database_back", "8c518785fb254eb7ab1ae7a905e4df03" },
        { LOG_EV_DEAD_LETTER, "dead_letter", "ae0e40a5ea4e45998e4671e3aac24f58" },
        { LOG_EV_RELOAD, "reload", "f811116ecf8b489bb50813baaa06eaeb" },
        { LOG_EV_STOPPING, "stopping", "9ac8e23043364ddebd5126910c3cbc0f" },
        { LOG_EV_STOPPED, "stopped", "b5e63d76dc0b4cd9964062cdf642702d" },
        { LOG_EV_KAFKA_ERROR, "kafka_error", "bff283e4b3bd45f5b6a12f31d326bbb0" },
        { LOG_EV_LEADER, "leader", "5e8386100b70467293dd11ae05598cd2" },
        { LOG_EV_SHARING, "sharing", "6e71abb407f247bf9f673532a680be38" },
        { LOG_EV_STANDBY, "standby", "c0e632ad6fc844df95ea2311430515da" },
};

/* Each event carries its README name and id in the fields journald gets. */
static void event_ids_pinned(void **state) {
        size_t n = sizeof(readme_events) / sizeof(readme_events[0]);

        (void)state;
        assert_int_equal(n, _LOG_EV_MAX);
        for (size_t i = 0; i < n; i++) {
                char buf[1024], want[64];
                const char *f = buf;

                assert_string_equal(log_event_name(readme_events[i].ev), readme_events[i].name);
                assert_string_equal(log_event_message_id(readme_events[i].ev), readme_events[i].id);
                assert_int_equal(
                        log_event_fields(buf, sizeof(buf), LOG_NOTICE, readme_events[i].ev, NULL, "m"), 5);
                f += strlen(f) + 1; /* MESSAGE= */
                f += strlen(f) + 1; /* PRIORITY= */
                snprintf(want, sizeof(want), "MESSAGE_ID=%s", readme_events[i].id);
                assert_string_equal(f, want);
                f += strlen(f) + 1;
                snprintf(want, sizeof(want), "OUTBOX_EVENT=%s", readme_events[i].name);
                assert_string_equal(f, want);
        }
}

/* The same, read from README.md itself ("### Journal fields"): the table operators read and the
 * code cannot drift apart, in either direction. */
static void event_ids_match_readme(void **state) {
        const char *srcdir = getenv("OUTBOX_RELAY_SRCDIR");
        char path[4096], *line = NULL;
        size_t cap = 0, rows = 0;
        bool in_table = false, seen[_LOG_EV_MAX] = { false };
        FILE *f;

        (void)state;
        if (!srcdir)
                fail_msg("OUTBOX_RELAY_SRCDIR is not set (run the test through meson test)");
        snprintf(path, sizeof(path), "%s/README.md", srcdir);
        f = fopen(path, "r");
        if (!f)
                fail_msg("cannot open %s", path);
        while (getline(&line, &cap, f) >= 0) {
                char name[64], id[64];
                const char *a, *b;
                int ev = -1;

                if (strncmp(line, "### Journal fields", 18) == 0) {
                        in_table = true;
                        continue;
                }
                if (!in_table)
                        continue;
                if (strncmp(line, "#", 1) == 0)
                        break; /* the next section */
                /* | `name` (comment) | `id` | extra fields | */
                if (strncmp(line, "| `", 3) != 0 || !(a = strchr(line + 3, '`')) ||
                    !(b = strchr(a + 1, '|')) || sscanf(line + 3, "%63[^`]", name) != 1 ||
                    sscanf(b + 1, " `%63[^`]`", id) != 1 || strlen(id) != 32)
                        continue;
                for (int i = 0; i < _LOG_EV_MAX; i++)
                        if (strcmp(log_event_name((enum log_event)i), name) == 0)
                                ev = i;
                if (ev < 0)
                        fail_msg("README names an event the relay does not have: '%s'", name);
                if (strcmp(log_event_message_id((enum log_event)ev), id) != 0)
                        fail_msg("README gives %s the MESSAGE_ID %s, the relay %s", name, id,
                                 log_event_message_id((enum log_event)ev));
                assert_false(seen[ev]);
                seen[ev] = true;
                rows++;
        }
        free(line);
        fclose(f);
        for (int i = 0; i < _LOG_EV_MAX; i++)
                if (!seen[i])
                        fail_msg("README's journal table has no row for '%s'",
                                 log_event_name((enum log_event)i));
        assert_int_equal(rows, _LOG_EV_MAX);
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
                cmocka_unit_test(event_fields),           cmocka_unit_test(event_fields_too_small),
                cmocka_unit_test(event_names_and_ids),    cmocka_unit_test(event_ids_pinned),
                cmocka_unit_test(event_ids_match_readme), cmocka_unit_test(level_names),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
