/* test_message.c -- Unit tests for delivery-error classification and the row header builder. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "message.h"

/* A buffer literal's length including its final explicit NUL (but not the compiler's one). */
#define BUF(s) (s), (sizeof(s) - 1)

struct classify_case {
        rd_kafka_resp_err_t err;
        enum outcome expected;
};

static void check_cases(const struct classify_case *cases, size_t n) {
        for (size_t i = 0; i < n; i++) {
                enum outcome got = message_classify(cases[i].err);

                if (got != cases[i].expected)
                        fail_msg("message_classify(%s) = %s, expected %s", rd_kafka_err2name(cases[i].err),
                                 outcome_to_string(got), outcome_to_string(cases[i].expected));
        }
}

static void test_classify_ok(void **state) {
        (void)state;
        assert_int_equal(message_classify(RD_KAFKA_RESP_ERR_NO_ERROR), OUTCOME_OK);
}

static void test_classify_permanent(void **state) {
        static const struct classify_case cases[] = {
                { RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, OUTCOME_PERMANENT },
                { RD_KAFKA_RESP_ERR_INVALID_RECORD, OUTCOME_PERMANENT },
                { RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE, OUTCOME_PERMANENT },
        };

        (void)state;
        check_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

static void test_classify_config(void **state) {
        static const struct classify_case cases[] = {
                { RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, OUTCOME_CONFIG },
                { RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC, OUTCOME_CONFIG },
                { RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART, OUTCOME_CONFIG },
        };

        (void)state;
        check_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

static void test_classify_fatal(void **state) {
        static const struct classify_case cases[] = {
                { RD_KAFKA_RESP_ERR__FATAL, OUTCOME_FATAL },
                { RD_KAFKA_RESP_ERR__FENCED, OUTCOME_FATAL },
        };

        (void)state;
        check_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

static void test_classify_transient(void **state) {
        static const struct classify_case cases[] = {
                { RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, OUTCOME_TRANSIENT },
                { RD_KAFKA_RESP_ERR__TRANSPORT, OUTCOME_TRANSIENT },
                { RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, OUTCOME_TRANSIENT },
                { RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT, OUTCOME_TRANSIENT },
                { RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE, OUTCOME_TRANSIENT },
                { RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, OUTCOME_TRANSIENT },
                { RD_KAFKA_RESP_ERR__PURGE_QUEUE, OUTCOME_TRANSIENT },
                { RD_KAFKA_RESP_ERR__PURGE_INFLIGHT, OUTCOME_TRANSIENT },
                { RD_KAFKA_RESP_ERR__QUEUE_FULL, OUTCOME_TRANSIENT },
                { RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, OUTCOME_TRANSIENT },
        };

        (void)state;
        check_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

/* Kafka's own rule for topic names: a name it can never accept is the row's permanent fault. */
static void test_topic_names(void **state) {
        char longest[251];

        (void)state;
        memset(longest, 'a', 249);
        longest[249] = 0;
        assert_null(message_topic_invalid("orders"));
        assert_null(message_topic_invalid("a.b_c-D9"));
        assert_null(message_topic_invalid("..."));
        assert_null(message_topic_invalid(longest));
        longest[249] = 'a';
        longest[250] = 0;
        assert_string_equal(message_topic_invalid(longest),
                            "a topic name may be at most 249 characters long");
        assert_string_equal(message_topic_invalid(""), "a topic name must not be empty");
        assert_string_equal(message_topic_invalid("."), "a topic name cannot be '.' or '..'");
        assert_string_equal(message_topic_invalid(".."), "a topic name cannot be '.' or '..'");
        assert_non_null(message_topic_invalid("bad topic!"));
        assert_non_null(message_topic_invalid("a/b"));
        assert_non_null(message_topic_invalid("caf\xc3\xa9"));
}

/* Why a claimed row cannot become a message: its headers' error first, then an infinite time. */
static void test_row_invalid(void **state) {
        static const struct {
                const char *headers_error;
                bool timestamp_known;
                const char *want;
        } cases[] = {
                { NULL, true, NULL },
                { NULL, false, MESSAGE_TIME_INFINITE },
                { "headers must be a JSON object (got array)", true,
                  "headers must be a JSON object (got array)" },
                { "headers must be a JSON object (got array)", false,
                  "headers must be a JSON object (got array)" },
        };

        (void)state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                const char *got = message_row_invalid(cases[i].headers_error, cases[i].timestamp_known);

                if (!cases[i].want)
                        assert_null(got);
                else
                        assert_string_equal(got, cases[i].want);
        }
}

/* Which errors fail neighbours too, and which concern a whole topic. */
static void test_error_scope(void **state) {
        (void)state;
        assert_int_equal(message_error_scope(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE), SCOPE_REQUEST);
        assert_int_equal(message_error_scope(RD_KAFKA_RESP_ERR_INVALID_RECORD), SCOPE_REQUEST);
        assert_int_equal(message_error_scope(RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION), SCOPE_TOPIC);
        assert_int_equal(message_error_scope(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT), SCOPE_MESSAGE);
        assert_int_equal(message_classify(RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION), OUTCOME_PERMANENT);
}

/* A transient state every start goes through is not a warning. */
static void test_client_error_level(void **state) {
        (void)state;
        assert_int_equal(message_client_error_level(RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS), 6);
        assert_int_equal(message_client_error_level(RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN), 4);
        assert_int_equal(message_client_error_level(RD_KAFKA_RESP_ERR__TRANSPORT), 4);
        assert_int_equal(message_log_level(4, "GETPID",
                                           "Failed to acquire idempotence PID from broker "
                                           "b/1: Broker: Coordinator load in progress: retrying"),
                         6);
        assert_int_equal(message_log_level(4, "GETPID", "something else"), 4);
        assert_int_equal(message_log_level(4, "FAIL", "Coordinator load in progress"), 4);
        assert_int_equal(message_log_level(0, "X", "y"), 3);
        assert_int_equal(message_log_level(7, "MSG", "debug"), 7);
}

static void test_outcome_to_string(void **state) {
        (void)state;
        assert_string_equal(outcome_to_string(OUTCOME_OK), "ok");
        assert_string_equal(outcome_to_string(OUTCOME_TRANSIENT), "transient");
        assert_string_equal(outcome_to_string(OUTCOME_PERMANENT), "permanent");
        assert_string_equal(outcome_to_string(OUTCOME_CONFIG), "configuration");
        assert_string_equal(outcome_to_string(OUTCOME_FATAL), "fatal");
        assert_string_equal(outcome_to_string((enum outcome)42), "?");
}

/* Asserts that header `idx` of `h` is exactly name=value (value_len bytes). */
static void check_header(const rd_kafka_headers_t *h, size_t idx, const char *name, const char *value,
                         size_t value_len) {
        const char *got_name = NULL;
        const void *got_value = NULL;
        size_t got_size = (size_t)-1;

        assert_int_equal(rd_kafka_header_get_all(h, idx, &got_name, &got_value, &got_size),
                         RD_KAFKA_RESP_ERR_NO_ERROR);
        assert_non_null(got_name);
        assert_string_equal(got_name, name);
        assert_int_equal(got_size, value_len);
        if (value_len > 0) {
                assert_non_null(got_value);
                assert_memory_equal(got_value, value, value_len);
        }
}

static void check_no_header(const rd_kafka_headers_t *h, size_t idx) {
        const char *got_name = NULL;
        const void *got_value = NULL;
        size_t got_size = 0;

        assert_int_equal(rd_kafka_header_get_all(h, idx, &got_name, &got_value, &got_size),
                         RD_KAFKA_RESP_ERR__NOENT);
}

static void test_headers_null_buffer_large_id(void **state) {
        rd_kafka_headers_t *h = NULL;

        (void)state;
        assert_int_equal(message_headers(NULL, 0, INT64_C(9007199254740993), NULL, &h), 0);
        assert_non_null(h);
        assert_int_equal(rd_kafka_header_cnt(h), 1);
        check_header(h, 0, MESSAGE_ID_HEADER, "9007199254740993", 16);
        check_no_header(h, 1);
        rd_kafka_headers_destroy(h);
}

static void test_headers_null_buffer_small_id(void **state) {
        rd_kafka_headers_t *h = NULL;

        (void)state;
        assert_int_equal(message_headers(NULL, 0, 1, NULL, &h), 0);
        assert_non_null(h);
        assert_int_equal(rd_kafka_header_cnt(h), 1);
        check_header(h, 0, "outbox-id", "1", 1);
        check_no_header(h, 1);
        rd_kafka_headers_destroy(h);
}

static void test_headers_id_extremes(void **state) {
        rd_kafka_headers_t *h = NULL;

        (void)state;
        assert_int_equal(message_headers(NULL, 0, INT64_MAX, NULL, &h), 0);
        check_header(h, 0, MESSAGE_ID_HEADER, "9223372036854775807", 19);
        rd_kafka_headers_destroy(h);

        h = NULL;
        assert_int_equal(message_headers(NULL, 0, INT64_MIN, NULL, &h), 0);
        check_header(h, 0, MESSAGE_ID_HEADER, "-9223372036854775808", 20);
        rd_kafka_headers_destroy(h);
}

/* The id is written as printf's "%" PRId64 writes it, whatever its digits. */
static void test_headers_id_like_printf(void **state) {
        const int64_t ids[] = {
                0, 1, 9, 10, 99, 100, 1000000, 123456789012, -1, -10, INT64_MAX - 1, INT64_MIN + 1
        };

        (void)state;
        for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
                rd_kafka_headers_t *h = NULL;
                char want[32];
                int n = snprintf(want, sizeof(want), "%" PRId64, ids[i]);

                assert_int_equal(message_headers(NULL, 0, ids[i], NULL, &h), 0);
                check_header(h, 0, MESSAGE_ID_HEADER, want, (size_t)n);
                rd_kafka_headers_destroy(h);
        }
}

static void test_headers_pairs_in_order(void **state) {
        rd_kafka_headers_t *h = NULL;

        (void)state;
        assert_int_equal(message_headers(BUF("a\0x\0bb\0yy\0"), 42, NULL, &h), 0);
        assert_non_null(h);
        assert_int_equal(rd_kafka_header_cnt(h), 3);
        check_header(h, 0, "a", "x", 1);
        check_header(h, 1, "bb", "yy", 2);
        check_header(h, 2, MESSAGE_ID_HEADER, "42", 2);
        check_no_header(h, 3);
        rd_kafka_headers_destroy(h);
}

static void test_headers_empty_value(void **state) {
        rd_kafka_headers_t *h = NULL;

        (void)state;
        assert_int_equal(message_headers(BUF("k\0\0"), 7, NULL, &h), 0);
        assert_non_null(h);
        assert_int_equal(rd_kafka_header_cnt(h), 2);
        check_header(h, 0, "k", "", 0);
        check_header(h, 1, MESSAGE_ID_HEADER, "7", 1);
        check_no_header(h, 2);
        rd_kafka_headers_destroy(h);
}

static void test_headers_repeated_name_kept(void **state) {
        rd_kafka_headers_t *h = NULL;

        (void)state;
        /* Kafka headers are a list, not a map: both values survive, in order. */
        assert_int_equal(message_headers(BUF("k\0one\0k\0two\0"), 5, NULL, &h), 0);
        assert_int_equal(rd_kafka_header_cnt(h), 3);
        check_header(h, 0, "k", "one", 3);
        check_header(h, 1, "k", "two", 3);
        check_header(h, 2, MESSAGE_ID_HEADER, "5", 1);
        rd_kafka_headers_destroy(h);
}

static void test_headers_source_after_id(void **state) {
        rd_kafka_headers_t *h = NULL;

        (void)state;
        assert_int_equal(message_headers(BUF("a\0x\0"), 42, "shop/public.outbox", &h), 0);
        assert_int_equal(rd_kafka_header_cnt(h), 3);
        check_header(h, 0, "a", "x", 1);
        check_header(h, 1, MESSAGE_ID_HEADER, "42", 2);
        check_header(h, 2, MESSAGE_SOURCE_HEADER, "shop/public.outbox", 18);
        check_no_header(h, 3);
        rd_kafka_headers_destroy(h);

        h = NULL;
        assert_int_equal(message_headers(NULL, 0, 1, "s", &h), 0);
        assert_int_equal(rd_kafka_header_cnt(h), 2);
        check_header(h, 1, "outbox-source", "s", 1);
        rd_kafka_headers_destroy(h);
}

/* message_source(): configured wins, else DATABASE/SCHEMA.TABLE; the rule holds for both. */
static void test_source_table(void **state) {
        char big[MESSAGE_SOURCE_MAX + 2];
        static const struct {
                const char *configured, *db, *schema, *table;
                int ret;
                const char *want; /* the source, or the reason */
        } cases[] = {
                { "", "shop", "public", "outbox", 0, "shop/public.outbox" },
                { NULL, "shop", "public", "outbox", 0, "shop/public.outbox" },
                { "orders-eu-1", "shop", "public", "outbox", 0, "orders-eu-1" },
                /* the parts as quote_ident() gives them */
                { "", "\"Shop Db\"", "\"Sales\"", "\"a.b\"", 0, "\"Shop Db\"/\"Sales\".\"a.b\"" },
                { "", "caf\xc3\xa9", "public", "outbox", 0, "caf\xc3\xa9/public.outbox" },
                { "", "a\tb", "public", "outbox", -EINVAL, "a source may hold no control characters" },
                { "x\x7f", "shop", "public", "outbox", -EINVAL, "a source may hold no control characters" },
                { "x\xc2\x85", "shop", "public", "outbox", -EINVAL,
                  "a source may hold no control characters" },
                { "x\xff", "shop", "public", "outbox", -EINVAL, "a source must be well-formed UTF-8" },
                { "x\xc3", "shop", "public", "outbox", -EINVAL, "a source must be well-formed UTF-8" },
        };
        char buf[MESSAGE_SOURCE_MAX + 1];

        (void)state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                int ret = message_source(cases[i].configured, cases[i].db, cases[i].schema, cases[i].table,
                                         buf, sizeof(buf));

                assert_int_equal(ret, cases[i].ret);
                assert_string_equal(buf, cases[i].want);
        }
        memset(big, 'x', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;
        assert_int_equal(message_source(big, "d", "s", "t", buf, sizeof(buf)), -EINVAL);
        assert_string_equal(buf, "the source would be longer than 200 bytes");
        big[MESSAGE_SOURCE_MAX] = 0; /* exactly 200 bytes */
        assert_int_equal(message_source(big, "d", "s", "t", buf, sizeof(buf)), 0);
        assert_int_equal(strlen(buf), MESSAGE_SOURCE_MAX);
        assert_string_equal(message_source_invalid(""), "a source must not be empty");
        assert_null(message_source_invalid("shop/public.outbox"));
}

/* Calls message_headers on a malformed buffer: -EBADMSG and *out reset to NULL. */
static void check_malformed(const char *buf, size_t len) {
        static int sentinel;
        rd_kafka_headers_t *h = (rd_kafka_headers_t *)(void *)&sentinel;

        assert_int_equal(message_headers(buf, len, 1, NULL, &h), -EBADMSG);
        assert_null(h);
}

static void test_headers_malformed_odd_strings(void **state) {
        (void)state;
        check_malformed(BUF("a\0"));
        check_malformed(BUF("a\0b\0c\0"));
}

static void test_headers_malformed_missing_final_nul(void **state) {
        (void)state;
        check_malformed("a\0b", 3);
        check_malformed("a\0b\0c", 5);
}

static void test_headers_malformed_zero_length(void **state) {
        (void)state;
        check_malformed("", 0);
        check_malformed("a\0b\0", 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_classify_ok),
                cmocka_unit_test(test_row_invalid),
                cmocka_unit_test(test_classify_permanent),
                cmocka_unit_test(test_classify_config),
                cmocka_unit_test(test_classify_fatal),
                cmocka_unit_test(test_classify_transient),
                cmocka_unit_test(test_outcome_to_string),
                cmocka_unit_test(test_topic_names),
                cmocka_unit_test(test_error_scope),
                cmocka_unit_test(test_client_error_level),
                cmocka_unit_test(test_headers_null_buffer_large_id),
                cmocka_unit_test(test_headers_null_buffer_small_id),
                cmocka_unit_test(test_headers_id_extremes),
                cmocka_unit_test(test_headers_id_like_printf),
                cmocka_unit_test(test_headers_pairs_in_order),
                cmocka_unit_test(test_headers_empty_value),
                cmocka_unit_test(test_headers_repeated_name_kept),
                cmocka_unit_test(test_headers_source_after_id),
                cmocka_unit_test(test_source_table),
                cmocka_unit_test(test_headers_malformed_odd_strings),
                cmocka_unit_test(test_headers_malformed_missing_final_nul),
                cmocka_unit_test(test_headers_malformed_zero_length),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
