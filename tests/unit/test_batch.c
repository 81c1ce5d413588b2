/* test_batch.c -- One batch's decisions as table cases: what may be sent, re-sent alone, finished, failed, dead-lettered, paused; the breaker's verdict. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "batch.h"

#define OK RD_KAFKA_RESP_ERR_NO_ERROR
#define TOO_LARGE RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE
#define TIMED_OUT RD_KAFKA_RESP_ERR__MSG_TIMED_OUT
#define NO_LEADER RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE
#define PURGED RD_KAFKA_RESP_ERR__PURGE_INFLIGHT
#define UNKNOWN_TOPIC RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC
#define NOT_AUTHORIZED RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED
#define INVALID_TOPIC RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION
#define FENCED RD_KAFKA_RESP_ERR__FENCED
#define UA RD_KAFKA_PARTITION_UA

/* One row of a case: the claim's facts and what Kafka did with it. */
struct spec {
        const char *topic, *key;
        enum row_state state;
        rd_kafka_resp_err_t err;
        int32_t partition;
        int attempts;
        const char *map_error;
        bool alone;
};

/* What the plan must say about the row. */
struct want {
        enum row_action action;
        int attempts_inc;
        bool dead, pause_topic, pause_key, probe_failed, overtaken;
        const char *reason_has; /* a substring of the reason, or NULL */
};

#define SENT(t, k, e, p) \
        { t, k, ROW_REPORTED, e, p, 0, NULL, false }
#define FINISH \
        { ACT_FINISH, 0, false, false, false, false, false, NULL }
#define RETRY(inc) \
        { ACT_FAIL, inc, false, false, false, false, false, NULL }
#define LEAVE \
        { ACT_LEAVE, 0, false, false, false, false, false, NULL }

struct table_case {
        const char *name;
        struct spec rows[8];
        struct want want[8];
        size_t n;
        enum batch_verdict verdict;
        bool probe;
        int max_attempts; /* 0 = 10 */
};

/* Builds the batch as the cycle does: claim facts, prepare, then every sent row counted. */
static void build(struct batch *b, const struct spec *rows, size_t n) {
        assert_int_equal(batch_init(b, n), 0);
        for (size_t i = 0; i < n; i++)
                b->rows[i] = (struct batch_row){ .id = (int64_t)i + 1,
                                                 .topic = rows[i].topic,
                                                 .key = rows[i].key,
                                                 .attempts = rows[i].attempts,
                                                 .map_error = rows[i].map_error };
        assert_int_equal(batch_prepare(b), 0);
        for (size_t i = 0; i < n; i++) {
                switch (rows[i].state) {
                case ROW_CLAIMED:
                        break;
                case ROW_HELD:
                        batch_held(b, i);
                        break;
                case ROW_WAITING:
                        batch_waiting(b, i);
                        break;
                case ROW_REFUSED:
                        batch_refused(b, i, rows[i].err);
                        break;
                case ROW_IN_FLIGHT:
                        batch_sent(b, i, rows[i].alone);
                        break;
                case ROW_REPORTED:
                        batch_sent(b, i, rows[i].alone);
                        batch_reported(b, i, rows[i].err, rows[i].partition);
                        break;
                case ROW_UNREPORTED:
                        batch_sent(b, i, rows[i].alone);
                        batch_unreported(b, i);
                        break;
                }
        }
}

