/* config.c -- The key table and the loader: the file validated into a typed struct (DESIGN §7). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <libconfig.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cfgutil.h"
#include "conninfo.h"
#include "http.h"
#include "kafka_guard.h"
#include "message.h"
#include "log.h" /* log_level_from_string() only: this module fills err buffers, it never logs */

/* ---- the key table ------------------------------------------------------------------------ */

enum key_kind {
        KEY_INT, /* libconfig int or int64, range min..max */
        KEY_RATIO, /* number in (0, 1] */
        KEY_DURATION, /* string "250ms", "1.5s", "5m", …; stored as usec, range min..max */
        KEY_CONNINFO, /* libpq conninfo or URI, checked with PQconninfoParse() */
        KEY_TABLE, /* identifier, optionally schema-qualified */
        KEY_CHANNEL, /* identifier */
        KEY_FINISH, /* "delete" | "mark" */
        KEY_ORDERING, /* "key" | "single" | "none" */
        KEY_LOGLEVEL, /* "error" | "warning" | "notice" | "info" | "debug" */
        KEY_LISTEN, /* "ADDRESS:PORT", numeric, or "" (off) */
        KEY_SOURCE, /* "" (derived) or printable UTF-8 text, up to 200 bytes */
};

struct key {
        const char *group;
        const char *name;
        enum key_kind kind;
        size_t offset; /* into struct relay_config */
        long long min, max; /* KEY_INT: value; KEY_DURATION: usec */
        bool zero_ok; /* KEY_DURATION: "0" has a meaning (e.g. keep forever) */
        long long def; /* default of every non-string kind (usec for durations) */
        double def_real; /* KEY_RATIO default */
        const char *def_str; /* default of the string kinds */
        bool restart; /* a change takes effect only after a restart, not on SIGHUP */
        const char *doc; /* one paragraph for outbox-relay.conf(5) */
};

#define SEC(n) ((long long)(n) * (long long)USEC_PER_SEC)
#define MSEC(n) ((long long)(n) * (long long)USEC_PER_MSEC)
#define MIN(n) SEC((n)*60LL)
#define HOUR(n) MIN((n)*60LL)
#define DAY(n) HOUR((n)*24LL)
#define OFF(f) offsetof(struct relay_config, f)

/* One row per key. The sample etc/outbox-relay.conf documents the same rows; a unit test
 * checks that loading the sample gives exactly these defaults. */
