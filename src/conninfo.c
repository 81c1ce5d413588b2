/* conninfo.c -- libpq connection strings: passwords redacted for messages, checked before use. */
#include "conninfo.h"

#include <ctype.h>
#include <errno.h>
#include <libpq-fe.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cfgutil.h"

/* ---- redaction ---------------------------------------------------------------------------- */

/* Whether the value of key k[0..n) is hidden: passwords always (any case: a mistyped key is
 * still a password to hide), and with `known` (libpq's keywords, for error messages about a
 * string libpq refused) also the value of any key libpq does not know, such as "passwd". */
static bool hide_value(const char *k, size_t n, const PQconninfoOption *known) {
        if ((n == 8 && strncasecmp(k, "password", 8) == 0) ||
            (n == 11 && strncasecmp(k, "sslpassword", 11) == 0))
                return true;
        if (!known)
                return false;
        for (; known->keyword; known++)
                if (strlen(known->keyword) == n && strncmp(known->keyword, k, n) == 0)
                        return false;
        return true;
}

static bool is_uri(const char *s) {
        return strncmp(s, "postgresql://", 13) == 0 || strncmp(s, "postgres://", 11) == 0;
}

/* Percent-decodes s[0..n) into buf (for comparing URI keys). */
static void uri_decode(const char *s, size_t n, char *buf, size_t size) {
        size_t o = 0;

        for (size_t i = 0; i < n && o + 1 < size; i++) {
                if (s[i] == '%' && i + 2 < n && isxdigit((unsigned char)s[i + 1]) &&
                    isxdigit((unsigned char)s[i + 2])) {
                        char hex[3] = { s[i + 1], s[i + 2], 0 };

                        buf[o++] = (char)strtol(hex, NULL, 16);
                        i += 2;
                } else
                        buf[o++] = s[i];
        }
        buf[o] = 0;
}

static void redact_uri(const char *s, struct cfgutil_sbuf *b, const PQconninfoOption *known) {
        size_t pre = strncmp(s, "postgresql://", 13) == 0 ? 13 : 11;
        const char *p = s + pre, *q, *at = NULL, *colon;

        cfgutil_sb_putn(b, s, pre);
        /* Credentials end at the last '@' before the query. libpq would stop at a '/', but a
         * password with a stray '/' must not leak either: redact too much, never too little. */
        for (q = p; *q && *q != '?'; q++)
                if (*q == '@')
                        at = q;
        if (at) {
                colon = memchr(p, ':', (size_t)(at - p));
                if (colon) {
                        cfgutil_sb_putn(b, p, (size_t)(colon - p));
                        cfgutil_sb_puts(b, ":***");
                } else
                        cfgutil_sb_putn(b, p, (size_t)(at - p));
                p = at;
        }
        q = strchr(p, '?');
        if (!q) {
                cfgutil_sb_puts(b, p);
                return;
        }
        cfgutil_sb_putn(b, p, (size_t)(q - p));
        p = q;
        while (*p) {
                const char *end, *eq;
                char key[64];

                cfgutil_sb_putc(b, *p++); /* '?' or '&' */
                end = p + strcspn(p, "&");
                eq = memchr(p, '=', (size_t)(end - p));
                if (eq) {
                        uri_decode(p, (size_t)(eq - p), key, sizeof(key));
                        if (hide_value(key, strlen(key), known)) {
                                cfgutil_sb_putn(b, p, (size_t)(eq - p) + 1);
                                cfgutil_sb_puts(b, "***");
                                p = end;
                                continue;
                        }
                }
                cfgutil_sb_putn(b, p, (size_t)(end - p));
                p = end;
        }
}

static void redact_kv(const char *s, struct cfgutil_sbuf *b, int depth, const PQconninfoOption *known);

/* A dbname value may itself be a connection string that libpq expands (and so may hold a
 * password): redact it recursively and re-quote it. */
