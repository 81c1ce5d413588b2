/* test_floor.c -- The claim floor: a step begins, waits for its transactions, ends at min(lowest pending, S + 1); a sequence that goes back and the guard send it to 0. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "floor.h"

#define S USEC_PER_SEC
#define NONE -1 /* in a look: no row pending at or above the floor */

/* One look after another, each with what it read and what the floor must then be. `node` is
 * the sequence's relfilenode (a RESTART changes it); 0 means 1. */
struct look_step {
        bool ended;
        int64_t lowest, seq_last, node;
        enum floor_change change;
        int64_t at;
};

struct step_case {
        const char *name;
        struct look_step steps[6];
        size_t n;
};

static const struct step_case step_cases[] = {
        { "the first look only begins a step: the floor stays 0",
          { { false, 500, 900, 0, FLOOR_BEGAN, 0 } },
          1 },
        { "a step that ended: the lowest pending id, when below S + 1",
          { { false, 500, 900, 0, FLOOR_BEGAN, 0 }, { true, 520, 1000, 0, FLOOR_BEGAN, 520 } },
          2 },
        { "a step that ended with nothing pending: S + 1 of the step, not of the look",
          { { false, NONE, 900, 0, FLOOR_BEGAN, 0 }, { true, NONE, 1000, 0, FLOOR_BEGAN, 901 } },
          2 },
        { "pending rows only above S: S + 1 (rows above S may still commit below them)",
          { { false, 950, 900, 0, FLOOR_BEGAN, 0 }, { true, 990, 1000, 0, FLOOR_BEGAN, 901 } },
          2 },
        { "transactions still running: the step waits and the floor does not move",
          { { false, 500, 900, 0, FLOOR_BEGAN, 0 },
            { false, 800, 1000, 0, FLOOR_WAITING, 0 },
            { false, 850, 1100, 0, FLOOR_WAITING, 0 },
            { true, 870, 1200, 0, FLOOR_BEGAN, 870 } },
          4 },
        { "a waiting step keeps its own S, not a later look's",
          { { false, NONE, 100, 0, FLOOR_BEGAN, 0 },
            { false, NONE, 5000, 0, FLOOR_WAITING, 0 },
            { true, NONE, 6000, 0, FLOOR_BEGAN, 101 } },
          3 },
        { "steps one after another: the floor follows the head",
          { { false, 1, 100, 0, FLOOR_BEGAN, 0 },
            { true, 50, 200, 0, FLOOR_BEGAN, 50 },
            { true, 150, 300, 0, FLOOR_BEGAN, 150 },
            { true, NONE, 300, 0, FLOOR_BEGAN, 301 },
            { true, NONE, 300, 0, FLOOR_BEGAN, 301 } },
          5 },
        { "the sequence went back (setval): the floor goes to 0, the next look begins a step",
          { { false, NONE, 1000, 0, FLOOR_BEGAN, 0 },
            { true, NONE, 1000, 0, FLOOR_BEGAN, 1001 },
            { true, NONE, 10, 0, FLOOR_RESET, 0 },
            { false, 5, 12, 0, FLOOR_BEGAN, 0 },
            { true, 5, 20, 0, FLOOR_BEGAN, 5 } },
          5 },
        { "the sequence restarted (new relfilenode) and passed its old value: still 0",
          { { false, NONE, 100, 0, FLOOR_BEGAN, 0 },
            { true, NONE, 100, 0, FLOOR_BEGAN, 101 },
            { true, 1, 150, 2, FLOOR_RESET, 0 } },
          3 },
        { "a sequence set back while the step waits: 0 as well",
          { { false, NONE, 1000, 0, FLOOR_BEGAN, 0 }, { false, NONE, 3, 0, FLOOR_RESET, 0 } },
          2 },
        { "a sequence never used (last value 0): the floor is 1",
          { { false, NONE, 0, 0, FLOOR_BEGAN, 0 }, { true, NONE, 0, 0, FLOOR_BEGAN, 1 } },
          2 },
        { "rows pending with ids below 1 (written by hand): no floor",
          { { false, NONE, 100, 0, FLOOR_BEGAN, 0 }, { true, -5, 100, 0, FLOOR_BEGAN, 0 } },
          2 },
        { "'ended' with no step open only begins one",
          { { true, 500, 900, 0, FLOOR_BEGAN, 0 }, { true, 600, 1000, 0, FLOOR_BEGAN, 600 } },
          2 },
};

