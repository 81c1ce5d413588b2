/* test_share.c -- How competing relays share the key buckets: members to a rank, where claims start, how deep they look, when the next claim comes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "share.h"

#define MS USEC_PER_MSEC
#define POLL (1000 * MS)

struct update_case {
        const char *name;
        int slots[8];
        size_t n;
        int own[3];
        size_t n_own;
        unsigned members, rank[3];
};

static const struct update_case updates[] = {
        { "alone, one pipeline", { 4 }, 1, { 4 }, 1, 1, { 0 } },
        { "first of three", { 0, 7, 3 }, 3, { 0 }, 1, 3, { 0 } },
        { "middle of three, any order", { 7, 0, 3 }, 3, { 3 }, 1, 3, { 1 } },
        { "last of three", { 3, 0, 7 }, 3, { 7 }, 1, 3, { 2 } },
        { "gaps in the slots do not matter", { 2, 90, 1000 }, 3, { 90 }, 1, 3, { 1 } },
        { "our own slot not yet in the view: counted in", { 1, 5 }, 2, { 3 }, 1, 3, { 1 } },
        { "nobody seen, not even us", { 0 }, 0, { 9 }, 1, 1, { 0 } },
        { "a slot listed twice counts once", { 1, 1, 2 }, 3, { 2 }, 1, 2, { 1 } },
        { "two pipelines of ours, alone", { 5, 6 }, 2, { 5, 6 }, 2, 2, { 0, 1 } },
        { "two of ours among another relay's two", { 1, 2, 8, 9 }, 4, { 8, 2 }, 2, 4, { 2, 1 } },
        { "one of ours not yet in the view", { 1, 4 }, 2, { 4, 6 }, 2, 3, { 1, 2 } },
        { "a pipeline without a slot: after everyone", { 1, 4 }, 2, { -1, 4 }, 2, 3, { 2, 1 } },
        { "two without a slot: in our own order, at the end", { 3 }, 1, { -1, -1, 3 }, 3, 3, { 1, 2, 0 } },
};

static void update_table(void **state) {
        (void)state;
        for (size_t i = 0; i < ELEMENTSOF(updates); i++) {
                const struct update_case *c = &updates[i];
                struct share s;

                print_message("# %s\n", c->name);
                share_init(&s);
                share_update(&s, c->slots, c->n, c->own, c->n_own, 1);
                assert_int_equal(s.members, c->members);
                assert_int_equal(s.own, c->n_own);
                for (size_t p = 0; p < c->n_own; p++) {
                        assert_int_equal(s.rank[p], c->rank[p]);
                        assert_true(s.rank[p] < s.members);
                        for (size_t q = 0; q < p; q++)
                                assert_int_not_equal(s.rank[p], s.rank[q]);
                }
        }
}

static void update_says_when_the_view_changed(void **state) {
        struct share s;
        const int two[] = { 1, 2 }, three[] = { 1, 2, 3 }, own2[] = { 2 }, own1[] = { 1 };

        (void)state;
        share_init(&s);
        assert_true(share_update(&s, two, 2, own2, 1, 2));
        assert_false(share_update(&s, two, 2, own2, 1, 2));
        assert_true(share_update(&s, three, 3, own2, 1, 2));
        assert_true(share_update(&s, three, 3, own1, 1, 2)); /* same count, other rank */
        assert_true(share_update(&s, three, 3, own1, 1, 3)); /* one relay more */
        assert_int_equal(s.relays, 3);
        assert_true(share_update(&s, three, 3, own1, 1, 0));
        assert_int_equal(s.relays, 1); /* never fewer than ourselves */
}

struct claim_case {
        const char *name;
        unsigned members, own, rank;
        int limit;
        unsigned relays; /* 0: not counted */
        unsigned first;
        int depth;
        unsigned buckets;
        bool alone;
        int skip_depth; /* while something is paused */
};