static const struct key keys[] = {
        { "postgres", "conninfo", KEY_CONNINFO, OFF(postgres.conninfo), .def_str = "", .restart = true,
          .doc = "libpq connection string, key=value (\"host=db1 dbname=app user=relay\") or URI "
                 "(\"postgresql://relay@db1/app\"); \"\" uses libpq's defaults and the PG* environment "
                 "variables. Prefer a password file (PGPASSFILE, ~/.pgpass) to a password here; passwords "
                 "never appear in logs." },
        { "postgres", "table", KEY_TABLE, OFF(postgres.table), .def_str = "outbox", .restart = true,
          .doc = "The outbox table: name or schema.name, each [A-Za-z_][A-Za-z0-9_]*, at most 63 characters. "
                 "Used quoted, so case matters." },
        { "postgres", "channel", KEY_CHANNEL, OFF(postgres.channel), .def_str = "outbox", .restart = true,
          .doc = "The channel the relay LISTENs on for the insert trigger's NOTIFY (same rules as the "
                 "table)." },
        { "postgres", "connect_timeout", KEY_DURATION, OFF(postgres.connect_timeout), SEC(1), MIN(10),
          .def = SEC(10), .restart = true, .doc = "Deadline of one connection attempt." },
        { "postgres", "statement_timeout", KEY_DURATION, OFF(postgres.statement_timeout), MSEC(100), HOUR(1),
          .def = SEC(30), .restart = true, .doc = "statement_timeout of the relay's sessions." },
        { "postgres", "keepalives_idle", KEY_DURATION, OFF(postgres.keepalives_idle), SEC(1), HOUR(2),
          .def = SEC(30), .restart = true,
          .doc = "TCP keepalive idle time of the connections (whole seconds)." },
        { "postgres", "tcp_user_timeout", KEY_DURATION, OFF(postgres.tcp_user_timeout), SEC(1), HOUR(1),
          .def = SEC(30), .restart = true,
          .doc = "TCP_USER_TIMEOUT: how long sent data may stay unacknowledged before the connection is "
                 "dropped." },

        { "relay", "batch_size", KEY_INT, OFF(relay.batch_size), 1, 10000, .def = 2000,
          .doc = "Rows claimed per batch (one database transaction). A relay killed with kill -9 sends its "
                 "open batches again: at most this many duplicates per pipeline." },
        { "relay", "pipelines", KEY_INT, OFF(relay.pipelines), 1, 8, .def = 2, .restart = true,
          .doc = "Batches in flight at once, each in a transaction on a PostgreSQL connection of its own "
                 "(the relay keeps one more for LISTEN and its looks): while one waits for Kafka the next is "
                 "claimed. Per-key order holds across them." },
        { "relay", "poll_interval", KEY_DURATION, OFF(relay.poll_interval), MSEC(10), MIN(10), .def = SEC(5),
          .doc = "Longest wait for a NOTIFY before looking at the table anyway." },
        { "relay", "batch_timeout", KEY_DURATION, OFF(relay.batch_timeout), SEC(1), HOUR(1), .def = SEC(60),
          .restart = true,
          .doc = "Deadline of one claim, publish and finish cycle: row locks are held this long at most. "
                 "kafka.message_timeout_ms must stay below it." },
        { "relay", "drain_timeout", KEY_DURATION, OFF(relay.drain_timeout), SEC(1), HOUR(1), .def = SEC(30),
          .doc = "On SIGTERM, the batches in flight are finished within this time." },
        { "relay", "finish", KEY_FINISH, OFF(relay.finish), .def = FINISH_DELETE,
          .doc = "What happens to a published row: \"delete\" it, or \"mark\" it with its publication time "
                 "(see retention)." },
        { "relay", "ordering", KEY_ORDERING, OFF(relay.ordering), .def = ORDERING_KEY, .restart = true,
          .doc = "\"key\": every relay on the table publishes at once and per-(topic, key) order holds; "
                 "\"single\": one relay per table publishes, the others stand by; \"none\": every relay "
                 "claims, no order between relays. All relays on a table must use the same mode." },
        { "relay", "source", KEY_SOURCE, OFF(relay.source), .def_str = "", .restart = true,
          .doc = "The value of the outbox-source header on every message: with outbox-id it names an "
                 "event, so a consumer's inbox (sql/inbox.sql, docs/inbox.md) deduplicates on (source, id). "
                 "\"\" derives \"DATABASE/SCHEMA.TABLE\", each part as quote_ident() writes it "
                 "(\"shop/public.outbox\"): unique within a cluster, it survives restarts and failover to a "
                 "standby, not a renamed database or table. Set it when consumers read the topics of more "
                 "than one cluster, or before renaming. Every relay on a table must send the same value, "
                 "and it must never change once consumers deduplicate on it." },
        { "relay", "max_attempts", KEY_INT, OFF(relay.max_attempts), 1, 1000, .def = 10,
          .doc = "A row that fails on its own this many times is dead-lettered." },
        { "relay", "retention", KEY_DURATION, OFF(relay.retention), MIN(1), DAY(3650), true, .def = DAY(7),
          .doc = "finish = \"mark\" only: marked rows older than this are deleted; \"0\" keeps them." },
        { "relay", "status_interval", KEY_DURATION, OFF(relay.status_interval), SEC(1), DAY(1),
          .def = SEC(60), .doc = "Interval of the periodic summary line in the log." },

        { "breaker", "failure_threshold", KEY_INT, OFF(breaker.failure_threshold), 1, 1000, .def = 5,
          .doc = "Consecutive transiently failed batches that open the circuit breaker." },
        { "breaker", "failure_ratio", KEY_RATIO, OFF(breaker.failure_ratio), .def_real = 0.5,
          .doc = "Share of failed batches among the last window that opens it (above 0, at most 1)." },
        { "breaker", "window", KEY_INT, OFF(breaker.window), 1, 10000, .def = 20,
          .doc = "Batches in the ratio window." },
        { "breaker", "cooldown", KEY_DURATION, OFF(breaker.cooldown), MSEC(100), HOUR(1), .def = SEC(5),
          .doc = "First open period; doubles on every failed probe up to cooldown_max (at most "
                 "cooldown_max)." },
        { "breaker", "cooldown_max", KEY_DURATION, OFF(breaker.cooldown_max), MSEC(100), DAY(1),
          .def = MIN(5), .doc = "Cap of the open period." },

        { "retry", "base", KEY_DURATION, OFF(retry.base), MSEC(1), HOUR(1), .def = MSEC(200),
          .doc = "Base of the capped exponential backoff with full jitter for reconnects and failed batches: "
                 "sleep = random(0, min(cap, base * 2^n)); at most cap." },
        { "retry", "cap", KEY_DURATION, OFF(retry.cap), MSEC(1), DAY(1), .def = SEC(30),
          .doc = "Cap of that backoff." },

        { "log", "level", KEY_LOGLEVEL, OFF(log.level), .def = LOG_INFO,
          .doc = "\"error\", \"warning\", \"notice\", \"info\" or \"debug\"." },

        /* 7460: outside 9100-9999, the range of the Prometheus exporters' port allocations (all
         * of it taken), and no service in Debian's /etc/services. */
        { "http", "listen", KEY_LISTEN, OFF(http.listen), .def_str = "127.0.0.1:7460", .restart = true,
          .doc = "\"ADDRESS:PORT\", numeric (\"127.0.0.1:7460\", \"[::1]:7460\"), or \"\" for no HTTP: "
                 "/health, /ready and /metrics. Port 0 takes any free port. Several relays on one machine "
                 "need one port each." },
        { "http", "connection_limit", KEY_INT, OFF(http.connection_limit), 1, 1024, .def = 16,
          .restart = true, .doc = "HTTP connections served at once; more are refused." },
        { "http", "timeout", KEY_DURATION, OFF(http.timeout), SEC(1), MIN(10), .def = SEC(10),
          .restart = true, .doc = "An HTTP connection idle this long is closed." },
};

static const char *const groups[] = { "postgres", "kafka", "relay", "breaker", "retry", "log", "http" };

size_t config_key_count(void) {
        return ELEMENTSOF(keys);
}

int config_key_describe(size_t i, struct config_key_doc *d) {
        const struct key *k;
        char a[32], b[32];

        if (i >= ELEMENTSOF(keys))
                return -ENOENT;
        k = &keys[i];
        memset(d, 0, sizeof(*d));
        d->group = k->group;
        d->name = k->name;
        d->doc = k->doc;
        d->reloadable = !k->restart;
        switch (k->kind) {
        case KEY_INT:
                d->type = "integer";
                snprintf(d->def, sizeof(d->def), "%lld", k->def);
                snprintf(d->range, sizeof(d->range), "%lld..%lld", k->min, k->max);
                break;
        case KEY_RATIO:
                d->type = "number";
                snprintf(d->def, sizeof(d->def), "%g", k->def_real);
                snprintf(d->range, sizeof(d->range), "above 0, at most 1");
                break;
        case KEY_DURATION:
                d->type = "duration";
                snprintf(d->def, sizeof(d->def), "\"%s\"",
                         cfgutil_format_duration((usec_t)k->def, a, sizeof(a)));
                snprintf(d->range, sizeof(d->range), "%s%s..%s", k->zero_ok ? "\"0\" or " : "",
                         cfgutil_format_duration((usec_t)k->min, a, sizeof(a)),
                         cfgutil_format_duration((usec_t)k->max, b, sizeof(b)));
                break;
        case KEY_FINISH:
                d->type = "string";
                snprintf(d->def, sizeof(d->def), "\"delete\"");
                snprintf(d->range, sizeof(d->range), "\"delete\" or \"mark\"");
                break;
        case KEY_ORDERING:
                d->type = "string";
                snprintf(d->def, sizeof(d->def), "\"key\"");
                snprintf(d->range, sizeof(d->range), "\"key\", \"single\" or \"none\"");
                break;
        case KEY_LOGLEVEL:
                d->type = "string";
                snprintf(d->def, sizeof(d->def), "\"info\"");
                snprintf(d->range, sizeof(d->range),
                         "\"error\", \"warning\", \"notice\", \"info\" or \"debug\"");
                break;
        case KEY_CONNINFO:
        case KEY_TABLE:
        case KEY_CHANNEL:
        case KEY_LISTEN:
        case KEY_SOURCE:
                d->type = "string";
                snprintf(d->def, sizeof(d->def), "\"%s\"", k->def_str);
                snprintf(d->range, sizeof(d->range), "%s",
                         k->kind == KEY_CONNINFO         ? "a libpq connection string"
                                 : k->kind == KEY_LISTEN ? "\"ADDRESS:PORT\" or \"\""
                                 : k->kind == KEY_SOURCE ? "\"\" or printable text, up to 200 bytes"
                                 : k->kind == KEY_TABLE  ? "a name or schema.name, each up to 63 characters"
                                                         : "a name, up to 63 characters");
                break;
        }
        return 0;
}

