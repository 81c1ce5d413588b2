/* test_overlap.c -- Several batches in flight: when the next claim may come and from where, and how a batch that follows another waits for, sends or holds back its rows of the same (topic, key). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "batch.h"
#include "overlap.h"

/* One claim of a sequence, as overlap_claimed() hears of it. */
struct claim {
        size_t got, limit;
        int64_t highest;
        bool covers;
        int64_t proven;
};

struct next_case {
        const char *name;
        struct claim claims[4]; /* made one after another, none finished */
        size_t n_claims;
        bool ordered;
        struct overlap_rules rules; /* in_flight is n_claims unless given */
        enum overlap_form form;
        int64_t start;
};

#define FULL(hi, pr) \
        { 100, 100, hi, true, pr }
#define RULES(pipes) \
        { 0, pipes, false, false }

static const struct next_case next_cases[] = {
        { "nothing in flight: from the floor", { { 0 } }, 0, true, RULES(2), OVERLAP_FLOOR, 0 },
        { "a full claim below what the floor proved: chain right after it",
          { FULL(1100, 5000) },
          1,
          true,
          RULES(2),
          OVERLAP_CHAIN,
          1101 },
        { "as many in flight as pipelines: wait",
          { FULL(1100, 5000), FULL(1200, 5000) },
          2,
          true,
          RULES(2),
          OVERLAP_WAIT,
          0 },
        { "three pipelines: the chain goes on after the newest",
          { FULL(1100, 5000), FULL(1200, 5000) },
          2,
          true,
          RULES(3),
          OVERLAP_CHAIN,
          1201 },
        { "a short claim reached the end: wait for the flight",
          { { 40, 100, 1100, true, 5000 } },
          1,
          true,
          RULES(2),
          OVERLAP_WAIT,
          0 },
        { "an empty claim: wait", { { 0, 100, 0, true, 5000 } }, 1, true, RULES(2), OVERLAP_WAIT, 0 },
        { "its highest id is past what is proven: a row may still commit below it, wait",
          { FULL(5001, 5000) },
          1,
          true,
          RULES(2),
          OVERLAP_WAIT,
          0 },
        { "exactly the proven id: chain", { FULL(5000, 5000) }, 1, true, RULES(2), OVERLAP_CHAIN, 5001 },
        { "nothing proven yet: wait", { FULL(1100, 0) }, 1, true, RULES(2), OVERLAP_WAIT, 0 },
        { "ordering \"none\" owes no order: chain past what is proven",
          { FULL(9000, 0) },
          1,
          false,
          RULES(2),
          OVERLAP_CHAIN,
          9001 },
        { "a claim that may have skipped rows (something paused): wait",
          { { 100, 100, 1100, false, 5000 } },
          1,
          true,
          RULES(2),
          OVERLAP_WAIT,
          0 },
        { "serial (a probe, pauses, a stop): wait",
          { FULL(1100, 5000) },
          1,
          true,
          { 0, 2, false, true },
          OVERLAP_WAIT,
          0 },
        { "sharing the table, nothing in flight: from the floor (with bucket locks)",
          { { 0, 0, 0, false, 0 } },
          0,
          true,
          { 0, 2, true, false },
          OVERLAP_FLOOR,
          0 },
        { "sharing the table: one batch at a time, the other relays overlap it",
          { { 100, 100, 1100, false, 0 } },
          1,
          true,
          { 0, 2, true, false },
          OVERLAP_WAIT,
          0 },
        { "sharing, a chain batch of before in flight: wait (a claim would wait for its rows)",
          { FULL(1100, 5000) },
          1,
          true,
          { 0, 2, true, false },
          OVERLAP_WAIT,
          0 },
        { "one pipeline: never two batches", { FULL(1100, 5000) }, 1, true, RULES(1), OVERLAP_WAIT, 0 },
};

