/* utf8.h -- Text the relay writes into PostgreSQL (last_error) kept valid UTF-8 when it is cut to fit. */
#pragma once

#include <stddef.h>

/* The length of the longest prefix of s (NUL-terminated) that has at most `max` bytes and does not
 * end inside a character. Pure. */
size_t utf8_fit(const char *s, size_t max);

/* Makes s valid UTF-8 in place: an incomplete character at the end is dropped, any other byte
 * that does not belong to a well-formed character (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF) becomes '?'. A database whose encoding is UTF8 refuses the whole
 * statement for one such byte. Returns s's new length. Pure. */
size_t utf8_repair(char *s);