static void *field(struct relay_config *c, const struct key *k) {
        return (char *)c + k->offset;
}

static const struct key *key_find(const char *group, const char *name) {
        for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                if (strcmp(keys[i].group, group) == 0 && strcmp(keys[i].name, name) == 0)
                        return &keys[i];
        return NULL;
}

/* ---- identifiers -------------------------------------------------------------------------- */

static bool name_char(int ch) {
        return isalnum(ch) || ch == '_';
}

/* [A-Za-z_][A-Za-z0-9_]*, at most 63 characters (NAMEDATALEN - 1), n bytes of s. */
static bool valid_identifier(const char *s, size_t n) {
        if (n == 0 || n > 63 || isdigit((unsigned char)s[0]))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isascii((unsigned char)s[i]) || !name_char((unsigned char)s[i]))
                        return false;
        return true;
}

/* relay.source: "" or what message_source_invalid() accepts. */
static bool valid_source(const char *s) {
        return !s[0] || !message_source_invalid(s);
}

static bool valid_qualified_identifier(const char *s) {
        const char *dot = strchr(s, '.');

        if (!dot)
                return valid_identifier(s, strlen(s));
        return valid_identifier(s, (size_t)(dot - s)) && valid_identifier(dot + 1, strlen(dot + 1));
}

/* ---- errors ------------------------------------------------------------------------------- */

struct loader {
        const char *file; /* the path given to config_load() */
        char *err;
        size_t errsz;
        /* Cache of one source file's text, for literal_int64(). */
        char *src_file;
        char *src;
        /* Where each row of keys[] was set (line 0: not in the file). */
        const char *key_file[ELEMENTSOF(keys)];
        int key_line[ELEMENTSOF(keys)];
        /* libconfig records an @include by the name written, but opens it in include_dir. */
        const char *include_dir;
        const char *included[16];
        char *included_path[16];
        size_t n_included;
};

/* The path of a file libconfig read, as the user can open it. */
static const char *source_path(struct loader *l, const char *f) {
        size_t i;

        if (!f)
                return l->file;
        if (f[0] == '/' || !l->include_dir || strcmp(f, l->file) == 0)
                return f;
        for (i = 0; i < l->n_included; i++)
                if (strcmp(l->included[i], f) == 0)
                        return l->included_path[i];
        if (i == ELEMENTSOF(l->included) || asprintf(&l->included_path[i], "%s/%s", l->include_dir, f) < 0)
                return f;
        l->included[i] = f;
        l->n_included++;
        return l->included_path[i];
}

static const char *setting_file(struct loader *l, const config_setting_t *s) {
        return source_path(l, config_setting_source_file(s));
}

static const char *setting_path(const config_setting_t *s, char *buf, size_t size) {
        const config_setting_t *parent = config_setting_parent(s);
        const char *name = config_setting_name(s);

        if (parent && config_setting_name(parent))
                snprintf(buf, size, "%s.%s", config_setting_name(parent), name ? name : "?");
        else
                snprintf(buf, size, "%s", name ? name : "?");
        return buf;
}

/* "FILE:LINE: group.key: message" for setting s. Returns -EINVAL. */
static int setting_error(struct loader *l, const config_setting_t *s, const char *fmt, ...) _printf_(3, 4);
static int setting_error(struct loader *l, const config_setting_t *s, const char *fmt, ...) {
        char msg[1024], path[256];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        return cfgutil_errorf(l->err, l->errsz, setting_file(l, s), config_setting_source_line(s), "%s: %s",
                              setting_path(s, path, sizeof(path)), msg);
}

/* What the user wrote, for "(got …)": `integer 5`, `string "x"`, `group`. */
static const char *describe(const config_setting_t *s, char *buf, size_t size) {
        char q[128];

        switch (config_setting_type(s)) {
        case CONFIG_TYPE_INT:
                snprintf(buf, size, "integer %d", config_setting_get_int(s));
                break;
        case CONFIG_TYPE_INT64:
                snprintf(buf, size, "integer %lld", config_setting_get_int64(s));
                break;
        case CONFIG_TYPE_FLOAT:
                snprintf(buf, size, "float %g", config_setting_get_float(s));
                break;
        case CONFIG_TYPE_STRING:
                snprintf(buf, size, "string %s", cfgutil_quote(config_setting_get_string(s), q, sizeof(q)));
                break;
        case CONFIG_TYPE_BOOL:
                snprintf(buf, size, "boolean %s", config_setting_get_bool(s) ? "true" : "false");
                break;
        case CONFIG_TYPE_GROUP:
                snprintf(buf, size, "group");
                break;
        case CONFIG_TYPE_ARRAY:
                snprintf(buf, size, "array");
                break;
        case CONFIG_TYPE_LIST:
                snprintf(buf, size, "list");
                break;
        default:
                snprintf(buf, size, "nothing");
        }
        return buf;
}

/* ---- integers: libconfig 1.5 truncates 64-bit literals without the L suffix ---------------- */

static char *read_file_text(const char *path) {
        char *text = NULL;
        size_t len = 0, cap = 0;
        FILE *f = fopen(path, "re");

        if (!f)
                return NULL;
        for (;;) {
                size_t n;

                if (cap - len < 4096) {
                        char *t = realloc(text, cap + 65536);

                        if (!t) {
                                free(text);
                                fclose(f);
                                return NULL;
                        }
                        text = t;
                        cap += 65536;
                }
                n = fread(text + len, 1, cap - len - 1, f);
                len += n;
                if (n == 0)
                        break;
        }
        fclose(f);
        text[len] = 0;
        return text;
}