static void next_table(void **state) {
        (void)state;
        for (size_t i = 0; i < ELEMENTSOF(next_cases); i++) {
                const struct next_case *c = &next_cases[i];
                struct overlap_rules rules = c->rules;
                struct overlap o;
                struct overlap_next n;

                print_message("# %s\n", c->name);
                overlap_init(&o);
                for (size_t j = 0; j < c->n_claims; j++) {
                        const struct claim *k = &c->claims[j];

                        overlap_claimed(&o, k->got, k->limit, k->highest, k->covers, k->proven, c->ordered);
                }
                rules.in_flight = c->n_claims;
                n = overlap_next(&o, &rules);
                assert_int_equal(n.form, c->form);
                if (n.form == OVERLAP_CHAIN)
                        assert_int_equal(n.start, c->start);
        }
}

static void a_batch_that_left_rows_breaks_the_chain_until_the_flight_is_empty(void **state) {
        struct overlap o;
        struct overlap_rules rules = RULES(3);

        (void)state;
        overlap_init(&o);
        overlap_claimed(&o, 100, 100, 1100, true, 5000, true);
        overlap_claimed(&o, 100, 100, 1200, true, 5000, true);
        /* The older one finished cleanly: the chain goes on after the newest. */
        overlap_finished(&o, false, 1);
        rules.in_flight = 1;
        assert_int_equal(overlap_next(&o, &rules).form, OVERLAP_CHAIN);
        assert_int_equal(overlap_next(&o, &rules).start, 1201);
        /* A batch that left rows pending: they lie below the chain. */
        overlap_claimed(&o, 100, 100, 1300, true, 5000, true);
        overlap_finished(&o, true, 1);
        assert_int_equal(overlap_next(&o, &rules).form, OVERLAP_WAIT);
        /* Nothing in flight any more: from the floor, and the chain begins anew. */
        overlap_finished(&o, false, 0);
        rules.in_flight = 0;
        assert_int_equal(overlap_next(&o, &rules).form, OVERLAP_FLOOR);
        overlap_claimed(&o, 100, 100, 1400, true, 5000, true);
        rules.in_flight = 1;
        assert_int_equal(overlap_next(&o, &rules).form, OVERLAP_CHAIN);
        /* Rows put back in line below the floor: no chaining until the flight is empty. */
        overlap_break(&o);
        assert_int_equal(overlap_next(&o, &rules).form, OVERLAP_WAIT);
}

static void the_chain_starts_again_from_the_floor_now_and_then(void **state) {
        struct overlap o;
        struct overlap_rules rules = RULES(2);
        size_t chained = 0;

        (void)state;
        overlap_init(&o);
        rules.in_flight = 1;
        overlap_claimed(&o, 100, 100, 100, true, 0, false);
        /* Two pipelines, each finishing as the next is claimed: the flight is never empty. */
        for (int64_t hi = 200; overlap_next(&o, &rules).form == OVERLAP_CHAIN; hi += 100) {
                overlap_claimed(&o, 100, 100, hi, true, 0, false);
                overlap_finished(&o, false, 1);
                chained++;
        }
        assert_int_equal(chained, OVERLAP_CHAIN_MAX - 1);
        assert_int_equal(overlap_next(&o, &rules).form, OVERLAP_WAIT);
        overlap_finished(&o, false, 0);
        rules.in_flight = 0;
        assert_int_equal(overlap_next(&o, &rules).form, OVERLAP_FLOOR);
}

/* Two batches: A (earlier, in flight) and B (claimed after it). */
struct row_spec {
        const char *topic, *key;
};

static void make(struct batch *b, const struct row_spec *rows, size_t n, int64_t first_id) {
        assert_int_equal(batch_init(b, n), 0);
        for (size_t i = 0; i < n; i++)
                b->rows[i] = (struct batch_row){ .id = first_id + (int64_t)i,
                                                 .topic = rows[i].topic,
                                                 .key = rows[i].key };
        assert_int_equal(batch_prepare(b), 0);
}