static const struct claim_case claims[] = {
        { "alone: no bucket, one batch deep", 1, 1, 0, 500, 0, 0, 500, 256, true, 500 },
        { "alone with two pipelines of ours: still alone (they chain)", 2, 2, 1, 500, 0, 128, 500, 256, true,
          500 },
        { "first of two: half the buckets, six batches deep (four while something is paused)", 2, 1, 0, 500,
          0, 0, 3000, 128, false, 2000 },
        { "second of two: half way round", 2, 1, 1, 500, 0, 128, 3000, 128, false, 2000 },
        { "third of three: a third of the buckets, rounded up", 3, 1, 2, 1000, 0, 170, 8000, 86, false,
          5000 },
        { "second of three", 3, 1, 1, 1000, 0, 85, 8000, 86, false, 5000 },
        { "two of ours and two others: four members, depth capped", 4, 2, 3, 100, 0, 192,
          SHARE_DEPTH_MAX * 100, 64, false, 600 },
        { "seven pipelines: depth capped", 7, 1, 6, 100, 0, 219, SHARE_DEPTH_MAX * 100, 37, false,
          SHARE_DEPTH_MAX * 100 },
        { "a rank past the count (stale view) wraps", 2, 1, 5, 10, 0, 128, 60, 128, false, 40 },
        { "a probe of 5 rows", 2, 1, 0, 5, 0, 0, 30, 128, false, 20 },
        { "no members counted is one", 0, 1, 0, 50, 0, 0, 50, 256, true, 50 },
        { "three relays of two pipelines: eight batches deep (one batch each in flight)", 6, 2, 2, 2000, 3,
          85, 16000, 86, false, 10000 },
        { "two relays of two pipelines: six batches deep", 4, 2, 2, 100, 2, 128, 600, 128, false, 400 },
        { "nine relays: depth capped", 9, 1, 0, 100, 9, 0, SHARE_DEPTH_MAX * 100, 29, false,
          SHARE_DEPTH_MAX * 100 },
};

static void claim_table(void **state) {
        (void)state;
        for (size_t i = 0; i < ELEMENTSOF(claims); i++) {
                const struct claim_case *c = &claims[i];
                struct share s = {
                        .members = c->members, .relays = c->relays, .own = c->own, .rank = { c->rank }
                };
                struct share_claim sc = share_claim(&s, 0, c->limit);

                print_message("# %s\n", c->name);
                assert_int_equal(sc.first, c->first);
                assert_int_equal(sc.depth, c->depth);
                assert_int_equal(sc.skip_depth, c->skip_depth);
                assert_int_equal(sc.buckets, c->buckets);
                assert_int_equal(sc.alone, c->alone);
                assert_true(sc.first < SHARE_BUCKETS);
        }
}

/* Every relay of a view starts somewhere else, evenly spread round the buckets. */
static void starts_are_spread(void **state) {
        (void)state;
        for (unsigned relays = 1; relays <= 16; relays++) {
                unsigned prev = 0;

                for (unsigned rank = 0; rank < relays; rank++) {
                        struct share s = { .members = relays, .own = 1, .rank = { rank } };
                        unsigned first = share_claim(&s, 0, 100).first;

                        if (rank > 0) {
                                assert_true(first > prev);
                                assert_true(first - prev >= SHARE_BUCKETS / relays - 1);
                                assert_true(first - prev <= SHARE_BUCKETS / relays + 1);
                        } else {
                                assert_int_equal(first, 0);
                        }
                        prev = first;
                }
        }
}

/* Each claim starts a share further round (share_take), so a relay's shares come round to every
 * bucket within a few claims, whatever its rank, and no bucket is left to a relay that stopped
 * claiming; the turn survives a new view. Alone, the start does not move (no buckets). */