/* Parses an integer literal at p as libconfig writes it: [+-]digits or [+-]0xHEX, no L
 * suffix. Returns 1 and sets *v (or *overflow) when it is one, 0 otherwise. */
static int parse_int_literal(const char *p, long long *v, bool *overflow) {
        uint64_t mag = 0;
        bool neg = false, hex = false, any = false;

        *overflow = false;
        if (*p == '-' || *p == '+')
                neg = *p++ == '-';
        if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
                hex = true;
                p += 2;
        }
        for (;; p++) {
                int d;

                if (*p >= '0' && *p <= '9')
                        d = *p - '0';
                else if (hex && isxdigit((unsigned char)*p))
                        d = tolower((unsigned char)*p) - 'a' + 10;
                else
                        break;
                any = true;
                if (mag > (UINT64_MAX - (uint64_t)d) / (hex ? 16 : 10))
                        *overflow = true;
                else
                        mag = mag * (hex ? 16 : 10) + (uint64_t)d;
        }
        if (!any || name_char((unsigned char)*p) || *p == '.')
                return 0;
        if (*overflow || mag > (uint64_t)INT64_MAX + (neg ? 1 : 0)) {
                *overflow = true;
                return 1;
        }
        *v = neg ? (long long)(0 - mag) : (long long)mag;
        return 1;
}

/* Counts the settings before s (depth first, file order) named like s on the same line of
 * the same file, so that `a = { n = 1; }; b = { n = 2; };` finds the right `n`. */
static int same_line_index(const config_setting_t *node, const config_setting_t *s, int *count) {
        int n = config_setting_length(node);

        for (int i = 0; i < n; i++) {
                const config_setting_t *e = config_setting_get_elem(node, (unsigned)i);
                const char *en = config_setting_name(e), *ef = config_setting_source_file(e);
                const char *sf = config_setting_source_file(s);

                if (e == s)
                        return 1;
                if (en && strcmp(en, config_setting_name(s)) == 0 &&
                    config_setting_source_line(e) == config_setting_source_line(s) && ef && sf &&
                    strcmp(ef, sf) == 0)
                        (*count)++;
                if (config_setting_is_aggregate(e) && same_line_index(e, s, count))
                        return 1;
        }
        return 0;
}

/* libconfig 1.5 stores `x = 5000000000;` as INT 705032704 (the low 32 bits) without a word.
 * Find the literal written after the setting's name in the source and return the value it
 * really denotes. Returns 0 (*v set; the stored value when the text cannot be matched) or
 * -ERANGE when the literal does not even fit 64 bits. */
static int literal_int64(struct loader *l, const config_setting_t *s, long long *v) {
        const char *file = setting_file(l, s), *name = config_setting_name(s), *p;
        const config_setting_t *root = s;
        int stored = config_setting_get_int(s), line = config_setting_source_line(s), index = 0;
        size_t nlen;

        *v = stored;
        if (!name || line <= 0)
                return 0;
        while (config_setting_parent(root))
                root = config_setting_parent(root);
        same_line_index(root, s, &index);
        if (!l->src_file || strcmp(l->src_file, file) != 0) {
                free(l->src_file);
                free(l->src);
                l->src = read_file_text(file);
                l->src_file = l->src ? strdup(file) : NULL;
                if (!l->src || !l->src_file)
                        return 0;
        }
        p = l->src;
        for (int i = 1; i < line && p; i++) {
                p = strchr(p, '\n');
                if (p)
                        p++;
        }
        if (!p)
                return 0;
        nlen = strlen(name);
        for (const char *q = p; *q && *q != '\n'; q++) {
                const char *t;
                long long lit = 0;
                bool overflow;

                if (strncmp(q, name, nlen) != 0 || (q > l->src && name_char((unsigned char)q[-1])) ||
                    name_char((unsigned char)q[nlen]))
                        continue;
                t = q + nlen;
                while (isspace((unsigned char)*t))
                        t++;
                if (*t != '=' && *t != ':')
                        continue;
                if (index-- > 0)
                        continue; /* an earlier setting of the same name */
                t++;
                while (isspace((unsigned char)*t)) /* the value may be on a later line */
                        t++;
                if (!parse_int_literal(t, &lit, &overflow))
                        return 0;
                /* Believe the text only where it explains what libconfig stored. */
                if (overflow)
                        return stored == -1 || stored == 0 ? -ERANGE : 0;
                if ((int32_t)(uint32_t)(uint64_t)lit == stored)
                        *v = lit;
                return 0;
        }
        return 0;
}

/* Integer of any width. Returns 0, -EINVAL (not an integer) or -ERANGE (beyond 64 bits). */
static int get_integer(struct loader *l, const config_setting_t *s, long long *v) {
        switch (config_setting_type(s)) {
        case CONFIG_TYPE_INT:
                return literal_int64(l, s, v);
        case CONFIG_TYPE_INT64:
                *v = config_setting_get_int64(s);
                return 0;
        default:
                return -EINVAL;
        }
}

/* ---- defaults, free ----------------------------------------------------------------------- */

void config_free(struct relay_config *c) {
        if (!c)
                return;
        free(c->file);
        free(c->postgres.conninfo);
        free(c->postgres.table);
        free(c->postgres.channel);
        free(c->relay.source);
        free(c->http.listen);
        for (size_t i = 0; i < c->kafka.n_props; i++) {
                free(c->kafka.props[i].name);
                free(c->kafka.props[i].setting);
                free(c->kafka.props[i].value);
        }
        free(c->kafka.props);
        free(c->kafka.file);
        memset(c, 0, sizeof(*c));
}