static struct floor_look look_of(const struct look_step *s) {
        return (struct floor_look){ .ended = s->ended,
                                    .any = s->lowest != NONE,
                                    .lowest = s->lowest == NONE ? 0 : s->lowest,
                                    .seq_last = s->seq_last,
                                    .seq_node = s->node ? s->node : 1 };
}

static void step_table(void **state) {
        (void)state;
        for (size_t i = 0; i < ELEMENTSOF(step_cases); i++) {
                const struct step_case *c = &step_cases[i];
                struct floor f;
                usec_t now = 1000 * S;

                print_message("# %s\n", c->name);
                floor_init(&f, now);
                assert_true(floor_step_due(&f, now, false));
                assert_true(floor_step_due(&f, now, true));
                for (size_t j = 0; j < c->n; j++) {
                        const struct look_step *s = &c->steps[j];
                        struct floor_look l = look_of(s);

                        assert_int_equal(floor_step(&f, &l, now), s->change);
                        assert_int_equal(f.at, s->at);
                        assert_int_equal(f.open, s->change != FLOOR_RESET);
                        assert_false(floor_step_due(&f, now + FLOOR_STEP_INTERVAL - 1, false));
                        assert_true(floor_step_due(&f, now + FLOOR_STEP_INTERVAL, false));
                        now += FLOOR_STEP_INTERVAL;
                }
        }
}

static void the_floor_never_passes_a_pending_row_it_was_shown(void **state) {
        /* Whatever the looks say, a step that ends never puts the floor above the lowest
         * pending id that look reported, nor above the step's S + 1, and never lowers it. */
        static const int64_t lowest[] = { NONE, 1, 7, 99, 100, 101, 5000 };
        static const int64_t seq[] = { 0, 1, 50, 100, 4000 };

        (void)state;
        for (size_t a = 0; a < ELEMENTSOF(seq); a++)
                for (size_t b = 0; b < ELEMENTSOF(lowest); b++)
                        for (size_t c = 0; c < ELEMENTSOF(seq); c++) {
                                struct floor f;
                                struct look_step begin = { false, NONE, seq[a], 0, FLOOR_BEGAN, 0 },
                                                 end = { true, lowest[b], seq[c], 0, FLOOR_BEGAN, 0 };
                                struct floor_look l1 = look_of(&begin), l2 = look_of(&end);
                                enum floor_change ch;

                                floor_init(&f, 0);
                                floor_step(&f, &l1, 0);
                                ch = floor_step(&f, &l2, S);
                                if (seq[c] < seq[a]) {
                                        assert_int_equal(ch, FLOOR_RESET);
                                        assert_int_equal(f.at, 0);
                                        continue;
                                }
                                if (lowest[b] != NONE)
                                        assert_true(f.at <= lowest[b]);
                                assert_true(f.at <= seq[a] + 1);
                                assert_true(f.at >= 1);
                        }
}

struct guard_case {
        const char *name;
        int64_t at;
        usec_t since; /* since the last guard (or the start) */
        bool due;
        bool found;
        bool reset;
};

static const struct guard_case guard_cases[] = {
        { "floor 0: never due, nothing is below it", 0, 10 * FLOOR_GUARD_INTERVAL, false, false, false },
        { "before the interval: not due", 500, FLOOR_GUARD_INTERVAL - 1, false, false, false },
        { "at the interval: due; nothing below: the floor stays", 500, FLOOR_GUARD_INTERVAL, true, false,
          false },
        { "a pending row below the floor: back to 0", 500, FLOOR_GUARD_INTERVAL, true, true, true },
};