static void redact_dbname(const char *v, size_t n, bool quoted, struct cfgutil_sbuf *b, int depth,
                          const PQconninfoOption *known) {
        _cleanup_free_ char *plain = NULL, *inner = NULL;
        size_t o = 0, isz = 2 * n + 16;
        struct cfgutil_sbuf ib;

        plain = malloc(n + 1);
        inner = malloc(isz);
        if (!plain || !inner) {
                cfgutil_sb_puts(b, "***");
                return;
        }
        for (size_t i = quoted ? 1 : 0; i < n; i++) {
                if (v[i] == '\\' && i + 1 < n)
                        plain[o++] = v[++i];
                else if (quoted && v[i] == '\'')
                        break;
                else
                        plain[o++] = v[i];
        }
        plain[o] = 0;
        if (!strchr(plain, '=') && !is_uri(plain)) {
                cfgutil_sb_putn(b, v, n);
                return;
        }
        ib = (struct cfgutil_sbuf){ inner, isz, 0 };
        if (is_uri(plain))
                redact_uri(plain, &ib, known);
        else
                redact_kv(plain, &ib, depth + 1, known);
        cfgutil_sb_putc(b, '\'');
        for (const char *p = inner; *p; p++) {
                if (*p == '\'' || *p == '\\')
                        cfgutil_sb_putc(b, '\\');
                cfgutil_sb_putc(b, *p);
        }
        cfgutil_sb_putc(b, '\'');
}

/* libpq's key = value syntax: values bare (backslash escapes) or single-quoted (\' and \\).
 * Anything that does not parse is redacted to the end: a mistyped string such as
 * "host=x secret" must not reach a log either. */
static void redact_kv(const char *s, struct cfgutil_sbuf *b, int depth, const PQconninfoOption *known) {
        const char *p = s;

        for (;;) {
                const char *key, *v;
                size_t klen;
                bool quoted;

                while (isspace((unsigned char)*p))
                        cfgutil_sb_putc(b, *p++);
                if (!*p)
                        return;
                key = p;
                while (*p && *p != '=' && !isspace((unsigned char)*p))
                        p++;
                klen = (size_t)(p - key);
                while (isspace((unsigned char)*p))
                        p++;
                if (klen == 0 || *p != '=') {
                        cfgutil_sb_puts(b, "***");
                        return;
                }
                p++;
                cfgutil_sb_putn(b, key, (size_t)(p - key));
                while (isspace((unsigned char)*p))
                        cfgutil_sb_putc(b, *p++);
                v = p;
                quoted = *p == '\'';
                if (quoted) {
                        for (p++; *p && *p != '\''; p++)
                                if (*p == '\\' && p[1])
                                        p++;
                        if (*p == '\'')
                                p++;
                } else {
                        for (; *p && !isspace((unsigned char)*p); p++)
                                if (*p == '\\' && p[1])
                                        p++;
                }
                if (hide_value(key, klen, known))
                        cfgutil_sb_puts(b, "***");
                else if (depth == 0 && klen == 6 && strncmp(key, "dbname", 6) == 0)
                        redact_dbname(v, (size_t)(p - v), quoted, b, depth, known);
                else
                        cfgutil_sb_putn(b, v, (size_t)(p - v));
        }
}

static const char *redact(const char *conninfo, char *buf, size_t bufsz, const PQconninfoOption *known) {
        struct cfgutil_sbuf b = { buf, bufsz, 0 };

        if (bufsz == 0)
                return buf;
        buf[0] = 0;
        if (!conninfo)
                return buf;
        if (is_uri(conninfo))
                redact_uri(conninfo, &b, known);
        else
                redact_kv(conninfo, &b, 0, known);
        return buf;
}

const char *conninfo_redact(const char *conninfo, char *buf, size_t bufsz) {
        return redact(conninfo, buf, bufsz, NULL);
}

/* ---- checks ------------------------------------------------------------------------------- */

/* libpq's parse_int_param(): strtol() with leading and trailing white space, the whole value
 * a C int. */
static bool libpq_int(const char *s, size_t n, long *v) {
        char buf[32], *end;

        if (n >= sizeof(buf))
                return false;
        memcpy(buf, s, n);
        buf[n] = 0;
        errno = 0;
        *v = strtol(buf, &end, 10);
        if (end == buf || errno != 0 || *v < INT_MIN || *v > INT_MAX)
                return false;
        while (isspace((unsigned char)*end))
                end++;
        return *end == 0;
}

/* Elements of a comma-separated list, as libpq counts them ("" counts none). */
static int list_count(const char *s) {
        int n = 1;

        if (!s || !*s)
                return 0;
        for (; *s; s++)
                n += *s == ',';
        return n;
}