int config_defaults(struct relay_config *c) {
        memset(c, 0, sizeof(*c));
        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                const struct key *k = &keys[i];
                void *f = field(c, k);

                switch (k->kind) {
                case KEY_INT:
                case KEY_LOGLEVEL:
                        *(int *)f = (int)k->def;
                        break;
                case KEY_FINISH:
                        *(enum finish_mode *)f = (enum finish_mode)k->def;
                        break;
                case KEY_ORDERING:
                        *(enum ordering_mode *)f = (enum ordering_mode)k->def;
                        break;
                case KEY_RATIO:
                        *(double *)f = k->def_real;
                        break;
                case KEY_DURATION:
                        *(usec_t *)f = (usec_t)k->def;
                        break;
                case KEY_CONNINFO:
                case KEY_TABLE:
                case KEY_CHANNEL:
                case KEY_LISTEN:
                case KEY_SOURCE:
                        *(char **)f = strdup(k->def_str);
                        if (!*(char **)f) {
                                config_free(c);
                                return -ENOMEM;
                        }
                        break;
                }
        }
        return 0;
}

/* ---- one setting -------------------------------------------------------------------------- */

static int need_string(struct loader *l, const config_setting_t *s, const char **v) {
        char got[160];

        if (config_setting_type(s) != CONFIG_TYPE_STRING)
                return setting_error(l, s, "must be a string (got %s)", describe(s, got, sizeof(got)));
        *v = config_setting_get_string(s);
        return 0;
}

/* libpq's own parser, plus what libpq checks only when it connects: a port that is not a
 * number would otherwise pass here and make the relay retry forever. */
static int parse_conninfo(struct loader *l, const config_setting_t *s, const char *v) {
        char msg[512];

        if (conninfo_check(v, msg, sizeof(msg)) < 0)
                return setting_error(l, s, "%s", msg);
        return 0;
}

static int parse_duration_setting(struct loader *l, const config_setting_t *s, const struct key *k,
                                  usec_t *out) {
        char got[160], q[128], lo[32], hi[32];
        const char *v;
        usec_t u;
        int r;

        switch (config_setting_type(s)) {
        case CONFIG_TYPE_INT:
        case CONFIG_TYPE_INT64:
        case CONFIG_TYPE_FLOAT:
                return setting_error(l, s, "must be a duration string such as \"5s\" (got %s)",
                                     describe(s, got, sizeof(got)));
        case CONFIG_TYPE_STRING:
                break;
        default:
                return setting_error(l, s, "must be a duration string such as \"5s\" (got %s)",
                                     describe(s, got, sizeof(got)));
        }
        v = config_setting_get_string(s);
        cfgutil_quote(v, q, sizeof(q));
        if (v[0] == '-')
                return setting_error(l, s, "must not be negative (got %s)", q);
        r = cfgutil_parse_duration(v, &u);
        if (r == -ERANGE)
                return setting_error(l, s, "is too large (got %s)", q);
        if (r < 0)
                return setting_error(l, s,
                                     "must be a duration such as \"250ms\", \"30s\", \"5m\", \"2h\" or "
                                     "\"7d\" (got %s)",
                                     q);
        if (u == 0 && k->zero_ok) {
                *out = 0;
                return 0;
        }
        cfgutil_format_duration((usec_t)k->min, lo, sizeof(lo));
        cfgutil_format_duration((usec_t)k->max, hi, sizeof(hi));
        if (u < (usec_t)k->min || u > (usec_t)k->max)
                return setting_error(l, s, "must be %s%s..%s (got %s)", k->zero_ok ? "\"0\" or " : "", lo, hi,
                                     q);
        *out = u;
        return 0;
}

static int parse_key(struct loader *l, const config_setting_t *s, const struct key *k,
                     struct relay_config *c) {
        void *f = field(c, k);
        char got[160], q[128];
        const char *v = NULL;
        long long iv;
        int r;

        switch (k->kind) {
        case KEY_INT:
                r = get_integer(l, s, &iv);
                if (r == -ERANGE)
                        return setting_error(l, s, "must be %lld..%lld (got an integer beyond 64 bits)",
                                             k->min, k->max);
                if (r < 0)
                        return setting_error(l, s, "must be an integer (got %s)",
                                             describe(s, got, sizeof(got)));
                if (iv < k->min || iv > k->max)
                        return setting_error(l, s, "must be %lld..%lld (got %lld)", k->min, k->max, iv);
                *(int *)f = (int)iv;
                return 0;

        case KEY_RATIO: {
                double d;

                if (config_setting_type(s) == CONFIG_TYPE_FLOAT)
                        d = config_setting_get_float(s);
                else if (get_integer(l, s, &iv) == 0)
                        d = (double)iv;
                else
                        return setting_error(l, s, "must be a number (got %s)",
                                             describe(s, got, sizeof(got)));
                if (!(d > 0.0 && d <= 1.0))
                        return setting_error(l, s, "must be greater than 0 and at most 1 (got %g)", d);
                *(double *)f = d;
                return 0;
        }

        case KEY_DURATION:
                return parse_duration_setting(l, s, k, (usec_t *)f);

        case KEY_CONNINFO:
        case KEY_TABLE:
        case KEY_CHANNEL:
        case KEY_LISTEN:
        case KEY_SOURCE: {
                char *copy;

                r = need_string(l, s, &v);
                if (r < 0)
                        return r;
                if (k->kind == KEY_CONNINFO) {
                        r = parse_conninfo(l, s, v);
                        if (r < 0)
                                return r;
                } else if (k->kind == KEY_TABLE && !valid_qualified_identifier(v))
                        return setting_error(l, s,
                                             "must be name or schema.name, each of letters, digits "
                                             "and '_', not starting with a digit, at most 63 "
                                             "characters (got %s)",
                                             cfgutil_quote(v, q, sizeof(q)));
                else if (k->kind == KEY_LISTEN && v[0]) {
                        struct sockaddr_storage sa;
                        socklen_t len;
                        char why[160];

                        if (http_parse_listen(v, &sa, &len, why, sizeof(why)) < 0)
                                return setting_error(l, s, "%s (got %s)", why,
                                                     cfgutil_quote(v, q, sizeof(q)));
                } else if (k->kind == KEY_SOURCE && !valid_source(v))
                        return setting_error(
                                l, s,
                                "must be \"\" or printable UTF-8 text without control characters, "
                                "at most 200 bytes (got %s)",
                                cfgutil_quote(v, q, sizeof(q)));
                else if (k->kind == KEY_CHANNEL && !valid_identifier(v, strlen(v)))
                        return setting_error(l, s,
                                             "must be a name of letters, digits and '_', not "
                                             "starting with a digit, at most 63 characters (got %s)",
                                             cfgutil_quote(v, q, sizeof(q)));
                copy = strdup(v);
                if (!copy)
                        return setting_error(l, s, "out of memory");
                free(*(char **)f);
                *(char **)f = copy;
                return 0;
        }

        case KEY_FINISH:
                r = need_string(l, s, &v);
                if (r < 0)
                        return r;
                if (strcmp(v, "delete") == 0)
                        *(enum finish_mode *)f = FINISH_DELETE;
                else if (strcmp(v, "mark") == 0)
                        *(enum finish_mode *)f = FINISH_MARK;
                else
                        return setting_error(l, s, "must be \"delete\" or \"mark\" (got %s)",
                                             cfgutil_quote(v, q, sizeof(q)));
                return 0;

        case KEY_ORDERING:
                r = need_string(l, s, &v);
                if (r < 0)
                        return r;
                if (strcmp(v, "key") == 0)
                        *(enum ordering_mode *)f = ORDERING_KEY;
                else if (strcmp(v, "single") == 0)
                        *(enum ordering_mode *)f = ORDERING_SINGLE;
                else if (strcmp(v, "none") == 0)
                        *(enum ordering_mode *)f = ORDERING_NONE;
                else
                        return setting_error(l, s, "must be \"key\", \"single\" or \"none\" (got %s)",
                                             cfgutil_quote(v, q, sizeof(q)));
                return 0;

        case KEY_LOGLEVEL:
                r = need_string(l, s, &v);
                if (r < 0)
                        return r;
                r = log_level_from_string(v);
                if (r < 0)
                        return setting_error(l, s,
                                             "must be \"error\", \"warning\", \"notice\", \"info\" or "
                                             "\"debug\" (got %s)",
                                             cfgutil_quote(v, q, sizeof(q)));
                *(int *)f = r;
                return 0;
        }
        return -EINVAL;
}