static void guard_table(void **state) {
        (void)state;
        for (size_t i = 0; i < ELEMENTSOF(guard_cases); i++) {
                const struct guard_case *c = &guard_cases[i];
                struct floor f;

                print_message("# %s\n", c->name);
                floor_init(&f, 0);
                f.at = c->at;
                f.open = true;
                f.seq_last = 700;
                assert_int_equal(floor_guard_due(&f, c->since), c->due);
                if (!c->due)
                        continue;
                assert_int_equal(floor_guarded(&f, c->found, c->since), c->reset);
                assert_int_equal(f.at, c->reset ? 0 : c->at);
                assert_int_equal(f.open, !c->reset); /* a reset drops the open step too */
                assert_false(floor_guard_due(&f, c->since + FLOOR_GUARD_INTERVAL - 1));
        }
}

static void reset_drops_the_step(void **state) {
        struct floor f;
        struct floor_look begin = { .seq_last = 100, .seq_node = 1 },
                          end = { .ended = true, .seq_last = 200, .seq_node = 1 };

        (void)state;
        floor_init(&f, 0);
        floor_step(&f, &begin, 0);
        floor_step(&f, &end, S);
        assert_int_equal(f.at, 101);
        floor_reset(&f, 2 * S);
        assert_int_equal(f.at, 0);
        assert_false(f.open);
        /* The next look begins a step again; only the one after can move the floor. */
        assert_int_equal(floor_step(&f, &end, 3 * S), FLOOR_BEGAN);
        assert_int_equal(f.at, 0);
}

/* What a step proves: once a step ended, every row with an id up to its S is visible to a later
 * snapshot (its transactions are over); nothing before, nothing after a reset or a requeue. */
struct proven_case {
        const char *name;
        struct look_step steps[4];
        size_t n;
        int64_t proven[4]; /* after each look */
};

static const struct proven_case proven_cases[] = {
        { "the first look proves nothing", { { false, 500, 900, 0, FLOOR_BEGAN, 0 } }, 1, { 0 } },
        { "a step that ended proves its own S, not the look's",
          { { false, 500, 900, 0, FLOOR_BEGAN, 0 }, { true, 520, 1000, 0, FLOOR_BEGAN, 520 } },
          2,
          { 0, 900 } },
        { "waiting proves nothing new, the end proves the step's S",
          { { false, 1, 100, 0, FLOOR_BEGAN, 0 },
            { true, 50, 200, 0, FLOOR_BEGAN, 50 },
            { false, 60, 300, 0, FLOOR_WAITING, 50 },
            { true, 70, 400, 0, FLOOR_BEGAN, 70 } },
          4,
          { 0, 100, 100, 200 } },
        { "proven even while rows are pending far below S (a backlog)",
          { { false, 10, 5000, 0, FLOOR_BEGAN, 0 }, { true, 10, 6000, 0, FLOOR_BEGAN, 10 } },
          2,
          { 0, 5000 } },
        { "the sequence went back: nothing proven",
          { { false, NONE, 1000, 0, FLOOR_BEGAN, 0 },
            { true, NONE, 1000, 0, FLOOR_BEGAN, 1001 },
            { true, NONE, 10, 0, FLOOR_RESET, 0 } },
          3,
          { 0, 1000, 0 } },
};

static void proven_table(void **state) {
        (void)state;
        for (size_t i = 0; i < ELEMENTSOF(proven_cases); i++) {
                const struct proven_case *c = &proven_cases[i];
                struct floor f;
                usec_t now = 0;

                print_message("# %s\n", c->name);
                floor_init(&f, now);
                for (size_t j = 0; j < c->n; j++) {
                        struct floor_look l = look_of(&c->steps[j]);

                        assert_int_equal(floor_step(&f, &l, now), c->steps[j].change);
                        assert_int_equal(f.proven, c->proven[j]);
                        now += FLOOR_STEP_INTERVAL;
                }
        }
}