/* What happens in A to its rows of key "k" before B asks. */
enum a_fate { A_IN_FLIGHT, A_DELIVERED, A_FAILED, A_TOO_LARGE, A_HELD, A_SUSPECT, A_PLANNED_LEFT };

struct follow_case {
        const char *name;
        enum a_fate fate;
        enum send_answer first, second; /* B's first and second row of key "k" */
};

static const struct follow_case follow_cases[] = {
        { "A's rows of the key still in flight: B waits", A_IN_FLIGHT, SEND_WAIT, SEND_WAIT },
        { "A's rows delivered: B sends", A_DELIVERED, SEND_NOW, SEND_WAIT },
        { "one of A's rows failed (a transient error): B never sends behind it", A_FAILED, SEND_HOLD,
          SEND_WAIT },
        { "A's row is dead on its own (too large): it is never sent, so B may go", A_TOO_LARGE, SEND_NOW,
          SEND_WAIT },
        { "A held its row back: B holds too", A_HELD, SEND_HOLD, SEND_WAIT },
        { "A's row is a suspect still to be re-sent alone: B waits", A_SUSPECT, SEND_WAIT, SEND_WAIT },
        { "A was planned with its row left pending: B holds", A_PLANNED_LEFT, SEND_HOLD, SEND_WAIT },
};