/* ---- the kafka group ---------------------------------------------------------------------- */

/* Renders a scalar as the string librdkafka parses. */
static int kafka_value(struct loader *l, const config_setting_t *s, char **out) {
        char buf[64], got[160];
        long long iv;
        int r;

        switch (config_setting_type(s)) {
        case CONFIG_TYPE_STRING:
                *out = strdup(config_setting_get_string(s));
                break;
        case CONFIG_TYPE_INT:
        case CONFIG_TYPE_INT64:
                /* librdkafka's numeric properties are C ints, and it would cut a wider value
                 * without a word, as libconfig does. */
                r = get_integer(l, s, &iv);
                if (r < 0)
                        return setting_error(l, s, "must be %d..%d (got an integer beyond 64 bits)", INT_MIN,
                                             INT_MAX);
                if (iv < INT_MIN || iv > INT_MAX)
                        return setting_error(l, s, "must be %d..%d (got %lld)", INT_MIN, INT_MAX, iv);
                snprintf(buf, sizeof(buf), "%lld", iv);
                *out = strdup(buf);
                break;
        case CONFIG_TYPE_FLOAT: {
                double d = config_setting_get_float(s);

                if (!isfinite(d))
                        return setting_error(l, s, "must be a finite number (got %g)", d);
                snprintf(buf, sizeof(buf), "%.15g", d);
                if (strtod(buf, NULL) != d)
                        snprintf(buf, sizeof(buf), "%.17g", d);
                *out = strdup(buf);
                break;
        }
        case CONFIG_TYPE_BOOL:
                *out = strdup(config_setting_get_bool(s) ? "true" : "false");
                break;
        default:
                return setting_error(l, s, "must be a string, number or boolean (got %s)",
                                     describe(s, got, sizeof(got)));
        }
        return *out ? 0 : setting_error(l, s, "out of memory");
}

static int parse_kafka(struct loader *l, const config_setting_t *g, struct relay_config *c) {
        int n = config_setting_length(g);

        if (n <= 0)
                return 0;
        c->kafka.props = calloc((size_t)n, sizeof(struct kafka_prop));
        if (!c->kafka.props)
                return setting_error(l, g, "out of memory");
        for (int i = 0; i < n; i++) {
                const config_setting_t *s = config_setting_get_elem(g, (unsigned)i);
                struct kafka_prop *p = &c->kafka.props[c->kafka.n_props];
                const char *name = config_setting_name(s);
                int r;

                r = kafka_value(l, s, &p->value);
                if (r < 0)
                        return r;
                c->kafka.n_props++; /* from here on config_free() owns p */
                p->line = config_setting_source_line(s);
                p->setting = strdup(name);
                p->name = strdup(name);
                if (!p->setting || !p->name)
                        return setting_error(l, s, "out of memory");
                /* libconfig names cannot hold '.', so `linger_ms` stands for linger.ms. */
                for (char *ch = p->name; *ch; ch++)
                        if (*ch == '_')
                                *ch = '.';
        }
        return 0;
}

rd_kafka_conf_t *config_kafka_conf(const struct relay_config *c, char *err, size_t errsz) {
        rd_kafka_conf_t *conf;

        return kafka_guard_conf(c, NULL, NULL, &conf, err, errsz) < 0 ? NULL : conf;
}

const char *config_redact_conninfo(const char *conninfo, char *buf, size_t bufsz) {
        return conninfo_redact(conninfo, buf, bufsz);
}

/* ---- cross-field rules -------------------------------------------------------------------- */

/* a <= b for two duration keys; blames a if the file set it, else b. */
static int check_order(struct loader *l, struct relay_config *c, const char *group, const char *a,
                       const char *b) {
        const struct key *ka = key_find(group, a), *kb = key_find(group, b);
        usec_t va = *(usec_t *)field(c, ka), vb = *(usec_t *)field(c, kb);
        size_t ia = (size_t)(ka - keys), ib = (size_t)(kb - keys);
        char sa[32], sb[32];

        if (va <= vb)
                return 0;
        cfgutil_format_duration(va, sa, sizeof(sa));
        cfgutil_format_duration(vb, sb, sizeof(sb));
        if (l->key_line[ia] > 0 || l->key_line[ib] <= 0)
                return cfgutil_errorf(l->err, l->errsz, l->key_file[ia] ? l->key_file[ia] : l->file,
                                      l->key_line[ia], "%s.%s: must not exceed %s.%s (%s) (got %s)", group, a,
                                      group, b, sb, sa);
        return cfgutil_errorf(l->err, l->errsz, l->key_file[ib], l->key_line[ib],
                              "%s.%s: must not be below %s.%s (%s) (got %s)", group, b, group, a, sa, sb);
}