static void requeue_and_reset_take_the_proof_back(void **state) {
        struct floor f;
        struct floor_look begin = { .seq_last = 100, .seq_node = 1 },
                          end = { .ended = true, .lowest = 40, .any = true, .seq_last = 200, .seq_node = 1 };

        (void)state;
        floor_init(&f, 0);
        floor_step(&f, &begin, 0);
        floor_step(&f, &end, S);
        assert_int_equal(f.proven, 100);
        floor_requeued(&f, 2 * S);
        assert_int_equal(f.proven, 0);
        assert_int_equal(f.at, 40); /* the guard decides about the floor */
        assert_true(floor_guard_due(&f, 2 * S));
        floor_step(&f, &end, 3 * S);
        assert_int_equal(f.proven, 200);
        floor_guarded(&f, true, 4 * S);
        assert_int_equal(f.proven, 0);
}

/* A sharing claim's head raises the floor (floor_claimed): to the lower of the lowest pending id
 * it saw and the proven id + 1 when it was sent; never down, and not at all when the floor was
 * reset or rows were put back in line after it was sent, or nothing was proven. The floor starts
 * at 40 with 100 proven, epoch as floor_init leaves it. */
struct claimed_case {
        const char *name;
        int64_t first, proven;
        int epoch_delta; /* 0: the floor's epoch; 1: one before it (a reset or requeue since) */
        bool rose;
        int64_t at;
};

static const struct claimed_case claimed_cases[] = {
        { "up to the lowest pending row the claim saw", 70, 100, 0, true, 70 },
        { "the lowest pending row is the proven id itself", 100, 100, 0, true, 100 },
        { "no further than the proven id + 1 (later ids may still be committed below it)", 500, 100, 0, true,
          101 },
        { "a claim sent with less proven: its proven id bounds it", 500, 60, 0, true, 61 },
        { "never down", 20, 100, 0, false, 40 },
        { "the floor itself: no change", 40, 100, 0, false, 40 },
        { "nothing proven when it was sent", 70, 0, 0, false, 40 },
        { "no lowest id (the claim returned no row)", 0, 100, 0, false, 40 },
        { "the floor was reset or rows put back since it was sent", 70, 100, 1, false, 40 },
};

static void claimed_table(void **state) {
        (void)state;
        for (size_t i = 0; i < ELEMENTSOF(claimed_cases); i++) {
                const struct claimed_case *c = &claimed_cases[i];
                struct floor_look begin = { .seq_last = 100, .seq_node = 1 },
                                  end = { .ended = true,
                                          .any = true,
                                          .lowest = 40,
                                          .seq_last = 200,
                                          .seq_node = 1 };
                struct floor f;
                uint64_t epoch;

                print_message("# %s\n", c->name);
                floor_init(&f, 0);
                floor_step(&f, &begin, 0);
                floor_step(&f, &end, S);
                assert_int_equal(f.at, 40);
                assert_int_equal(f.proven, 100);
                epoch = f.epoch - (uint64_t)c->epoch_delta;
                assert_int_equal(floor_claimed(&f, c->first, c->proven, epoch), c->rose);
                assert_int_equal(f.at, c->at);
        }
}

/* A reset and a requeue each take the epoch further: a claim sent before either is ignored. */
static void reset_and_requeue_end_the_epoch(void **state) {
        struct floor f;
        uint64_t sent;

        (void)state;
        floor_init(&f, 0);
        sent = f.epoch;
        floor_requeued(&f, S);
        assert_false(floor_claimed(&f, 70, 100, sent));
        sent = f.epoch;
        floor_reset(&f, 2 * S);
        assert_false(floor_claimed(&f, 70, 100, sent));
        assert_int_equal(f.at, 0);
        /* A claim sent after the reset carries what is proven then: nothing, until a step ends. */
        assert_false(floor_claimed(&f, 70, f.proven, f.epoch));
        assert_int_equal(f.at, 0);
}