static void turns_come_round_to_every_bucket(void **state) {
        (void)state;
        for (unsigned relays = 2; relays <= 9; relays++) {
                for (unsigned rank = 0; rank < relays; rank++) {
                        struct share s = { .members = relays, .relays = relays, .own = 1, .rank = { rank } };
                        bool seen[SHARE_BUCKETS] = { false };
                        unsigned turns = 0, covered = 0;
                        struct share_claim prev = share_claim(&s, 0, 100);

                        while (covered < SHARE_BUCKETS) {
                                struct share_claim c = share_take(&s, 0, 100);

                                assert_int_equal(c.first,
                                                 (prev.first + (turns ? c.buckets : 0)) % SHARE_BUCKETS);
                                for (unsigned b = 0; b < c.buckets; b++) {
                                        unsigned k = (c.first + b) % SHARE_BUCKETS;

                                        covered += !seen[k];
                                        seen[k] = true;
                                }
                                prev = c;
                                turns++;
                                assert_true(turns <= relays);
                        }
                }
        }
        {
                const int slots[] = { 1, 2 }, own[] = { 1 };
                struct share s;
                unsigned first;

                share_init(&s);
                assert_true(share_update(&s, slots, 2, own, 1, 2));
                (void)share_take(&s, 0, 100);
                first = share_claim(&s, 0, 100).first;
                assert_int_equal(first, 128);
                assert_true(share_update(&s, slots, 2, own, 1, 3)); /* a third relay: turn kept */
                assert_int_equal(share_claim(&s, 0, 100).first, 86);
                /* The turn wraps where the starts do: 256 claims later, the same start. */
                first = share_claim(&s, 0, 100).first;
                for (unsigned i = 0; i < SHARE_BUCKETS; i++)
                        (void)share_take(&s, 0, 100);
                assert_int_equal(share_claim(&s, 0, 100).first, first);
                (void)share_take(&s, 0, 100);
                assert_int_equal(share_claim(&s, 0, 100).first, (first + 86) % SHARE_BUCKETS);
        }
        {
                struct share s;

                share_init(&s);
                for (unsigned i = 0; i < 5; i++)
                        assert_int_equal(share_take(&s, 0, 100).first, 0);
        }
}

struct wait_step {
        size_t got, in_view;
        usec_t wait;
};

struct wait_case {
        const char *name;
        unsigned relays;
        int limit;
        struct wait_step steps[16];
        size_t n;
};

static const struct wait_case waits[] = {
        { "a full batch: at once", 2, 100, { { 100, 100, 0 }, { 100, 300, 0 } }, 2 },
        { "short, took all it looked at: drained, wait for the poll",
          2,
          100,
          { { 99, 99, POLL }, { 1, 1, POLL } },
          2 },
        { "short, left rows it looked at (others hold them): at once",
          2,
          100,
          { { 40, 300, 0 }, { 1, 2, 0 } },
          2 },
        { "the claim counts its view up to a batch + 1 only: a short batch of a backlog goes on at once",
          3,
          100,
          { { 40, 101, 0 }, { 100, 101, 0 }, { 99, 100, 0 }, { 60, 60, POLL } },
          4 },
        { "alone: full at once, short or empty waits for the poll (no other relay holds rows)",
          1,
          100,
          { { 100, 100, 0 }, { 99, 99, POLL }, { 0, 0, POLL }, { 0, 0, POLL }, { 5, 9, 0 }, { 100, 100, 0 } },
          6 },
        { "shared: empty claims back off from 2 ms, doubling, to the poll",
          3,
          100,
          { { 0, 0, 2 * MS },
            { 0, 0, 4 * MS },
            { 0, 0, 8 * MS },
            { 0, 0, 16 * MS },
            { 0, 0, 32 * MS },
            { 0, 0, 64 * MS },
            { 0, 0, 128 * MS },
            { 0, 0, 256 * MS },
            { 0, 0, 512 * MS },
            { 0, 0, POLL },
            { 0, 0, POLL },
            { 0, 0, POLL } },
          12 },
        { "shared: rows coming back start the back-off again",
          2,
          100,
          { { 0, 0, 2 * MS },
            { 0, 0, 4 * MS },
            { 3, 3, POLL },
            { 0, 0, 2 * MS },
            { 0, 0, 4 * MS },
            { 100, 100, 0 },
            { 0, 0, 2 * MS } },
          7 },
};