/* ---- the file ----------------------------------------------------------------------------- */

static int parse_group(struct loader *l, const config_setting_t *g, struct relay_config *c) {
        const char *gname = config_setting_name(g);
        int n = config_setting_length(g);

        for (int i = 0; i < n; i++) {
                const config_setting_t *s = config_setting_get_elem(g, (unsigned)i);
                const struct key *k = key_find(gname, config_setting_name(s));
                int r;

                if (!k)
                        return setting_error(l, s, "unknown setting");
                r = parse_key(l, s, k, c);
                if (r < 0)
                        return r;
                l->key_line[k - keys] = config_setting_source_line(s);
                l->key_file[k - keys] = setting_file(l, s);
        }
        return 0;
}

/* Checks the file before libconfig sees it: libconfig reports neither errno nor file name. */
static int check_file(const char *path, char *err, size_t errsz) {
        struct stat st;
        int fd, r = 0;

        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                r = -errno;
        else if (fstat(fd, &st) < 0)
                r = -errno;
        else if (S_ISDIR(st.st_mode))
                r = -EISDIR;
        if (fd >= 0)
                close(fd);
        if (r < 0)
                cfgutil_errorf(err, errsz, path, 0, "cannot open: %s", strerror(-r));
        return r;
}

/* libconfig 1.5 (Debian 12) opens an @include target with fopen() and hands it to its scanner:
 * a directory makes the scanner fail and exit() the whole process ("input in flex scanner
 * failed", exit status 2, no file or line), and a FIFO or a device blocks the start. So every
 * target that exists must be a regular file, checked before libconfig reads anything. A missing
 * target is left to libconfig, which names its line ("cannot open include file"); so is a line
 * inside a comment that only looks like an @include, unless it names something that is not a
 * regular file (an error then too, a harmless one). `file` is the including file as the user
 * can open it; includes nest at most 10 deep, as in libconfig. */
static int check_includes(const struct loader *l, const char *file, int depth) {
        FILE *f = fopen(file, "re");
        char *line = NULL;
        size_t cap = 0;
        int n = 0, r = 0;

        if (!f)
                return 0; /* libconfig says why */
        while (r == 0 && getline(&line, &cap, f) > 0) {
                const char *p = line + strspn(line, " \t"), *end;
                char target[PATH_MAX];
                struct stat st;

                n++;
                if (strncmp(p, "@include", 8) != 0 || !strchr(" \t", p[8]))
                        continue;
                p += 8 + strspn(p + 8, " \t");
                if (*p != '"' || !(end = strchr(p + 1, '"')))
                        continue; /* a syntax error libconfig reports */
                p++;
                if (snprintf(target, sizeof(target), "%s%s%.*s", p[0] == '/' ? "" : l->include_dir,
                             p[0] == '/' ? "" : "/", (int)(end - p), p) >= (int)sizeof(target))
                        continue;
                if (stat(target, &st) < 0)
                        continue;
                if (!S_ISREG(st.st_mode))
                        r = cfgutil_errorf(l->err, l->errsz, file, n,
                                           "@include \"%.*s\": not a regular file (%s)", (int)(end - p), p,
                                           S_ISDIR(st.st_mode)            ? "a directory"
                                                   : S_ISFIFO(st.st_mode) ? "a FIFO"
                                                   : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)
                                                   ? "a device"
                                                   : "not a file");
                else if (depth < 10)
                        r = check_includes(l, target, depth + 1);
        }
        free(line);
        fclose(f);
        return r;
}

int config_load(const char *path, struct relay_config *c, char *err, size_t errsz) {
        struct loader l = { .err = err, .errsz = errsz };
        _cleanup_free_ char *dir = NULL;
        const config_setting_t *root, *kafka = NULL;
        _cleanup_free_ const char **prop_files = NULL;
        rd_kafka_conf_t *conf;
        config_t cfg;
        int r;

        if (!path)
                path = CONFIG_DEFAULT_PATH;
        l.file = path;
        if (err && errsz)
                err[0] = 0;
        r = config_defaults(c);
        if (r < 0) {
                cfgutil_errorf(err, errsz, path, 0, "out of memory");
                return r;
        }
        c->file = strdup(path);
        dir = strdup(path);
        if (!c->file || !dir) {
                config_free(c);
                cfgutil_errorf(err, errsz, path, 0, "out of memory");
                return -ENOMEM;
        }
        r = check_file(path, err, errsz);
        if (r < 0) {
                config_free(c);
                return r;
        }

        config_init(&cfg);
        /* @include "x.conf" is relative to the including file's directory, not to our cwd. */
        l.include_dir = dirname(dir);
        config_set_include_dir(&cfg, l.include_dir);
        r = check_includes(&l, path, 0);
        if (r < 0)
                goto out;
        if (!config_read_file(&cfg, path)) {
                if (config_error_type(&cfg) == CONFIG_ERR_FILE_IO) {
                        cfgutil_errorf(err, errsz, path, 0, "cannot read: %s", config_error_text(&cfg));
                        r = -EIO;
                } else {
                        const char *f = config_error_file(&cfg);

                        cfgutil_errorf(err, errsz, source_path(&l, f), config_error_line(&cfg), "%s",
                                       config_error_text(&cfg));
                        r = -EINVAL;
                }
                goto out;
        }

        root = config_root_setting(&cfg);
        for (int i = 0; i < config_setting_length(root); i++) {
                const config_setting_t *g = config_setting_get_elem(root, (unsigned)i);
                const char *name = config_setting_name(g);
                bool known = false;
                char got[160];

                for (size_t j = 0; j < ELEMENTSOF(groups); j++)
                        known = known || strcmp(groups[j], name) == 0;
                if (!known) {
                        r = setting_error(&l, g,
                                          "unknown setting (groups: postgres, kafka, relay, breaker, "
                                          "retry, log, http)");
                        goto out;
                }
                if (!config_setting_is_group(g)) {
                        r = setting_error(&l, g, "must be a group { ... } (got %s)",
                                          describe(g, got, sizeof(got)));
                        goto out;
                }
                if (strcmp(name, "kafka") == 0) {
                        const char *gfile = setting_file(&l, g);

                        kafka = g;
                        c->kafka.line = config_setting_source_line(g);
                        if (strcmp(gfile, path) != 0 && !(c->kafka.file = strdup(gfile))) {
                                r = setting_error(&l, g, "out of memory");
                                goto out;
                        }
                        r = parse_kafka(&l, g, c);
                } else
                        r = parse_group(&l, g, c);
                if (r < 0)
                        goto out;
        }

        r = check_order(&l, c, "retry", "base", "cap");
        if (r < 0)
                goto out;
        r = check_order(&l, c, "breaker", "cooldown", "cooldown_max");
        if (r < 0)
                goto out;

        /* Build the producer configuration once now, so --check-config sees what librdkafka
         * says about every property, with the property's own file and line. */
        if (c->kafka.n_props > 0) {
                prop_files = calloc(c->kafka.n_props, sizeof(*prop_files));
                if (!prop_files) {
                        r = cfgutil_errorf(err, errsz, path, 0, "out of memory");
                        goto out;
                }
                for (size_t i = 0; i < c->kafka.n_props; i++)
                        prop_files[i] = setting_file(&l, config_setting_get_elem(kafka, (unsigned)i));
        }
        r = kafka_guard_conf(c, c->kafka.props, prop_files, &conf, err, errsz);
        if (r < 0)
                goto out;
        rd_kafka_conf_destroy(conf);

out:
        config_destroy(&cfg);
        free(l.src_file);
        free(l.src);
        for (size_t i = 0; i < l.n_included; i++)
                free(l.included_path[i]);
        if (r < 0)
                config_free(c);
        return r;
}