static const struct table_case cases[] = {
        { "everything delivered",
          { SENT("t", "a", OK, 0), SENT("t", "b", OK, 1), SENT("t", NULL, OK, 2) },
          { FINISH, FINISH, FINISH },
          3,
          VERDICT_SUCCESS,
          false,
          0 },
        { "a one-row probe on a dead partition: a failure, no attempt, its key waits",
          { SENT("ta", "k", NO_LEADER, 0) },
          { { ACT_FAIL, 0, false, false, false, true, false, "Leader not available" } },
          1,
          VERDICT_FAILURE,
          true,
          0 },
        { "a probe where one topic's row fails and another topic's go through: Kafka is up",
          { SENT("ta", "k", NO_LEADER, UA), SENT("tb", "x", OK, 0), SENT("tb", "y", OK, 1) },
          { { ACT_FAIL, 0, false, true, false, false, false, NULL }, FINISH, FINISH },
          3,
          VERDICT_SUCCESS,
          true,
          0 },
        { "a later row of the key already acknowledged: the failed earlier one is dead-lettered, not sent "
          "late",
          { SENT("t", "k", TOO_LARGE, 0), SENT("t", "k", OK, 0), SENT("t", "k", OK, 0) },
          { { ACT_FAIL, 1, true, false, false, false, true, "would break per-key order" }, FINISH, FINISH },
          3,
          VERDICT_SUCCESS,
          false,
          0 },
        { "the same for a transient failure overtaken by a later row of its key",
          { SENT("t", "k", TIMED_OUT, 0), SENT("t", "k", OK, 0), SENT("t", "other", OK, 0) },
          { { ACT_FAIL, 1, true, false, false, false, true, "Message timed out" }, FINISH, FINISH },
          3,
          VERDICT_SUCCESS,
          false,
          0 },
        { "the same key in another topic is another sequence: no overtaking",
          { SENT("ta", "k", TIMED_OUT, 0), SENT("tb", "k", OK, 0), SENT("ta", "j", OK, 0) },
          { RETRY(1), FINISH, FINISH },
          3,
          VERDICT_SUCCESS,
          false,
          0 },
        { "rows without a key keep no order: a later one delivered overtakes nothing",
          { SENT("t", NULL, TIMED_OUT, 0), SENT("t", NULL, OK, 0) },
          { RETRY(1), FINISH },
          2,
          VERDICT_SUCCESS,
          false,
          0 },
        { "a report that never came is a failure, never a success",
          { { "t", "a", ROW_UNREPORTED, OK, UA, 0, NULL, false }, SENT("t", "b", OK, 0) },
          { { ACT_FAIL, 0, false, false, false, false, false, "no delivery report" }, FINISH },
          2,
          VERDICT_SUCCESS,
          false,
          0 },
        { "nothing went through: Kafka is the problem, no row spends an attempt",
          { SENT("t", "a", TIMED_OUT, 0), SENT("t", "b", TIMED_OUT, 1), SENT("u", "c", TIMED_OUT, 0) },
          { RETRY(0), RETRY(0), RETRY(0) },
          3,
          VERDICT_FAILURE,
          false,
          0 },
        { "one topic refused while others pass: paused, no attempts",
          { SENT("bad", "a", NOT_AUTHORIZED, UA),
            { "bad", "b", ROW_REFUSED, UNKNOWN_TOPIC, UA, 0, NULL, false },
            SENT("good", "c", OK, 0) },
          { { ACT_FAIL, 0, false, true, false, false, false, "Topic authorization failed" },
            { ACT_FAIL, 0, false, true, false, false, false, "Kafka refused the message" },
            FINISH },
          3,
          VERDICT_SUCCESS,
          false,
          0 },
        { "a topic none of whose rows went through while another's did: paused as a whole",
          { SENT("ta", "a", TIMED_OUT, UA), SENT("ta", "b", TIMED_OUT, UA), SENT("tb", "c", OK, 0) },
          { { ACT_FAIL, 0, false, true, false, false, false, NULL },
            { ACT_FAIL, 0, false, true, false, false, false, NULL },
            FINISH },
          3,
          VERDICT_SUCCESS,
          false,
          0 },
        { "a partition out while the topic's others take messages: its keys are held back",
          { SENT("t", "a", TIMED_OUT, 2), SENT("t", "b", OK, 0), SENT("t", "c", OK, 1),
            SENT("t", NULL, TIMED_OUT, 2) },
          { { ACT_FAIL, 0, false, false, true, false, false, NULL }, FINISH, FINISH, RETRY(0) },
          4,
          VERDICT_SUCCESS,
          false,
          0 },
        { "a failure on a partition that took other messages is the row's own attempt",
          { SENT("t", "a", TIMED_OUT, 0), SENT("t", "b", OK, 0) },
          { RETRY(1), FINISH },
          2,
          VERDICT_SUCCESS,
          false,
          0 },
        { "... and the last allowed one dead-letters it",
          { { "t", "a", ROW_REPORTED, TIMED_OUT, 0, 2, NULL, false }, SENT("t", "b", OK, 0) },
          { { ACT_FAIL, 1, true, false, false, false, false, "failed 3 times on its own" }, FINISH },
          2,
          VERDICT_SUCCESS,
          false,
          3 },
        { "the relay's own purge is never the row's fault",
          { SENT("t", "a", PURGED, 0), SENT("t", "b", OK, 0) },
          { RETRY(0), FINISH },
          2,
          VERDICT_SUCCESS,
          false,
          0 },
        { "bad headers only: dead-lettered, and no test of Kafka (the probe is given back)",
          { { "t", "a", ROW_CLAIMED, OK, UA, 0, "headers must be a JSON object (got array)", false } },
          { { ACT_FAIL, 1, true, false, false, false, false, "headers must be a JSON object" } },
          1,
          VERDICT_NONE,
          true,
          0 },
        { "topic names Kafka can never accept are dead-lettered with the reason",
          { { "bad topic!", "a", ROW_CLAIMED, OK, UA, 0, NULL, false },
            { "", "a", ROW_CLAIMED, OK, UA, 0, NULL, false },
            { "..", "a", ROW_CLAIMED, OK, UA, 0, NULL, false },
            SENT("fine.topic_1-x", "a", OK, 0) },
          { { ACT_FAIL, 1, true, false, false, false, false,
              "can never exist in Kafka: a topic name may hold only" },
            { ACT_FAIL, 1, true, false, false, false, false, "must not be empty" },
            { ACT_FAIL, 1, true, false, false, false, false, "cannot be '.' or '..'" },
            FINISH },
          4,
          VERDICT_SUCCESS,
          false,
          0 },
        { "the broker's invalid-topic answer concerns every row of the topic: dead, not a suspect",
          { SENT("t", "a", INVALID_TOPIC, UA), SENT("t", "b", INVALID_TOPIC, UA) },
          { { ACT_FAIL, 1, true, false, false, false, false, "TOPIC_EXCEPTION" },
            { ACT_FAIL, 1, true, false, false, false, false, NULL } },
          2,
          VERDICT_SUCCESS,
          false,
          0 },
        { "a broker-side rejection of the only row sent is that row's own fault",
          { SENT("t", "a", TOO_LARGE, 0) },
          { { ACT_FAIL, 1, true, false, false, false, false, "MSG_SIZE_TOO_LARGE" } },
          1,
          VERDICT_SUCCESS,
          false,
          0 },
        { "suspects not yet re-sent alone (time ran out) wait without spending an attempt",
          { SENT("t", "a", TOO_LARGE, 0), SENT("t", "b", TOO_LARGE, 0) },
          { { ACT_FAIL, 0, false, false, false, false, false, "not yet sent alone" },
            { ACT_FAIL, 0, false, false, false, false, false, NULL } },
          2,
          VERDICT_SUCCESS,
          false,
          0 },
        { "a suspect that failed alone again is dead-lettered",
          { { "t", "a", ROW_REPORTED, TOO_LARGE, 0, 0, NULL, true }, SENT("t", "b", OK, 0) },
          { { ACT_FAIL, 1, true, false, false, false, false, NULL }, FINISH },
          2,
          VERDICT_SUCCESS,
          false,
          0 },
        { "rows held back behind a refused row of their key stay untouched",
          { { "t", "k", ROW_REFUSED, RD_KAFKA_RESP_ERR__QUEUE_FULL, UA, 0, NULL, false },
            { "t", "k", ROW_HELD, OK, UA, 0, NULL, false },
            SENT("t", "j", OK, 0) },
          { RETRY(0), LEAVE, FINISH },
          3,
          VERDICT_SUCCESS,
          false,
          0 },
        { "a fatal producer error decides the batch",
          { SENT("t", "a", FENCED, 0), SENT("t", "b", OK, 0) },
          { LEAVE, FINISH },
          2,
          VERDICT_FATAL,
          false,
          0 },
        { "a key held back before that fails again is the same outage, even alone: no verdict on Kafka",
          { SENT("t", "held", TIMED_OUT, 1) },
          { { ACT_FAIL, 0, false, false, true, false, false, NULL } },
          1,
          VERDICT_NONE,
          false,
          0 },
        { "a refused row overtaken by a later row of its key is dead-lettered too, never sent late",
          { SENT("t", "k", NOT_AUTHORIZED, 0), SENT("t", "k", OK, 0) },
          { { ACT_FAIL, 1, true, false, false, false, true, "would break per-key order" }, FINISH },
          2,
          VERDICT_SUCCESS,
          false,
          0 },
        { "a refusal on one partition while the topic's others take rows holds the key, not the topic",
          { SENT("t", "k", RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART, 1), SENT("t", "j", OK, 0) },
          { { ACT_FAIL, 0, false, false, true, false, false, NULL }, FINISH },
          2,
          VERDICT_SUCCESS,
          false,
          0 },
};

