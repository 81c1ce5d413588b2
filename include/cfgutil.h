/* cfgutil.h -- Text helpers of the configuration modules (config, conninfo, kafka_guard). */
#pragma once

#include <stddef.h>

#include "util.h"

/* Bounded appender: the output is always NUL-terminated, excess is dropped. */
struct cfgutil_sbuf {
        char *buf;
        size_t size, len;
};

void cfgutil_sb_putn(struct cfgutil_sbuf *b, const char *s, size_t n);
void cfgutil_sb_puts(struct cfgutil_sbuf *b, const char *s);
void cfgutil_sb_putc(struct cfgutil_sbuf *b, char ch);

/* User text for "(got …)": double-quoted, control characters escaped, cut after 80
 * characters ("..."). Returns buf. */
const char *cfgutil_quote(const char *s, char *buf, size_t size);

/* Writes "FILE:LINE: message", or "FILE: message" for file-level errors (line <= 0), into
 * err. Always returns -EINVAL, so callers can `return cfgutil_errorf(…)`. */
int cfgutil_errorf(char *err, size_t errsz, const char *file, int line, const char *fmt, ...) _printf_(5, 6);

/* "250ms", "30s", "1.5s", "5m", "2h", "7d", or "0". Returns 0, -EINVAL (not a duration) or
 * -ERANGE (does not fit). Up to six fractional digits count; the result is truncated to
 * whole microseconds. */
int cfgutil_parse_duration(const char *s, usec_t *ret);

/* Renders usec in the largest unit that divides it exactly ("5m", "1500ms", "0"). Returns buf. */
const char *cfgutil_format_duration(usec_t u, char *buf, size_t size);