static void follow_table(void **state) {
        (void)state;
        for (size_t i = 0; i < ELEMENTSOF(follow_cases); i++) {
                const struct follow_case *c = &follow_cases[i];
                const struct row_spec a_rows[] = { { "t", "k" }, { "t", "x" }, { "t", "k" }, { "u", "k" } };
                const struct row_spec b_rows[] = {
                        { "t", "k" }, { "t", "y" }, { "t", "k" }, { "t", NULL }, { "u", "k" }
                };
                struct batch a, b;
                struct batch_rules rules = { .max_attempts = 10 };

                print_message("# %s\n", c->name);
                make(&a, a_rows, ELEMENTSOF(a_rows), 1);
                make(&b, b_rows, ELEMENTSOF(b_rows), 100);
                for (size_t j = 0; j < a.n; j++)
                        batch_sent(&a, j, false);
                /* The other rows of A are delivered; "t"/"k" goes as the case says. */
                batch_reported(&a, 1, RD_KAFKA_RESP_ERR_NO_ERROR, 0);
                batch_reported(&a, 3, RD_KAFKA_RESP_ERR_NO_ERROR, 0);
                batch_reported(&a, 0, RD_KAFKA_RESP_ERR_NO_ERROR, 0);
                switch (c->fate) {
                case A_IN_FLIGHT:
                        break;
                case A_DELIVERED:
                        batch_reported(&a, 2, RD_KAFKA_RESP_ERR_NO_ERROR, 0);
                        break;
                case A_FAILED:
                        batch_reported(&a, 2, RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, 0);
                        break;
                case A_TOO_LARGE:
                        batch_refused(&a, 2, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
                        break;
                case A_HELD:
                        batch_held(&a, 2);
                        break;
                case A_SUSPECT:
                        batch_reported(&a, 2, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, 0);
                        break;
                case A_PLANNED_LEFT:
                        batch_reported(&a, 2, RD_KAFKA_RESP_ERR__PURGE_INFLIGHT, 0);
                        batch_plan(&a, &rules, NULL);
                        break;
                }
                batch_follow(&b, &a);
                if (c->fate == A_PLANNED_LEFT) {
                        /* Planned: decided at once, no link into A. */
                        assert_null(b.rows[0].after);
                        assert_true(b.rows[0].after_blocked);
                } else {
                        assert_ptr_equal(b.rows[0].after, &a);
                        assert_int_equal(b.rows[0].after_row, 2); /* A's last row of "t"/"k" */
                }
                assert_null(b.rows[1].after); /* "t"/"y": not in A */
                assert_null(b.rows[2].after); /* not the first of its key in B: follows row 0 */
                assert_null(b.rows[3].after); /* no key, no order */
                if (c->fate != A_PLANNED_LEFT) {
                        assert_ptr_equal(b.rows[4].after, &a); /* "u"/"k": another sequence */
                        assert_int_equal(b.rows[4].after_row, 3);
                } else {
                        assert_false(b.rows[4].after_blocked); /* A delivered "u"/"k" */
                }

                assert_int_equal(batch_send_answer(&b, 0), c->first);
                if (c->first == SEND_NOW)
                        batch_sent(&b, 0, false);
                else if (c->first == SEND_HOLD)
                        batch_held(&b, 0);
                else
                        batch_waiting(&b, 0);
                /* The second row of the key in B follows the first, within B. */
                assert_int_equal(batch_send_answer(&b, 2),
                                 c->first == SEND_NOW            ? SEND_NOW
                                         : c->first == SEND_HOLD ? SEND_HOLD
                                                                 : c->second);
                assert_int_equal(batch_send_answer(&b, 1), SEND_NOW);
                assert_int_equal(batch_send_answer(&b, 3), SEND_NOW);
                assert_int_equal(batch_send_answer(&b, 4), SEND_NOW); /* A delivered "u"/"k" */
                assert_int_equal(b.waiting, c->first == SEND_WAIT ? 1 : 0);
                batch_free(&a);
                batch_free(&b);
        }
}

static void the_newest_earlier_batch_is_followed(void **state) {
        const struct row_spec one[] = { { "t", "k" } };
        struct batch a, b, c;

        (void)state;
        make(&a, one, 1, 1);
        make(&b, one, 1, 2);
        make(&c, one, 1, 3);
        batch_follow(&b, &a);
        /* Newest first: C follows B, and then A no more. */
        batch_follow(&c, &b);
        batch_follow(&c, &a);
        assert_ptr_equal(c.rows[0].after, &b);
        batch_sent(&a, 0, false);
        batch_reported(&a, 0, RD_KAFKA_RESP_ERR_NO_ERROR, 0);
        /* A delivered, B not yet sent: C still waits for B. */
        assert_int_equal(batch_send_answer(&b, 0), SEND_NOW);
        assert_int_equal(batch_send_answer(&c, 0), SEND_WAIT);
        batch_waiting(&b, 0);
        assert_int_equal(batch_send_answer(&c, 0), SEND_WAIT);
        batch_sent(&b, 0, false);
        assert_int_equal(batch_send_answer(&c, 0), SEND_WAIT);
        batch_reported(&b, 0, RD_KAFKA_RESP_ERR_NO_ERROR, 0);
        assert_int_equal(batch_send_answer(&c, 0), SEND_NOW);
        batch_free(&a);
        batch_free(&b);
        batch_free(&c);
}

/* A batch planned before the later one was claimed: no pointer into it (it may be freed first),
 * its verdict taken at once. */
static void a_planned_batch_is_decided_at_once(void **state) {
        const struct row_spec rows[] = { { "t", "ok" }, { "t", "bad" } };
        const struct row_spec later[] = { { "t", "ok" }, { "t", "bad" }, { "t", "new" } };
        struct batch a, b;
        struct batch_rules rules = { .max_attempts = 10 };

        (void)state;
        make(&a, rows, 2, 1);
        batch_sent(&a, 0, false);
        batch_reported(&a, 0, RD_KAFKA_RESP_ERR_NO_ERROR, 0);
        batch_sent(&a, 1, false);
        batch_reported(&a, 1, RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, 0);
        batch_plan(&a, &rules, NULL);
        make(&b, later, 3, 10);
        batch_follow(&b, &a);
        batch_free(&a); /* gone before b sends: b must not need it */
        for (size_t i = 0; i < 3; i++)
                assert_null(b.rows[i].after);
        assert_int_equal(batch_send_answer(&b, 0), SEND_NOW);
        assert_int_equal(batch_send_answer(&b, 1), SEND_HOLD);
        assert_int_equal(batch_send_answer(&b, 2), SEND_NOW);
        batch_free(&b);
}

static void a_row_still_waiting_when_planned_is_left_pending(void **state) {
        const struct row_spec rows[] = { { "t", "k" }, { "t", "z" } };
        struct batch b;
        struct batch_rules rules = { .max_attempts = 10 };

        (void)state;
        make(&b, rows, 2, 1);
        batch_waiting(&b, 0);
        batch_sent(&b, 1, false);
        batch_reported(&b, 1, RD_KAFKA_RESP_ERR_NO_ERROR, 0);
        batch_plan(&b, &rules, NULL);
        assert_int_equal(b.rows[0].action, ACT_LEAVE);
        assert_int_equal(b.rows[0].attempts_inc, 0);
        assert_int_equal(b.rows[1].action, ACT_FINISH);
        assert_int_equal(b.left, 1);
        assert_true(b.planned);
        assert_int_equal(batch_key_state(&b, 0), KEY_BLOCKED);
        assert_int_equal(batch_key_state(&b, 1), KEY_CLEAR);
        batch_free(&b);
}

/* How long the loop waits with batches in flight (now is 1000 s; at most 50 ms). */
struct pace_case {
        const char *name;
        struct overlap_pace pace;
        usec_t wait;
};

#define T0 (1000 * USEC_PER_SEC)
#define MOST (50 * USEC_PER_MSEC)

static const struct pace_case pace_cases[] = {
        { "a claim due and free to go: no wait", { .now = T0, .wake = true }, 0 },
        { "due but held until a batch ends: the longest wait, not a spin",
          { .now = T0, .wake = true, .held = true },
          MOST },
        { "a claim out: its answer wakes the loop", { .now = T0, .wake = true, .claiming = true }, MOST },
        { "stopping: no claim will go", { .now = T0, .wake = true, .stopping = true }, MOST },
        { "not due: until the poll", { .now = T0, .next_poll = T0 + 7 * USEC_PER_MSEC }, 7 * USEC_PER_MSEC },
        { "the poll far off: at most the longest wait",
          { .now = T0, .next_poll = T0 + 2 * USEC_PER_SEC },
          MOST },
        { "the poll passed: now", { .now = T0, .next_poll = T0 - 1 }, 0 },
        { "due, in a back-off: until it ends",
          { .now = T0, .wake = true, .not_before = T0 + 3 * USEC_PER_MSEC },
          3 * USEC_PER_MSEC },
        { "a back-off that ended: now", { .now = T0, .wake = true, .not_before = T0 - 5 }, 0 },
        { "the poll after the back-off: until the poll",
          { .now = T0, .next_poll = T0 + 9 * USEC_PER_MSEC, .not_before = T0 + 2 * USEC_PER_MSEC },
          9 * USEC_PER_MSEC },
};

static void pace_table(void **state) {
        (void)state;
        for (size_t i = 0; i < sizeof(pace_cases) / sizeof(pace_cases[0]); i++) {
                const struct pace_case *t = &pace_cases[i];

                print_message("# case: %s\n", t->name);
                assert_int_equal(overlap_pace(&t->pace, MOST), t->wait);
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(next_table),
                cmocka_unit_test(a_batch_that_left_rows_breaks_the_chain_until_the_flight_is_empty),
                cmocka_unit_test(the_chain_starts_again_from_the_floor_now_and_then),
                cmocka_unit_test(follow_table),
                cmocka_unit_test(the_newest_earlier_batch_is_followed),
                cmocka_unit_test(a_row_still_waiting_when_planned_is_left_pending),
                cmocka_unit_test(a_planned_batch_is_decided_at_once),
                cmocka_unit_test(pace_table),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
