/* utf8.c -- Text the relay writes into PostgreSQL (last_error) kept valid UTF-8 when it is cut to fit. */
#include "utf8.h"

#include <stdbool.h>
#include <string.h>

/* The length of the well-formed character at s (1-4), 0 when none starts there, or -1 when a
 * well-formed start is cut off by the end of the string. */
static int char_len(const unsigned char *s) {
        unsigned char c = s[0];
        unsigned char lo = 0x80, hi = 0xbf;
        int n;

        if (c < 0x80)
                return 1;
        if (c >= 0xc2 && c <= 0xdf)
                n = 2;
        else if (c >= 0xe0 && c <= 0xef) {
                n = 3;
                if (c == 0xe0)
                        lo = 0xa0; /* no overlong forms */
                else if (c == 0xed)
                        hi = 0x9f; /* no surrogates */
        } else if (c >= 0xf0 && c <= 0xf4) {
                n = 4;
                if (c == 0xf0)
                        lo = 0x90;
                else if (c == 0xf4)
                        hi = 0x8f; /* nothing above U+10FFFF */
        } else {
                return 0;
        }
        for (int i = 1; i < n; i++) {
                unsigned char b = s[i];

                if (!b)
                        return -1;
                if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xbf))
                        return 0;
        }
        return n;
}

size_t utf8_fit(const char *s, size_t max) {
        size_t n = 0;

        while (s[n]) {
                int l = char_len((const unsigned char *)s + n);

                if (l <= 0)
                        l = 1; /* not a character: one byte at a time, as utf8_repair sees it */
                if (n + (size_t)l > max)
                        break;
                n += (size_t)l;
        }
        return n;
}

size_t utf8_repair(char *s) {
        size_t n = 0;

        while (s[n]) {
                int l = char_len((const unsigned char *)s + n);

                if (l < 0) {
                        s[n] = 0;
                        break;
                }
                if (l == 0)
                        s[n++] = '?';
                else
                        n += (size_t)l;
        }
        return n;
}
