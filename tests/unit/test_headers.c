/* test_headers.c -- A row's headers as JSON text (what PostgreSQL sends for a jsonb) to "name\0value\0" pairs or the dead-letter reason the SQL used to give, as table cases. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "headers.h"
#include "util.h"

struct expand_case {
        const char *name;
        const char *json; /* as jsonb_out() writes it; NULL = SQL NULL */
        int ret;
        const char *pairs; /* "name=value;" per pair, for ret 0 */
        const char *reason; /* for ret 1 */
};

static const struct expand_case expands[] = {
        { "SQL NULL: no headers", NULL, 0, "", NULL },
        { "JSON null: no headers", "null", 0, "", NULL },
        { "empty object: no headers", "{}", 0, "", NULL },
        { "three headers, in jsonb's order",
          "{\"type\": \"order.created\", \"source\": \"shop\", \"trace-id\": \"ab\"}", 0,
          "type=order.created;source=shop;trace-id=ab;", NULL },
        { "escapes are decoded", "{\"a\\\"b\": \"line\\nnext \\u00e9 \\ud83d\\ude00\"}", 0,
          "a\"b=line\nnext \xc3\xa9 \xf0\x9f\x98\x80;", NULL },
        { "empty name and value", "{\"\": \"\"}", 0, "=;", NULL },
        { "one short pair", "{\"a\": \"b\"}", 0, "a=b;", NULL },
        { "escapes that decode to more bytes still fit", "{\"\\u00e9\": \"\\ud83d\\ude00\"}", 0,
          "\xc3\xa9=\xf0\x9f\x98\x80;", NULL },
        { "empty values", "{\"x\": \"\", \"y\": \"\", \"z\": \"\"}", 0, "x=;y=;z=;", NULL },
        { "an array", "[1, 2]", 1, NULL, "headers must be a JSON object (got array)" },
        { "a string", "\"x\"", 1, NULL, "headers must be a JSON object (got string)" },
        { "a number", "42", 1, NULL, "headers must be a JSON object (got number)" },
        { "a boolean", "true", 1, NULL, "headers must be a JSON object (got boolean)" },
        { "the relay's own header", "{\"a\": 1, \"outbox-id\": \"7\"}", 1, NULL,
          "header 'outbox-id' is reserved for the relay" },
        { "the relay's source header", "{\"outbox-source\": \"elsewhere/public.outbox\"}", 1, NULL,
          "header 'outbox-source' is reserved for the relay" },
        { "a number value", "{\"n\": 1}", 1, NULL, "header 'n' must have a string value (got number)" },
        { "a null value", "{\"z\": null}", 1, NULL, "header 'z' must have a string value (got null)" },
        { "an array value", "{\"arr\": [\"x\"]}", 1, NULL,
          "header 'arr' must have a string value (got array)" },
        { "an object value", "{\"o\": {\"x\": \"y\"}}", 1, NULL,
          "header 'o' must have a string value (got object)" },
        { "a boolean value", "{\"b\": false}", 1, NULL, "header 'b' must have a string value (got boolean)" },
        { "the first bad name in jsonb's order", "{\"a\": \"ok\", \"bb\": 2, \"cc\": null}", 1, NULL,
          "header 'bb' must have a string value (got number)" },
        { "a quote in the name, as quote_literal() writes it", "{\"it's\": 1}", 1, NULL,
          "header 'it''s' must have a string value (got number)" },
        { "a backslash in the name, as quote_literal() writes it", "{\"a\\\\b\": true}", 1, NULL,
          "header E'a\\\\b' must have a string value (got boolean)" },
        { "a number beyond a double (numeric holds it)", "{\"big\": 1e400}", 1, NULL,
          "header 'big' must have a string value (got number)" },
        { "an integer beyond 64 bits", "{\"k\": \"v\", \"huge\": -123456789012345678901234567890}", 1, NULL,
          "header 'huge' must have a string value (got number)" },
        { "numbers inside strings are left alone", "{\"e\": \"1e400\", \"x\": [1e999, \"-2\"]}", 1, NULL,
          "header 'x' must have a string value (got array)" },
        { "a top-level number beyond a double", "-1E+500", 1, NULL,
          "headers must be a JSON object (got number)" },
        { "a NUL in a value (jsonb refuses \\u0000; the pairs could not carry it)", "{\"a\": \"x\\u0000y\"}",
          1, NULL, "header 'a' has a NUL character (\\u0000) in its value" },
        { "not JSON at all (not from jsonb): says what the reader saw", "{\"a\": ", 1, NULL,
          "headers could not be read as JSON: " },
        { "text after the document (not from jsonb)", "{} x", 1, NULL,
          "headers could not be read as JSON: " },
        { "bytes that are not UTF-8 (the relay's client_encoding is UTF8)", "{\"a\": \"\xff\"}", 1, NULL,
          "headers could not be read as JSON: " },
        { "a NUL in a name (not from jsonb)", "{\"a\\u0000b\": \"c\"}", 1, NULL,
          "header names may not have a NUL character (\\u0000)" },
        { "a reserved name after a bad value: the reserved name is said", "{\"a\": 1, \"outbox-source\": 2}",
          1, NULL, "header 'outbox-source' is reserved for the relay" },
        { "names inside a value are not the row's", "{\"b\": {\"outbox-id\": \"1\"}}", 1, NULL,
          "header 'b' must have a string value (got object)" },
};

/* "name=value;" per pair of an expansion. */
static char *pairs_text(const char *buf, size_t len) {
        char *s = calloc(1, 2 * len + 1);
        size_t n = 0;

        assert_non_null(s);
        for (size_t i = 0; i < len;) {
                size_t nl = strlen(buf + i), vl = strlen(buf + i + nl + 1);

                memcpy(s + n, buf + i, nl);
                n += nl;
                s[n++] = '=';
                memcpy(s + n, buf + i + nl + 1, vl);
                n += vl;
                s[n++] = ';';
                i += nl + vl + 2;
        }
        return s;
}