static void wait_table(void **state) {
        (void)state;
        for (size_t i = 0; i < ELEMENTSOF(waits); i++) {
                const struct wait_case *c = &waits[i];
                struct share s;

                print_message("# %s\n", c->name);
                share_init(&s);
                s.members = c->relays;
                for (size_t j = 0; j < c->n; j++) {
                        const struct wait_step *w = &c->steps[j];

                        print_message("#   step %zu: got %zu of %zu in view\n", j, w->got, w->in_view);
                        assert_int_equal(share_next_wait(&s, w->got, w->in_view, c->limit, POLL), w->wait);
                }
        }
}

/* A poll interval shorter than the first back-off caps it; many empty claims never overflow. */
static void wait_is_capped(void **state) {
        struct share s;

        (void)state;
        share_init(&s);
        s.members = 2;
        assert_int_equal(share_next_wait(&s, 0, 0, 10, 1 * MS), 1 * MS);
        for (int i = 0; i < 1000; i++)
                assert_true(share_next_wait(&s, 0, 0, 10, POLL) <= POLL);
        assert_int_equal(share_next_wait(&s, 0, 0, 10, POLL), POLL);
}

/* When the next look at the members is due: a second after the last, 200 ms after it while alone
 * with a backlog less than a second old unless the last look failed; at once when there was none. */
static void look_table(void **state) {
        static const struct {
                const char *name;
                unsigned members, own;
                usec_t looked_at, backlog_at, now, due;
                bool failed;
        } cases[] = {
                { "no look yet", 1, 1, 0, 0, 5000 * MS, 0, false },
                { "no look yet, with others", 3, 1, 0, 4900 * MS, 5000 * MS, 0, false },
                { "alone, no backlog ever", 1, 1, 5000 * MS, 0, 5100 * MS, 6000 * MS, false },
                { "alone, backlog just now", 1, 1, 5000 * MS, 5100 * MS, 5100 * MS, 5200 * MS, false },
                { "alone, backlog 999 ms ago", 1, 1, 5000 * MS, 4101 * MS, 5100 * MS, 5200 * MS, false },
                { "alone, backlog a second ago", 1, 1, 5000 * MS, 4100 * MS, 5100 * MS, 6000 * MS, false },
                { "alone, backlog stamped after now", 1, 1, 5000 * MS, 5200 * MS, 5100 * MS, 6000 * MS,
                  false },
                { "alone with two pipelines, backlog", 2, 2, 5000 * MS, 5100 * MS, 5100 * MS, 5200 * MS,
                  false },
                { "sharing, backlog", 2, 1, 5000 * MS, 5100 * MS, 5100 * MS, 6000 * MS, false },
                { "sharing with a relay of two pipelines, backlog", 3, 2, 5000 * MS, 5100 * MS, 5100 * MS,
                  6000 * MS, false },
                { "sharing, no backlog", 3, 1, 5000 * MS, 0, 5100 * MS, 6000 * MS, false },
                { "alone, backlog, the last look failed", 1, 1, 5000 * MS, 5100 * MS, 5100 * MS, 6000 * MS,
                  true },
                { "no look yet, the last one failed", 1, 1, 0, 5100 * MS, 5100 * MS, 0, true },
        };

        (void)state;
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                struct share s;

                print_message("# %s\n", cases[i].name);
                share_init(&s);
                s.members = cases[i].members;
                s.own = cases[i].own;
                assert_int_equal(share_look_due(&s, cases[i].looked_at, cases[i].failed, cases[i].backlog_at,
                                                cases[i].now),
                                 cases[i].due);
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(update_table),
                cmocka_unit_test(update_says_when_the_view_changed),
                cmocka_unit_test(claim_table),
                cmocka_unit_test(starts_are_spread),
                cmocka_unit_test(turns_come_round_to_every_bucket),
                cmocka_unit_test(wait_table),
                cmocka_unit_test(wait_is_capped),
                cmocka_unit_test(look_table),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