static void table(void **state) {
        struct pause_set paused;

        (void)state;
        pause_set_init(&paused, 1000, 1000);
        pause_set_add(&paused, "t", "held", 0);
        for (size_t c = 0; c < ELEMENTSOF(cases); c++) {
                const struct table_case *tc = &cases[c];
                struct batch_rules rules = { .max_attempts = tc->max_attempts ? tc->max_attempts : 10,
                                             .probe = tc->probe };
                struct batch b;

                print_message("# case: %s\n", tc->name);
                build(&b, tc->rows, tc->n);
                batch_plan(&b, &rules, &paused);
                assert_int_equal(b.verdict, tc->verdict);
                for (size_t i = 0; i < tc->n; i++) {
                        const struct batch_row *r = &b.rows[i];
                        const struct want *w = &tc->want[i];

                        print_message("#   row %zu: action %d inc %d dead %d topic %d key %d probe %d "
                                      "overtaken %d: %s\n",
                                      i, r->action, r->attempts_inc, r->dead, r->pause_topic, r->pause_key,
                                      r->probe_failed, r->overtaken, r->reason);
                        assert_int_equal(r->action, w->action);
                        assert_int_equal(r->attempts_inc, w->attempts_inc);
                        assert_int_equal(r->dead, w->dead);
                        assert_int_equal(r->pause_topic, w->pause_topic);
                        assert_int_equal(r->pause_key, w->pause_key);
                        assert_int_equal(r->probe_failed, w->probe_failed);
                        assert_int_equal(r->overtaken, w->overtaken);
                        if (w->reason_has)
                                assert_non_null(strstr(r->reason, w->reason_has));
                }
                batch_free(&b);
        }
        pause_set_done(&paused);
}