struct usable_case {
        const char *name;
        struct floor_sequence seq;
        const char *why; /* a word the reason must hold; NULL: usable */
};

static const struct usable_case usable_cases[] = {
        { "identity or bigserial: cache 1, from 1 up, readable", { true, 1, 1, 1, false, true }, NULL },
        { "increment 5 from 1000 is fine too", { true, 1, 5, 1000, false, true }, NULL },
        { "no sequence (ids written by the application)", { false, 0, 0, 0, false, true }, "no sequence" },
        { "a cache of 20: a session's ids may come after S", { true, 20, 1, 1, false, true }, "CACHE" },
        { "counting down", { true, 1, -1, 1, false, true }, "upwards" },
        { "from below 1", { true, 1, 1, -100, false, true }, "upwards" },
        { "cycling back to its start", { true, 1, 1, 1, true, true }, "cycling" },
        { "cache 1 but not readable", { true, 1, 1, 1, false, false }, "privilege" },
        { "no sequence wins over the rest", { false, 20, -1, -1, true, false }, "no sequence" },
};

/* When the next look is due: a look a second, every FLOOR_STEP_BUSY_INTERVAL while the claims
 * find a backlog; a failed look waits the whole interval either way. */
static const struct due_case {
        const char *name;
        bool failed; /* the last look failed (else it was a step) */
        usec_t after; /* since the last look */
        bool backlog, due;
} due_cases[] = {
        { "no backlog, just under a second: not due", false, FLOOR_STEP_INTERVAL - 1, false, false },
        { "no backlog, a second: due", false, FLOOR_STEP_INTERVAL, false, true },
        { "no backlog, the busy interval: not due", false, FLOOR_STEP_BUSY_INTERVAL, false, false },
        { "a backlog, just under the busy interval: not due", false, FLOOR_STEP_BUSY_INTERVAL - 1, true,
          false },
        { "a backlog, the busy interval: due", false, FLOOR_STEP_BUSY_INTERVAL, true, true },
        { "a backlog after a failed look, the busy interval: not due", true, FLOOR_STEP_BUSY_INTERVAL, true,
          false },
        { "a backlog after a failed look, a second: due", true, FLOOR_STEP_INTERVAL, true, true },
        { "no backlog after a failed look, a second: due", true, FLOOR_STEP_INTERVAL, false, true },
};

static void due_table(void **state) {
        (void)state;
        for (size_t i = 0; i < ELEMENTSOF(due_cases); i++) {
                const struct due_case *c = &due_cases[i];
                struct floor_look l = { .seq_last = 100, .seq_node = 1 };
                struct floor f;
                usec_t now = 1000 * S;

                print_message("# %s\n", c->name);
                floor_init(&f, 0);
                if (c->failed)
                        floor_look_failed(&f, now);
                else
                        floor_step(&f, &l, now);
                assert_int_equal(floor_step_due(&f, now + c->after, c->backlog), c->due);
        }
}

/* Whether the floor looks every FLOOR_STEP_BUSY_INTERVAL: a claim left a backlog less than
 * FLOOR_STEP_INTERVAL ago, and the relay shares the table in key order, or is alone in key order
 * with its newest claim past the ids the floor has proven. */
