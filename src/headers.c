/* headers.c -- A row's headers column (jsonb, as JSON text) checked and expanded in C; pure, no I/O. */
#include "headers.h"

#include <errno.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

/* The relay's own headers (message.h): a row may not send its own. */
static const char *const reserved[] = { "outbox-id", "outbox-source" };

/* How deep a document may nest: deeper headers (invalid anyway: a header value is a string) get
 * "headers could not be read as JSON: nesting too deep" instead of the type of their value. The
 * parser's stack is allocated up front (about 40 bytes a level). */
#define MAX_DEPTH 1024

/* jsonb_typeof()'s names, which the reasons have always used. */
static const char *type_name(const json_object *v) {
        switch (json_object_get_type(v)) {
        case json_type_object:
                return "object";
        case json_type_array:
                return "array";
        case json_type_string:
                return "string";
        case json_type_int:
        case json_type_double:
                return "number";
        case json_type_boolean:
                return "boolean";
        case json_type_null:
                break;
        }
        return "null";
}

size_t headers_quote_literal(const char *s, char *buf, size_t size) {
        size_t n = 0;

#define PUT(ch)                        \
        do {                           \
                if (n + 1 < size)      \
                        buf[n] = (ch); \
                n++;                   \
        } while (0)
        if (strchr(s, '\\'))
                PUT('E');
        PUT('\'');
        for (const char *c = s; *c; c++) {
                if (*c == '\'' || *c == '\\')
                        PUT(*c);
                PUT(*c);
        }
        PUT('\'');
#undef PUT
        if (size)
                buf[n < size ? n : size - 1] = 0;
        return n;
}

/* headers_expand() once a document is read. */
static int expand(json_object *root, size_t len, char *out, size_t *out_len, char *reason, size_t reasonsz) {
        size_t n = 0;

        if (!root) /* JSON null */
                return 0;
        if (!json_object_is_type(root, json_type_object)) {
                snprintf(reason, reasonsz, "headers must be a JSON object (got %s)", type_name(root));
                return 1;
        }
        for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
                if (json_object_object_get_ex(root, reserved[i], NULL)) {
                        snprintf(reason, reasonsz, "header '%s' is reserved for the relay", reserved[i]);
                        return 1;
                }
        /* One pass: the pairs are written as they come, and the first value that is not a
         * string ends it (*out_len is set only at the end, so a refused row has no pairs). */
        json_object_object_foreach(root, name, value) {
                size_t nlen = strlen(name), vlen;

                if (!json_object_is_type(value, json_type_string)) {
                        char quoted[HEADERS_REASON_MAX];

                        headers_quote_literal(name, quoted, sizeof(quoted));
                        snprintf(reason, reasonsz, "header %s must have a string value (got %s)", quoted,
                                 type_name(value));
                        return 1;
                }
                vlen = (size_t)json_object_get_string_len(value);
                if (n + nlen + vlen + 2 > len) {
                        /* Cannot happen with the text PostgreSQL sends (see headers.h). */
                        snprintf(reason, reasonsz,
                                 "headers could not be read as JSON: longer than their text");
                        return 1;
                }
                memcpy(out + n, name, nlen + 1);
                n += nlen + 1;
                memcpy(out + n, json_object_get_string(value), vlen);
                out[n + vlen] = 0;
                n += vlen + 1;
        }
        *out_len = n;
        return 0;
}

int headers_expand(const char *json, size_t len, char *out, size_t *out_len, char *reason, size_t reasonsz) {
        /* One parser per thread, kept: making one allocates its stack. */
        static _Thread_local json_tokener *tok;
        json_object *root;
        enum json_tokener_error e;
        int ret;

        *out_len = 0;
        if (reasonsz)
                reason[0] = 0;
        if (!json)
                return 0;
        if (len > INT32_MAX - 1) {
                snprintf(reason, reasonsz, "headers could not be read as JSON: %zu bytes", len);
                return 1;
        }
        if (!tok) {
                tok = json_tokener_new_ex(MAX_DEPTH);
                if (!tok)
                        return -ENOMEM;
                json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
        }
        json_tokener_reset(tok);
        /* The terminating NUL goes in too, so a document that is a bare number ends there. */
        root = json_tokener_parse_ex(tok, json, (int)len + 1);
        e = json_tokener_get_error(tok);
        if (e != json_tokener_success || json_tokener_get_parse_end(tok) < len) {
                /* Not PostgreSQL's jsonb output (that is always valid JSON), or nested too deep. */
                snprintf(reason, reasonsz, "headers could not be read as JSON: %s",
                         e != json_tokener_success ? json_tokener_error_desc(e) : "text after the document");
                json_object_put(root);
                return 1;
        }
        ret = expand(root, len, out, out_len, reason, reasonsz);
        json_object_put(root);
        return ret;
}