/* May a row go out in the first round? Never past an earlier row of its (topic, key) that was
 * held back or refused; rows that cannot become messages are skipped over. */
static void may_send(void **state) {
        struct batch b;
        const struct spec rows[] = {
                { "t", "k", ROW_REFUSED, RD_KAFKA_RESP_ERR__QUEUE_FULL, UA, 0, NULL, false },
                { "t", "k", ROW_CLAIMED, OK, UA, 0, NULL, false }, /* behind the refused one */
                { "u", "k", ROW_CLAIMED, OK, UA, 0, NULL, false }, /* same key, other topic */
                { "t", "j", ROW_CLAIMED, OK, UA, 0, "bad headers", false },
                { "t", "j", ROW_CLAIMED, OK, UA, 0, NULL, false }, /* behind a dead row: fine */
                { "t", NULL, ROW_CLAIMED, OK, UA, 0, NULL, false },
                { "bad topic!", "z", ROW_CLAIMED, OK, UA, 0, NULL, false },
        };

        (void)state;
        build(&b, rows, ELEMENTSOF(rows));
        assert_false(batch_may_send(&b, 1));
        batch_held(&b, 1);
        assert_true(batch_may_send(&b, 2));
        assert_false(batch_may_send(&b, 3));
        assert_true(batch_may_send(&b, 4));
        assert_true(batch_may_send(&b, 5));
        assert_false(batch_may_send(&b, 6));
        batch_free(&b);
}