static const struct busy_case {
        const char *name;
        bool sharing, ordered;
        int64_t chain_end, proven;
        usec_t backlog_at, now;
        bool busy;
} busy_cases[] = {
        { "sharing, a backlog just now", true, true, 0, 0, 5 * S, 5 * S, true },
        { "sharing, a backlog just under a second ago", true, true, 0, 0, 5 * S, 6 * S - 1, true },
        { "sharing, a backlog a second ago (idle, breaker open, reconnecting): not busy", true, true, 0, 0,
          5 * S, 6 * S, false },
        { "sharing, never a backlog", true, true, 0, 0, 0, 5 * S, false },
        { "sharing, the chain proven: busy all the same (every claim starts at the floor)", true, true, 100,
          200, 5 * S, 5 * S, true },
        { "a clock that went back: not busy", true, true, 0, 0, 5 * S, 4 * S, false },
        { "alone in key order, nothing proven yet (a drain starts): busy", false, true, 2000, 0, 5 * S, 5 * S,
          true },
        { "alone in key order, the chain past the proven ids: busy", false, true, 2001, 2000, 5 * S,
          5 * S + S / 2, true },
        { "alone in key order, the chain within the proven ids: not busy (claims follow their chain)", false,
          true, 2000, 2000, 5 * S, 5 * S, false },
        { "alone in key order, past the proven ids, a backlog a second ago: not busy", false, true, 2001,
          2000, 5 * S, 6 * S, false },
        { "\"none\", the chain past the proven ids: not busy (it chains without the floor)", false, false,
          2001, 0, 5 * S, 5 * S, false },
};

static void busy_table(void **state) {
        (void)state;
        for (size_t i = 0; i < ELEMENTSOF(busy_cases); i++) {
                const struct busy_case *c = &busy_cases[i];
                struct floor f;

                floor_init(&f, 0);
                f.proven = c->proven;
                print_message("# %s\n", c->name);
                assert_int_equal(floor_busy(&f, c->sharing, c->ordered, c->chain_end, c->backlog_at, c->now),
                                 c->busy);
        }
}

/* A look that fails in the middle of a step changes nothing but when the next look is due. */
static void a_failed_look_keeps_the_step(void **state) {
        struct floor_look begin = { .seq_last = 100, .seq_node = 1 },
                          end = { .ended = true, .any = true, .lowest = 50, .seq_last = 200, .seq_node = 1 };
        struct floor f, before;

        (void)state;
        floor_init(&f, 0);
        floor_step(&f, &begin, 0);
        floor_step(&f, &end, S);
        before = f;
        floor_look_failed(&f, 2 * S);
        assert_int_equal(f.at, before.at);
        assert_int_equal(f.proven, before.proven);
        assert_int_equal(f.open, before.open);
        assert_int_equal(f.seq_last, before.seq_last);
        assert_int_equal(f.seq_node, before.seq_node);
        assert_int_equal(f.next_guard, before.next_guard);
        assert_false(floor_step_due(&f, 3 * S - 1, true));
        assert_true(floor_step_due(&f, 3 * S, true));
        /* and a reset looks again after the busy interval while busy */
        floor_reset(&f, 4 * S);
        assert_false(floor_step_due(&f, 4 * S + FLOOR_STEP_BUSY_INTERVAL - 1, true));
        assert_true(floor_step_due(&f, 4 * S + FLOOR_STEP_BUSY_INTERVAL, true));
        assert_false(floor_step_due(&f, 4 * S + FLOOR_STEP_BUSY_INTERVAL, false));
}

static void usable_table(void **state) {
        (void)state;
        for (size_t i = 0; i < ELEMENTSOF(usable_cases); i++) {
                const struct usable_case *c = &usable_cases[i];
                const char *why = floor_unusable(&c->seq);

                print_message("# %s\n", c->name);
                if (!c->why) {
                        assert_null(why);
                        continue;
                }
                assert_non_null(why);
                assert_non_null(strstr(why, c->why));
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(step_table),
                cmocka_unit_test(due_table),
                cmocka_unit_test(busy_table),
                cmocka_unit_test(a_failed_look_keeps_the_step),
                cmocka_unit_test(the_floor_never_passes_a_pending_row_it_was_shown),
                cmocka_unit_test(guard_table),
                cmocka_unit_test(reset_drops_the_step),
                cmocka_unit_test(usable_table),
                cmocka_unit_test(proven_table),
                cmocka_unit_test(requeue_and_reset_take_the_proof_back),
                cmocka_unit_test(claimed_table),
                cmocka_unit_test(reset_and_requeue_end_the_epoch),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