static bool props_equal(const struct relay_config *a, const struct relay_config *b) {
        if (a->kafka.n_props != b->kafka.n_props)
                return false;
        for (size_t i = 0; i < a->kafka.n_props; i++)
                if (strcmp(a->kafka.props[i].name, b->kafka.props[i].name) != 0 ||
                    strcmp(a->kafka.props[i].value, b->kafka.props[i].value) != 0)
                        return false;
        return true;
}

static void append_name(char *buf, size_t sz, const char *name) {
        size_t n = strlen(buf);

        snprintf(buf + n, sz - n, "%s%s", n ? ", " : "", name);
}

static void props_free(struct kafka_prop *props, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(props[i].name);
                free(props[i].setting);
                free(props[i].value);
        }
        free(props);
}

/* A copy of running's kafka group (properties and where the group is), or NULL. */
static struct kafka_prop *props_copy(const struct relay_config *running, char **file,
                                     char *(*dup)(const char *)) {
        size_t n = running->kafka.n_props;
        struct kafka_prop *props = calloc(n + 1, sizeof(*props));

        *file = NULL;
        if (!props)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                const struct kafka_prop *p = &running->kafka.props[i];

                props[i].line = p->line;
                if (!(props[i].name = dup(p->name)) || !(props[i].setting = dup(p->setting)) ||
                    !(props[i].value = dup(p->value))) {
                        props_free(props, i + 1);
                        return NULL;
                }
        }
        if (running->kafka.file && !(*file = dup(running->kafka.file))) {
                props_free(props, n);
                return NULL;
        }
        return props;
}

int config_keep_restart_only(const struct relay_config *running, struct relay_config *next, char *changed,
                             size_t changedsz) {
        return config_keep_restart_only_with(running, next, changed, changedsz, strdup);
}

int config_keep_restart_only_with(const struct relay_config *running, struct relay_config *next,
                                  char *changed, size_t changedsz, char *(*dup)(const char *)) {
        /* Every copy first, then the swap: out of memory leaves `next` as it was. */
        char *copies[ELEMENTSOF(keys)] = { 0 }, *kafka_file = NULL;
        struct kafka_prop *props = NULL;
        bool props_differ = !props_equal(running, next);
        int count = 0;

        if (changedsz)
                changed[0] = 0;
        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                const struct key *k = &keys[i];
                const char *from;

                if (!k->restart ||
                    (k->kind != KEY_CONNINFO && k->kind != KEY_TABLE && k->kind != KEY_CHANNEL &&
                     k->kind != KEY_LISTEN && k->kind != KEY_SOURCE))
                        continue;
                from = *(char *const *)((const char *)running + k->offset);
                if (strcmp(from, *(char **)field(next, k)) != 0 && !(copies[i] = dup(from)))
                        goto nomem;
        }
        if (props_differ && !(props = props_copy(running, &kafka_file, dup)))
                goto nomem;

        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                const struct key *k = &keys[i];
                const void *from = (const char *)running + k->offset;
                void *to = field(next, k);
                char name[64];
                bool differs;

                if (!k->restart)
                        continue;
                switch (k->kind) {
                case KEY_CONNINFO:
                case KEY_TABLE:
                case KEY_CHANNEL:
                case KEY_LISTEN:
                case KEY_SOURCE:
                        differs = copies[i] != NULL;
                        if (differs) {
                                free(*(char **)to);
                                *(char **)to = TAKE_PTR(copies[i]);
                        }
                        break;
                case KEY_DURATION:
                        differs = *(const usec_t *)from != *(usec_t *)to;
                        *(usec_t *)to = *(const usec_t *)from;
                        break;
                case KEY_INT:
                        differs = *(const int *)from != *(int *)to;
                        *(int *)to = *(const int *)from;
                        break;
                case KEY_ORDERING:
                        differs = *(const enum ordering_mode *)from != *(enum ordering_mode *)to;
                        *(enum ordering_mode *)to = *(const enum ordering_mode *)from;
                        break;
                default: /* no other kind is restart-only */
                        differs = false;
                        break;
                }
                if (differs) {
                        snprintf(name, sizeof(name), "%s.%s", k->group, k->name);
                        append_name(changed, changedsz, name);
                        count++;
                }
        }
        if (props_differ) {
                props_free(next->kafka.props, next->kafka.n_props);
                free(next->kafka.file);
                next->kafka.props = props;
                next->kafka.n_props = running->kafka.n_props;
                next->kafka.file = kafka_file;
                next->kafka.line = running->kafka.line;
                append_name(changed, changedsz, "kafka.*");
                count++;
        }
        return count;

nomem:
        for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                free(copies[i]);
        return -ENOMEM;
}