static void expand_table(void **state) {
        (void)state;
        for (size_t i = 0; i < ELEMENTSOF(expands); i++) {
                const struct expand_case *c = &expands[i];
                size_t len = c->json ? strlen(c->json) : 0, out_len = 99;
                char *out =
                        malloc(len ? len : 1); /* exactly the text's length: ASan sees any write past it */
                char reason[HEADERS_REASON_MAX];

                print_message("# %s\n", c->name);
                assert_non_null(out);
                assert_int_equal(headers_expand(c->json, len, out, &out_len, reason, sizeof(reason)), c->ret);
                if (c->ret == 0) {
                        char *got = pairs_text(out, out_len);

                        assert_true(out_len <= len); /* headers.h: the pairs fit in their text */
                        assert_string_equal(got, c->pairs);
                        assert_string_equal(reason, "");
                        free(got);
                } else {
                        assert_int_equal(out_len, 0);
                        assert_int_equal(strncmp(reason, c->reason, strlen(c->reason)), 0);
                        if (strstr(c->reason, "could not be read") == NULL)
                                assert_string_equal(reason, c->reason);
                }
                free(out);
        }
}

/* headers_expand_rows() on the cases of the table for which `pick` says yes, five times over
 * (more rows than one group of headers.c, so a group ends in the middle), in one call: every
 * row must get exactly what headers_expand() gives it alone, its pairs where it says. With
 * `broken`, only the first round has the cases that are not one JSON value: the groups after it
 * are read as arrays again. */
static void rows_like_one_by_one(bool (*pick)(const struct expand_case *), bool broken) {
        struct headers_row rows[5 * ELEMENTSOF(expands)];
        size_t n = 0, room = 1;
        char *out;

        for (size_t j = 0; j < 5 * ELEMENTSOF(expands); j++)
                if (pick(&expands[j % ELEMENTSOF(expands)]) || (broken && j < ELEMENTSOF(expands))) {
                        size_t i = j % ELEMENTSOF(expands);

                        rows[n] =
                                (struct headers_row){ .json = expands[i].json,
                                                      .len = expands[i].json ? strlen(expands[i].json) : 0 };
                        room += rows[n++].len;
                }
        assert_true(n > 64);
        out = malloc(room);
        assert_non_null(out);
        assert_int_equal(headers_expand_rows(rows, n, out), 0);
        for (size_t i = 0, at = 0; i < n; i++) {
                char alone[4096], reason[HEADERS_REASON_MAX];
                size_t alone_len = 0;
                int ret =
                        headers_expand(rows[i].json, rows[i].len, alone, &alone_len, reason, sizeof(reason));

                print_message("# %s\n", rows[i].json ? rows[i].json : "(SQL NULL)");
                assert_int_equal(rows[i].at, at); /* one after another */
                assert_int_equal(rows[i].out_len, alone_len);
                assert_memory_equal(out + rows[i].at, alone, alone_len);
                if (ret == 0)
                        assert_null(rows[i].error);
                else
                        assert_string_equal(rows[i].error, reason);
                at += rows[i].out_len;
                free(rows[i].error);
        }
        free(out);
}

static bool jsonb_text(const struct expand_case *c) {
        return !c->reason || strstr(c->reason, "could not be read") == NULL;
}

/* What jsonb sends, read as one array. */
static void rows_at_once(void **state) {
        (void)state;
        rows_like_one_by_one(jsonb_text, false);
}

/* Text that is not one JSON value spoils the array: then each row is read alone. */
static void rows_with_broken_text(void **state) {
        (void)state;
        rows_like_one_by_one(jsonb_text, true);
}

/* Nesting deeper than any stack would hold a frame a level for: the reason says the value's type,
 * as jsonb_typeof() would. */
static void too_deep(void **state) {
        size_t depth = 100000, len = 0;
        char *json = malloc(2 * depth + 16), *out, reason[HEADERS_REASON_MAX];
        size_t out_len;

        (void)state;
        assert_non_null(json);
        len += (size_t)sprintf(json, "{\"d\": ");
        for (size_t i = 0; i < depth; i++)
                json[len++] = '[';
        for (size_t i = 0; i < depth; i++)
                json[len++] = ']';
        json[len++] = '}';
        json[len] = 0;
        out = malloc(len);
        assert_non_null(out);
        assert_int_equal(headers_expand(json, len, out, &out_len, reason, sizeof(reason)), 1);
        assert_string_equal(reason, "header 'd' must have a string value (got array)");
        free(out);
        free(json);
}

struct quote_case {
        const char *in, *out;
};

static const struct quote_case quotes[] = {
        { "plain", "'plain'" },    { "", "''" }, { "it's", "'it''s'" }, { "a\\b", "E'a\\\\b'" },
        { "'\\'", "E'''\\\\'''" },
};

static void quote_table(void **state) {
        char small[4];

        (void)state;
        for (size_t i = 0; i < ELEMENTSOF(quotes); i++) {
                char buf[64];

                assert_int_equal(headers_quote_literal(quotes[i].in, buf, sizeof(buf)),
                                 strlen(quotes[i].out));
                assert_string_equal(buf, quotes[i].out);
        }
        /* truncated, still terminated, full length returned */
        assert_int_equal(headers_quote_literal("abcdef", small, sizeof(small)), 8);
        assert_string_equal(small, "'ab");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(expand_table), cmocka_unit_test(too_deep),
                cmocka_unit_test(rows_at_once), cmocka_unit_test(rows_with_broken_text),
                cmocka_unit_test(quote_table),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