/* The suspects of a broker-side rejection go again one at a time, oldest first, never past an
 * unresolved earlier row of their key and never behind a later one already in Kafka. */
static void resend_order(void **state) {
        struct batch b;
        const struct spec rows[] = {
                SENT("t", "k", TOO_LARGE, 0), /* 0: first suspect of k */
                SENT("t", "k", TOO_LARGE, 0), /* 1: second of k */
                SENT("t", "j", TOO_LARGE, 0), /* 2: suspect of j */
                SENT("t", "m", TIMED_OUT, 0), /* 3: m unresolved */
                SENT("t", "m", TOO_LARGE, 0), /* 4: behind it */
                SENT("t", "n", TOO_LARGE, 0), /* 5: overtaken by 6 */
                SENT("t", "n", OK, 0),
        };
        struct batch_rules rules = { .max_attempts = 10 };

        (void)state;
        build(&b, rows, ELEMENTSOF(rows));
        assert_int_equal(batch_next_resend(&b), 0);
        batch_sent(&b, 0, true);
        batch_reported(&b, 0, OK, 0);
        assert_int_equal(batch_next_resend(&b), 1);
        batch_sent(&b, 1, true);
        batch_reported(&b, 1, TOO_LARGE, 0); /* alone: its own fault */
        assert_int_equal(batch_next_resend(&b), 2);
        batch_sent(&b, 2, true);
        batch_unreported(&b, 2);
        assert_int_equal(batch_next_resend(&b), -1); /* 4 waits behind 3, 5 is overtaken */
        batch_plan(&b, &rules, NULL);
        assert_int_equal(b.rows[0].action, ACT_FINISH);
        assert_true(b.rows[1].dead);
        assert_false(b.rows[1].overtaken);
        assert_int_equal(b.rows[2].action, ACT_FAIL);
        assert_false(b.rows[2].dead);
        assert_false(b.rows[4].dead);
        assert_int_equal(b.rows[4].attempts_inc, 0);
        assert_true(b.rows[5].dead);
        assert_true(b.rows[5].overtaken);
        assert_int_equal(b.overtaken, 1);
        assert_int_equal(b.dead, 2);
        assert_int_equal(b.delivered, 2);
        batch_free(&b);
}

/* Many rows of few keys: the (topic, key) links are built in one pass and stay right. */
static void links_hot_keys(void **state) {
        enum { N = 3000 };
        struct batch b;
        static const char *keys[] = { "a", "b", "c" };

        (void)state;
        assert_int_equal(batch_init(&b, N), 0);
        for (size_t i = 0; i < N; i++)
                b.rows[i] = (struct batch_row){ .id = (int64_t)i,
                                                .topic = i % 2 ? "x" : "y",
                                                .key = keys[i % 3] };
        assert_int_equal(batch_prepare(&b), 0);
        for (size_t i = 0; i < N; i++) {
                assert_int_equal(b.rows[i].prev, i >= 6 ? (int)(i - 6) : -1);
                assert_int_equal(b.rows[i].next, i + 6 < N ? (int)(i + 6) : -1);
        }
        batch_free(&b);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(table),
                cmocka_unit_test(may_send),
                cmocka_unit_test(resend_order),
                cmocka_unit_test(links_hot_keys),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
