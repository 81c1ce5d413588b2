/* test_share.c -- How competing relays share the key buckets: members to a part, rescues. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "share.h"

#define S USEC_PER_SEC

struct update_case {
        const char *name;
        int slots[8];
        size_t n;
        int own;
        unsigned relays, rank;
};

static const struct update_case updates[] = {
        { "alone", { 4 }, 1, 4, 1, 0 },
        { "first of three", { 0, 7, 3 }, 3, 0, 3, 0 },
        { "middle of three, any order", { 7, 0, 3 }, 3, 3, 3, 1 },
        { "last of three", { 3, 0, 7 }, 3, 7, 3, 2 },
        { "gaps in the slots do not matter", { 2, 90, 1000 }, 3, 90, 3, 1 },
        { "our own slot not yet in the view: counted in", { 1, 5 }, 2, 3, 3, 1 },
        { "nobody seen, not even us", { 0 }, 0, 9, 1, 0 },
        { "a slot listed twice counts once", { 1, 1, 2 }, 3, 2, 2, 1 },
};

static void update_table(void **state) {
        (void)state;
        for (size_t i = 0; i < ELEMENTSOF(updates); i++) {
                const struct update_case *c = &updates[i];
                struct share s;

                print_message("# %s\n", c->name);
                share_init(&s);
                share_update(&s, c->slots, c->n, c->own);
                assert_int_equal(s.relays, c->relays);
                assert_int_equal(s.rank, c->rank);
                /* Every rank is below the count: every bucket is someone's part. */
                assert_true(s.rank < s.relays);
        }
}

static void update_says_when_the_part_changed(void **state) {
        struct share s;
        const int two[] = { 1, 2 }, three[] = { 1, 2, 3 };

        (void)state;
        share_init(&s);
        assert_true(share_update(&s, two, 2, 2));
        assert_false(share_update(&s, two, 2, 2));
        assert_true(share_update(&s, three, 3, 2));
        assert_true(share_update(&s, three, 3, 1)); /* same count, other rank */
}

/* The parts of all relays cover every bucket exactly once. */
static void parts_cover_every_bucket_once(void **state) {
        const int slots[] = { 11, 4, 8 };
        unsigned owners[SHARE_BUCKETS] = { 0 };

        (void)state;
        for (size_t r = 0; r < ELEMENTSOF(slots); r++) {
                struct share s;
                struct share_filter f;

                share_init(&s);
                share_update(&s, slots, ELEMENTSOF(slots), slots[r]);
                s.next_rescue = 10 * S; /* not due */
                f = share_next(&s, 0, false);
                assert_int_equal(f.modulus, 3);
                for (unsigned b = 0; b < SHARE_BUCKETS; b++)
                        owners[b] += b % f.modulus == f.residue;
        }
        for (unsigned b = 0; b < SHARE_BUCKETS; b++)
                assert_int_equal(owners[b], 1);
}

static void alone_claims_everything(void **state) {
        struct share s;
        struct share_filter f;

        (void)state;
        share_init(&s);
        f = share_next(&s, 5 * S, true);
        assert_int_equal(f.modulus, 1);
        assert_int_equal(f.residue, 0);
}

/* Once a second every bucket, so a stuck relay's part is never left alone; and right after our
 * part came back short, but not twice in a row. */
static void rescues(void **state) {
        const int slots[] = { 1, 2 };
        struct share s;
        struct share_filter f;

        (void)state;
        share_init(&s);
        share_update(&s, slots, 2, 2);
        f = share_next(&s, 100 * S, false); /* first call: a rescue is due */
        assert_int_equal(f.modulus, 1);
        f = share_next(&s, 100 * S + 1, false);
        assert_int_equal(f.modulus, 2);
        assert_int_equal(f.residue, 1);
        f = share_next(&s, 100 * S + 2, true); /* our part was short: help the others */
        assert_int_equal(f.modulus, 1);
        f = share_next(&s, 100 * S + 3, true); /* the rescue was short too: back to our part */
        assert_int_equal(f.modulus, 2);
        f = share_next(&s, 100 * S + SHARE_RESCUE_EVERY - 1, false);
        assert_int_equal(f.modulus, 2);
        f = share_next(&s, 100 * S + 2 + SHARE_RESCUE_EVERY, false);
        assert_int_equal(f.modulus, 1);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(update_table),
                cmocka_unit_test(update_says_when_the_part_changed),
                cmocka_unit_test(parts_cover_every_bucket_once),
                cmocka_unit_test(alone_claims_everything),
                cmocka_unit_test(rescues),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
