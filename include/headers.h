/* headers.h -- A row's headers column (jsonb, as JSON text) checked and expanded in C; pure, no I/O. */
#pragma once

#include <stddef.h>

/* Room for a reason: batch rows keep 319 characters of it (batch.h). */
#define HEADERS_REASON_MAX 320

/* Reads the headers column of one row: `json` is its text as PostgreSQL sends a jsonb (`len`
 * bytes and a NUL after them, as libpq gives every value; NULL for SQL NULL). Valid headers, a JSON object of string values, are written to
 * `out` as "name\0value\0" pairs in the object's order (jsonb's: shorter names first), and
 * *out_len says how long; SQL NULL and JSON null mean no headers (*out_len = 0). `out` needs
 * room for `len` bytes: the pairs are never longer than the text they come from.
 *
 * Returns 0 when the headers are usable, 1 when they are not (then `reason` says why, in the
 * words the relay has always stored in last_error: "headers must be a JSON object (got
 * array)", "header 'outbox-id' is reserved for the relay" (and 'outbox-source'), "header 'n' must have a string
 * value (got number)" for the first such name, quoted as quote_literal() does), -ENOMEM. */
int headers_expand(const char *json, size_t len, char *out, size_t *out_len, char *reason, size_t reasonsz);

/* One row for headers_expand_rows(): its column in, where its pairs went out. */
struct headers_row {
        const char *json; /* as for headers_expand(): the text, NULL for SQL NULL */
        size_t len;
        size_t at, out_len; /* out: its pairs are out + at, out_len bytes (0: none) */
        char *error; /* out: why they cannot be sent (malloc'd: the caller frees it), or NULL */
};

/* headers_expand() of n rows, with its results, but yajl reads them in groups as one document,
 * "[h0,h1,...]" (SQL NULL as null), so its reader is set up once a group. Only for jsonb's text,
 * which is always exactly one JSON value without space around it (the relay's headers column is
 * jsonb, schema.c): other text could be split otherwise inside the array. When a group does not
 * read as an array of as many values as it has rows, each of its rows is read on its own. `out`
 * needs room for the sum of the rows' lengths; the rows' pairs follow each other in it.
 * Returns 0, or -ENOMEM (then the errors given so far are the caller's to free). */
int headers_expand_rows(struct headers_row *rows, size_t n, char *out);

/* PostgreSQL's quote_literal(): 'it''s', and E'a\\b' when there is a backslash. Writes at most
 * `size` bytes including the terminating NUL (truncating); returns the full length. */
size_t headers_quote_literal(const char *s, char *buf, size_t size);
