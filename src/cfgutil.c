/* cfgutil.c -- Text helpers of the configuration modules: appender, quoting, errors, durations. */
#include "cfgutil.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

void cfgutil_sb_putn(struct cfgutil_sbuf *b, const char *s, size_t n) {
        for (size_t i = 0; i < n && b->len + 1 < b->size; i++)
                b->buf[b->len++] = s[i];
        if (b->size)
                b->buf[b->len < b->size ? b->len : b->size - 1] = 0;
}

void cfgutil_sb_puts(struct cfgutil_sbuf *b, const char *s) {
        cfgutil_sb_putn(b, s, strlen(s));
}

void cfgutil_sb_putc(struct cfgutil_sbuf *b, char ch) {
        cfgutil_sb_putn(b, &ch, 1);
}

const char *cfgutil_quote(const char *s, char *buf, size_t size) {
        struct cfgutil_sbuf b = { buf, size, 0 };
        size_t i;

        cfgutil_sb_putc(&b, '"');
        for (i = 0; s[i] && i < 80; i++) {
                unsigned char ch = (unsigned char)s[i];
                char esc[8];

                if (ch == '"' || ch == '\\') {
                        cfgutil_sb_putc(&b, '\\');
                        cfgutil_sb_putc(&b, (char)ch);
                } else if (ch < 0x20 || ch == 0x7f) {
                        snprintf(esc, sizeof(esc), "\\x%02x", ch);
                        cfgutil_sb_puts(&b, esc);
                } else
                        cfgutil_sb_putc(&b, (char)ch);
        }
        cfgutil_sb_putc(&b, '"');
        if (s[i])
                cfgutil_sb_puts(&b, "...");
        return buf;
}

int cfgutil_errorf(char *err, size_t errsz, const char *file, int line, const char *fmt, ...) {
        va_list ap;
        int n;

        if (!err || errsz == 0)
                return -EINVAL;
        if (line > 0)
                n = snprintf(err, errsz, "%s:%d: ", file, line);
        else
                n = snprintf(err, errsz, "%s: ", file);
        if (n < 0 || (size_t)n >= errsz)
                return -EINVAL;
        va_start(ap, fmt);
        vsnprintf(err + n, errsz - (size_t)n, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

static const struct {
        const char *suffix;
        usec_t usec;
} duration_units[] = {
        { "us", 1 },
        { "ms", USEC_PER_MSEC },
        { "s", USEC_PER_SEC },
        { "m", 60 * USEC_PER_SEC },
        { "min", 60 * USEC_PER_SEC },
        { "h", 3600 * USEC_PER_SEC },
        { "d", 86400 * USEC_PER_SEC },
};

int cfgutil_parse_duration(const char *s, usec_t *ret) {
        const char *p = s;
        uint64_t whole = 0, frac = 0, frac_div = 1, unit = 0, total;
        bool digits = false, overflow = false;

        while (*p >= '0' && *p <= '9') {
                digits = true;
                if (whole > (UINT64_MAX - 9) / 10)
                        overflow = true;
                else
                        whole = whole * 10 + (uint64_t)(*p - '0');
                p++;
        }
        if (*p == '.') {
                p++;
                if (!(*p >= '0' && *p <= '9'))
                        return -EINVAL;
                while (*p >= '0' && *p <= '9') {
                        digits = true;
                        if (frac_div < 1000000) {
                                frac = frac * 10 + (uint64_t)(*p - '0');
                                frac_div *= 10;
                        }
                        p++;
                }
        }
        if (!digits)
                return -EINVAL;
        if (*p == 0) {
                /* A bare number is ambiguous; only zero means the same in every unit. */
                if (whole != 0 || frac != 0)
                        return -EINVAL;
                *ret = 0;
                return 0;
        }
        for (size_t i = 0; i < ELEMENTSOF(duration_units); i++)
                if (strcmp(p, duration_units[i].suffix) == 0)
                        unit = duration_units[i].usec;
        if (unit == 0)
                return -EINVAL;
        if (overflow || __builtin_mul_overflow(whole, unit, &total) ||
            __builtin_add_overflow(total, frac * unit / frac_div, &total) || total > INT64_MAX)
                return -ERANGE;
        *ret = total;
        return 0;
}

const char *cfgutil_format_duration(usec_t u, char *buf, size_t size) {
        static const size_t order[] = { 6, 5, 3, 2, 1, 0 }; /* d, h, m, s, ms, us */

        if (u == 0) {
                snprintf(buf, size, "0");
                return buf;
        }
        for (size_t i = 0; i < ELEMENTSOF(order); i++) {
                usec_t unit = duration_units[order[i]].usec;

                if (u % unit == 0) {
                        snprintf(buf, size, "%llu%s", (unsigned long long)(u / unit),
                                 duration_units[order[i]].suffix);
                        break;
                }
        }
        return buf;
}
