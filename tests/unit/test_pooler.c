/* test_pooler.c -- The signs that a connection's server session is shared (a pooler in transaction mode): which SQLSTATE in which step proves it, and whose member lock is held elsewhere, as tables of cases. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "pooler.h"

struct sign_case {
        const char *name;
        enum pooler_step step;
        const char *state;
        bool shared;
};

static const struct sign_case sign_cases[] = {
        { "a new connection finds its statement already there", POOLER_PREPARE, "42P05", true },
        { "a statement it prepared is unknown to the session", POOLER_EXECUTE, "26000", true },
        { "duplicate statement while executing: not ours to judge", POOLER_EXECUTE, "42P05", false },
        { "unknown statement while preparing: cannot be", POOLER_PREPARE, "26000", false },
        { "a table the statement names is gone (42P01)", POOLER_PREPARE, "42P01", false },
        { "a stale plan after ALTER TABLE (0A000)", POOLER_EXECUTE, "0A000", false },
        { "the claim's bound on lock waits (55P03)", POOLER_EXECUTE, "55P03", false },
        { "the server shutting down (57P01)", POOLER_EXECUTE, "57P01", false },
        { "no SQLSTATE (a broken stream)", POOLER_PREPARE, NULL, false },
        { "empty SQLSTATE", POOLER_EXECUTE, "", false },
        { "another step, duplicate statement", POOLER_OTHER, "42P05", false },
        { "another step, unknown statement", POOLER_OTHER, "26000", false },
};

static void sign_table(void **state) {
        (void)state;
        for (size_t i = 0; i < sizeof(sign_cases) / sizeof(sign_cases[0]); i++) {
                const struct sign_case *c = &sign_cases[i];
                bool got = pooler_sign(c->step, c->state);

                if (got != c->shared)
                        fail_msg("case '%s': pooler_sign says %d, expected %d", c->name, got, c->shared);
        }
}

#define MAXN 4

struct lock_case {
        const char *name;
        int slots[MAXN], pids[MAXN]; /* what pg_locks lists */
        size_t n;
        int own_slots[MAXN], own_pids[MAXN]; /* the relay's connections */
        size_t n_own;
        bool elsewhere;
};

static const struct lock_case lock_cases[] = {
        { "each slot on its own session", { 3, 7 }, { 100, 200 }, 2, { 3, 7 }, { 100, 200 }, 2, false },
        { "another relay's slots do not count", { 3, 9 }, { 100, 555 }, 2, { 3 }, { 100 }, 1, false },
        { "our slot on another backend", { 3, 7 }, { 100, 201 }, 2, { 3, 7 }, { 100, 200 }, 2, true },
        { "the only slot on another backend", { 4 }, { 300 }, 1, { 4 }, { 301 }, 1, true },
        { "a connection without a slot (-1)", { 3 }, { 100 }, 1, { -1, 3 }, { 999, 100 }, 2, false },
        { "our slot not listed (the look raced a reconnect)", { 9 }, { 555 }, 1, { 3 }, { 100 }, 1, false },
        { "nothing listed", { 0 }, { 0 }, 0, { 3 }, { 100 }, 1, false },
        { "no connection of ours", { 3 }, { 100 }, 1, { 0 }, { 0 }, 0, false },
        { "a slot held twice: one on ours, one elsewhere",
          { 5, 5 },
          { 100, 101 },
          2,
          { 5 },
          { 100 },
          1,
          true },
};

static void lock_table(void **state) {
        (void)state;
        for (size_t i = 0; i < sizeof(lock_cases) / sizeof(lock_cases[0]); i++) {
                const struct lock_case *c = &lock_cases[i];
                bool got =
                        pooler_lock_elsewhere(c->slots, c->pids, c->n, c->own_slots, c->own_pids, c->n_own);

                if (got != c->elsewhere)
                        fail_msg("case '%s': pooler_lock_elsewhere says %d, expected %d", c->name, got,
                                 c->elsewhere);
        }
}

/* The hint names the cause and the two ways out. */
static void hint_says_what_to_do(void **state) {
        (void)state;
        assert_non_null(strstr(pooler_hint, "connection pooler in transaction mode"));
        assert_non_null(strstr(pooler_hint, "connect directly"));
        assert_non_null(strstr(pooler_hint, "session pooling"));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(sign_table),
                cmocka_unit_test(lock_table),
                cmocka_unit_test(hint_says_what_to_do),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
