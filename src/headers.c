/* headers.c -- A row's headers column (jsonb, as JSON text) checked and expanded in C; pure, no I/O. */
#include "headers.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define RESERVED_HEADER "outbox-id"

/* jsonb_typeof()'s names, which the reasons have always used. */
static const char *type_name(const json_t *v) {
        switch (json_typeof(v)) {
        case JSON_OBJECT:
                return "object";
        case JSON_ARRAY:
                return "array";
        case JSON_STRING:
                return "string";
        case JSON_INTEGER:
        case JSON_REAL:
                return "number";
        case JSON_TRUE:
        case JSON_FALSE:
                return "boolean";
        case JSON_NULL:
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

/* PostgreSQL's numeric holds numbers a double cannot (1e400), and jansson refuses them. Only a
 * number's type matters here (a header value must be a string), so a copy with every number
 * outside the strings written as 0 is read instead. NULL without memory. */
static char *numbers_as_zero(const char *json, size_t len) {
        char *s = malloc(len + 1);
        bool in_string = false;

        if (!s)
                return NULL;
        memcpy(s, json, len);
        s[len] = 0;
        for (size_t i = 0; i < len; i++) {
                if (in_string) {
                        if (s[i] == '\\')
                                i++;
                        else if (s[i] == '"')
                                in_string = false;
                } else if (s[i] == '"') {
                        in_string = true;
                } else if (s[i] == '-' || (s[i] >= '0' && s[i] <= '9')) {
                        s[i] = '0';
                        while (i + 1 < len && strchr("0123456789+-.eE", s[i + 1]) && s[i + 1])
                                s[++i] = ' ';
                }
        }
        return s;
}

static json_t *load(const char *json, size_t len, char *reason, size_t reasonsz, int *err) {
        const size_t flags = JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL;
        json_error_t jerr;
        json_t *root = json_loadb(json, len, flags, &jerr);
        char *zeroed;

        *err = 0;
        if (root)
                return root;
        if (json_error_code(&jerr) == json_error_out_of_memory) {
                *err = -ENOMEM;
                return NULL;
        }
        if (json_error_code(&jerr) == json_error_numeric_overflow) {
                zeroed = numbers_as_zero(json, len);
                if (!zeroed) {
                        *err = -ENOMEM;
                        return NULL;
                }
                root = json_loads(zeroed, flags, &jerr);
                free(zeroed);
                if (root)
                        return root;
        }
        /* Not from PostgreSQL's jsonb output (it always is valid JSON): say what the reader saw. */
        snprintf(reason, reasonsz, "headers could not be read as JSON: %s", jerr.text);
        *err = 1;
        return NULL;
}

int headers_expand(const char *json, size_t len, char *out, size_t *out_len, char *reason, size_t reasonsz) {
        const char *name;
        json_t *root, *value;
        size_t n = 0;
        int err;

        *out_len = 0;
        if (reasonsz)
                reason[0] = 0;
        if (!json)
                return 0;
        root = load(json, len, reason, reasonsz, &err);
        if (!root)
                return err;
        if (json_is_null(root)) {
                json_decref(root);
                return 0;
        }
        if (!json_is_object(root)) {
                snprintf(reason, reasonsz, "headers must be a JSON object (got %s)", type_name(root));
                json_decref(root);
                return 1;
        }
        if (json_object_get(root, RESERVED_HEADER)) {
                snprintf(reason, reasonsz, "header '%s' is reserved for the relay", RESERVED_HEADER);
                json_decref(root);
                return 1;
        }
        json_object_foreach(root, name, value) {
                if (!json_is_string(value)) {
                        char quoted[HEADERS_REASON_MAX];

                        headers_quote_literal(name, quoted, sizeof(quoted));
                        snprintf(reason, reasonsz, "header %s must have a string value (got %s)", quoted,
                                 type_name(value));
                        json_decref(root);
                        return 1;
                }
        }
        json_object_foreach(root, name, value) {
                size_t nlen = strlen(name), vlen = json_string_length(value);

                if (n + nlen + vlen + 2 > len) {
                        /* Cannot happen with the text PostgreSQL sends (see headers.h). */
                        snprintf(reason, reasonsz,
                                 "headers could not be read as JSON: longer than their text");
                        json_decref(root);
                        return 1;
                }
                memcpy(out + n, name, nlen + 1);
                n += nlen + 1;
                memcpy(out + n, json_string_value(value), vlen);
                out[n + vlen] = 0;
                n += vlen + 1;
        }
        json_decref(root);
        *out_len = n;
        return 0;
}