static const char *option(const PQconninfoOption *opts, const char *keyword) {
        for (; opts->keyword; opts++)
                if (strcmp(opts->keyword, keyword) == 0)
                        return opts->val;
        return NULL;
}

/* The checks libpq makes only when it connects (connectOptions2(), PQconnectPoll()). Returns
 * NULL or what is wrong, in buf or static. */
static const char *connect_time_error(const PQconninfoOption *opts, char *buf, size_t size) {
        static const char *const int_options[] = {
                "connect_timeout",     "keepalives",       "keepalives_idle",
                "keepalives_interval", "keepalives_count", "tcp_user_timeout",
        };
        const char *port = option(opts, "port"), *host = option(opts, "host");
        const char *hostaddr = option(opts, "hostaddr");
        int nhosts = 1, nports = list_count(port);
        long v;

        if (list_count(hostaddr) > 0) {
                nhosts = list_count(hostaddr);
                if (list_count(host) > 0 && list_count(host) != nhosts) {
                        snprintf(buf, size, "%d host names for %d hostaddr values; give one per address",
                                 list_count(host), nhosts);
                        return buf;
                }
        } else if (list_count(host) > 0)
                nhosts = list_count(host);
        /* An empty element means the default port, 5432. */
        for (const char *p = port; p && *p;) {
                size_t n = strcspn(p, ",");

                if (n > 0 && (!libpq_int(p, n, &v) || v < 1 || v > 65535))
                        return "port must be 1..65535";
                p += n;
                if (*p == ',')
                        p++;
        }
        if (nports > 1 && nports != nhosts) {
                snprintf(buf, size, "%d ports for %d hosts; give one port, or one per host", nports, nhosts);
                return buf;
        }
        for (size_t i = 0; i < ELEMENTSOF(int_options); i++) {
                const char *val = option(opts, int_options[i]);

                if (val && !libpq_int(val, strlen(val), &v)) {
                        snprintf(buf, size, "%s must be an integer", int_options[i]);
                        return buf;
                }
        }
        return NULL;
}

int conninfo_check(const char *v, char *msg, size_t msgsz) {
        PQconninfoOption *opts, *known;
        char *pqmsg = NULL;
        _cleanup_free_ char *redacted = NULL;
        size_t rsz = 2 * strlen(v) + 16;
        char q[128], why[128];
        const char *wrong;

        opts = PQconninfoParse(v, &pqmsg);
        if (opts) {
                wrong = connect_time_error(opts, why, sizeof(why));
                PQconninfoFree(opts);
                if (!wrong)
                        return 0;
                /* libpq accepted the string, so every key is one it knows: hiding the
                 * passwords is enough. */
                redacted = malloc(rsz);
                if (!redacted) {
                        snprintf(msg, msgsz, "invalid connection string: %s", wrong);
                        return -EINVAL;
                }
                conninfo_redact(v, redacted, rsz);
                snprintf(msg, msgsz, "invalid connection string: %s (got %s)", wrong,
                         cfgutil_quote(redacted, q, sizeof(q)));
                return -EINVAL;
        }
        if (pqmsg)
                PQfreemem(pqmsg);
        /* libpq's message may quote the string, password included: ask again about the
         * redacted string and report only what that says. The string is wrong somewhere, so
         * hide the values of unknown keys too ("passwd=…"). */
        redacted = malloc(rsz);
        known = PQconndefaults();
        if (!redacted || !known) {
                if (known)
                        PQconninfoFree(known);
                snprintf(msg, msgsz, "invalid connection string");
                return -EINVAL;
        }
        redact(v, redacted, rsz, known);
        PQconninfoFree(known);
        pqmsg = NULL;
        opts = PQconninfoParse(redacted, &pqmsg);
        if (opts) {
                PQconninfoFree(opts);
                snprintf(msg, msgsz, "invalid connection string (in a password value) (got %s)",
                         cfgutil_quote(redacted, q, sizeof(q)));
        } else {
                char *nl;

                if (pqmsg && (nl = strchr(pqmsg, '\n')))
                        *nl = 0;
                snprintf(msg, msgsz, "invalid connection string: %s (got %s)",
                         pqmsg ? pqmsg : "out of memory", cfgutil_quote(redacted, q, sizeof(q)));
        }
        if (pqmsg)
                PQfreemem(pqmsg);
        return -EINVAL;
}
