/* headers.c -- A row's headers column (jsonb, as JSON text) checked and expanded in C; pure, no I/O. */
#include "headers.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_parse.h>

/* The relay's own headers (message.h): a row may not send its own. */
static const char *const reserved[] = { "outbox-id", "outbox-source" };
#define N_RESERVED (sizeof(reserved) / sizeof(reserved[0]))

/* What a JSON value is, in jsonb_typeof()'s names, which the reasons have always used. */
enum kind { KIND_NONE, KIND_OBJECT, KIND_ARRAY, KIND_STRING, KIND_NUMBER, KIND_BOOLEAN, KIND_NULL };

static const char *const kind_names[] = {
        [KIND_NONE] = "nothing",  [KIND_OBJECT] = "object", [KIND_ARRAY] = "array",
        [KIND_STRING] = "string", [KIND_NUMBER] = "number", [KIND_BOOLEAN] = "boolean",
        [KIND_NULL] = "null",
};

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

/* yajl reads the text as a stream of events (a name, a string, an object opens, ...) and builds
 * no tree: a header's name and value are copied from its buffer straight to the pairs. The walk
 * below turns the events into each row's verdict. A row's value sits at depth `base`: 0 when a
 * row is read alone, 1 inside a group's array. Only the members of a row's object (depth base + 1)
 * are looked at; what is nested in them only has its type said, at any depth (yajl keeps one
 * byte a level, not a stack frame). */

/* One row's value, as far as it has been read. */
struct row_walk {
        enum kind kind; /* the value's own type (KIND_NONE before it starts) */
        size_t n; /* bytes of pairs written for it */
        int reserved; /* the first of reserved[] among its names, or -1 */
        size_t name_at; /* where its current member's name was written */
        char bad[HEADERS_REASON_MAX]; /* why its first unusable member cannot be sent, or "" */
};

struct walk {
        struct headers_row *rows;
        size_t n_rows, row; /* rows[row] is being read */
        char *out; /* rows[row]'s pairs go to out + rows[row].at */
        size_t base, depth; /* a row's depth; containers open around the reader */
        struct row_walk cur;
        int err; /* -ENOMEM from a callback */
};

static void row_start(struct walk *w) {
        w->cur.kind = KIND_NONE;
        w->cur.n = 0;
        w->cur.reserved = -1;
        w->cur.name_at = 0;
        w->cur.bad[0] = 0;
}

/* One NUL-terminated string of a pair, if the row is still usable and there is room: the pairs
 * are never longer than the text they come from (headers.h), so "no room" means the text was
 * not what yajl read. */
static void put(struct walk *w, const unsigned char *s, size_t len) {
        const struct headers_row *r = &w->rows[w->row];

        if (w->cur.bad[0])
                return;
        if (w->cur.n + len + 1 > r->len) {
                snprintf(w->cur.bad, sizeof(w->cur.bad),
                         "headers could not be read as JSON: longer than their text");
                return;
        }
        memcpy(w->out + r->at + w->cur.n, s, len);
        w->out[r->at + w->cur.n + len] = 0;
        w->cur.n += len + 1;
}

/* A member's value: a string is the pair's value; anything else makes the row unusable, and
 * the first such member is the one its reason names. */
static void member_value(struct walk *w, enum kind kind, const unsigned char *s, size_t len) {
        /* a long name is cut short, so that the reason still says what is wrong with it */
        char quoted[HEADERS_REASON_MAX - 64];

        if (w->cur.bad[0])
                return;
        if (kind == KIND_STRING && !memchr(s, 0, len)) {
                put(w, s, len);
                return;
        }
        /* its name was written (or the row would be unusable already) */
        headers_quote_literal(w->out + w->rows[w->row].at + w->cur.name_at, quoted, sizeof(quoted));
        if (kind != KIND_STRING)
                snprintf(w->cur.bad, sizeof(w->cur.bad), "header %s must have a string value (got %s)",
                         quoted, kind_names[kind]);
        else /* jsonb refuses \u0000, so only text from elsewhere has one; a Kafka header could
              * carry it, but the pairs end their strings with NUL. */
                snprintf(w->cur.bad, sizeof(w->cur.bad),
                         "header %s has a NUL character (\\u0000) in its value", quoted);
}

/* The row's value has been read: its verdict is kept (a refused row has no pairs and a copy of
 * its reason), and the next row starts after its pairs. 0 stops the reader (-ENOMEM). */
static int row_end(struct walk *w) {
        struct headers_row *r = &w->rows[w->row];
        char reason[HEADERS_REASON_MAX];
        const char *why = NULL;

        if (w->cur.kind != KIND_OBJECT && w->cur.kind != KIND_NULL) {
                snprintf(reason, sizeof(reason), "headers must be a JSON object (got %s)",
                         kind_names[w->cur.kind]);
                why = reason;
        } else if (w->cur.reserved >= 0) {
                snprintf(reason, sizeof(reason), "header '%s' is reserved for the relay",
                         reserved[w->cur.reserved]);
                why = reason;
        } else if (w->cur.bad[0]) {
                why = w->cur.bad;
        }
        r->out_len = why ? 0 : w->cur.n;
        if (why && !(r->error = strdup(why))) {
                w->err = -ENOMEM;
                return 0;
        }
        if (++w->row < w->n_rows)
                w->rows[w->row].at = r->at + r->out_len;
        row_start(w);
        return 1;
}

/* A value that is not a container: a row's whole value, or a member's. 0 stops the reader: a
 * value where a group's array should be, or more values than the group has rows. */
static int scalar(void *ctx, enum kind kind, const unsigned char *s, size_t len) {
        struct walk *w = ctx;

        if (w->depth < w->base || (w->depth == w->base && w->row >= w->n_rows))
                return 0;
        if (w->depth == w->base) {
                w->cur.kind = kind;
                return row_end(w);
        }
        if (w->depth == w->base + 1 && w->cur.kind == KIND_OBJECT)
                member_value(w, kind, s, len);
        return 1;
}

static int on_null(void *ctx) {
        return scalar(ctx, KIND_NULL, NULL, 0);
}

static int on_boolean(void *ctx, int b) {
        (void)b;
        return scalar(ctx, KIND_BOOLEAN, NULL, 0);
}

/* Numbers come as their text, never converted: 1e400 is a number like any other. */
static int on_number(void *ctx, const char *s, size_t len) {
        (void)s;
        (void)len;
        return scalar(ctx, KIND_NUMBER, NULL, 0);
}

static int on_string(void *ctx, const unsigned char *s, size_t len) {
        return scalar(ctx, KIND_STRING, s, len);
}

static int open_container(void *ctx, enum kind kind) {
        struct walk *w = ctx;

        if (w->depth < w->base) {
                if (kind != KIND_ARRAY) /* a group is an array */
                        return 0;
        } else if (w->depth == w->base) {
                if (w->row >= w->n_rows)
                        return 0;
                w->cur.kind = kind;
        } else if (w->depth == w->base + 1 && w->cur.kind == KIND_OBJECT) {
                member_value(w, kind, NULL, 0);
        }
        w->depth++;
        return 1;
}

static int close_container(void *ctx) {
        struct walk *w = ctx;

        if (--w->depth == w->base)
                return row_end(w);
        return 1;
}

static int on_start_map(void *ctx) {
        return open_container(ctx, KIND_OBJECT);
}

static int on_start_array(void *ctx) {
        return open_container(ctx, KIND_ARRAY);
}

/* A member's name: written as the pair's name, and looked up among the relay's own. */
static int on_map_key(void *ctx, const unsigned char *s, size_t len) {
        struct walk *w = ctx;

        if (w->depth != w->base + 1)
                return 1;
        for (size_t i = 0; i < N_RESERVED; i++)
                if (strlen(reserved[i]) == len && memcmp(reserved[i], s, len) == 0 &&
                    (w->cur.reserved < 0 || (size_t)w->cur.reserved > i))
                        w->cur.reserved = (int)i;
        if (w->cur.bad[0])
                return 1;
        if (memchr(s, 0, len)) {
                snprintf(w->cur.bad, sizeof(w->cur.bad),
                         "header names may not have a NUL character (\\u0000)");
                return 1;
        }
        w->cur.name_at = w->cur.n;
        put(w, s, len);
        return 1;
}

static const yajl_callbacks callbacks = {
        .yajl_null = on_null,
        .yajl_boolean = on_boolean,
        .yajl_number = on_number,
        .yajl_string = on_string,
        .yajl_start_map = on_start_map,
        .yajl_map_key = on_map_key,
        .yajl_end_map = close_container,
        .yajl_start_array = on_start_array,
        .yajl_end_array = close_container,
};

/* Reads `text` into the rows of `w`. Returns 0 when it was read through and gave every row its
 * verdict, 1 when it could not be (then `why` says what the reader saw), -ENOMEM. Rows read
 * before a failure keep their verdicts: the caller frees them. */
static int read_text(struct walk *w, const char *text, size_t len, char *why, size_t whysz) {
        yajl_handle h = yajl_alloc(&callbacks, NULL, w);
        yajl_status st;
        int ret = 0;

        if (!h)
                return -ENOMEM;
        st = yajl_parse(h, (const unsigned char *)text, len);
        if (st == yajl_status_ok)
                st = yajl_complete_parse(h);
        if (w->err) {
                ret = w->err;
        } else if (st != yajl_status_ok || w->row != w->n_rows) {
                unsigned char *e = st == yajl_status_error ? yajl_get_error(h, 0, NULL, 0) : NULL;
                size_t elen = e ? strcspn((const char *)e, "\n") : 0;

                snprintf(why, whysz, "%.*s", (int)elen, e ? (const char *)e : "not one value a row");
                if (e)
                        yajl_free_error(h, e);
                ret = 1;
        }
        yajl_free(h);
        return ret;
}

int headers_expand(const char *json, size_t len, char *out, size_t *out_len, char *reason, size_t reasonsz) {
        struct headers_row row = { .json = json, .len = len };
        struct walk w = { .rows = &row, .n_rows = 1, .out = out };
        char why[HEADERS_REASON_MAX];
        int ret;

        *out_len = 0;
        if (reasonsz)
                reason[0] = 0;
        if (!json)
                return 0;
        row_start(&w);
        ret = read_text(&w, json, len, why, sizeof(why));
        if (ret == 1)
                snprintf(reason, reasonsz, "headers could not be read as JSON: %s", why);
        else if (ret == 0 && row.error)
                snprintf(reason, reasonsz, "%s", row.error);
        else if (ret == 0)
                *out_len = row.out_len;
        ret = ret == 0 && row.error ? 1 : ret;
        free(row.error);
        return ret;
}

/* Rows read as one document: yajl's set-up (a handle, its lexer and buffers) is made once for
 * them, and their errors are few enough to redo when one row's text is not one JSON value. */
#define HEADERS_GROUP 32

/* The rows' texts as one array, in a buffer kept for the thread (it only grows, so a batch
 * allocates it once), or NULL (-ENOMEM). */
static char *join(const struct headers_row *rows, size_t n, size_t *doc_len) {
        static _Thread_local char *kept;
        static _Thread_local size_t room;
        size_t len = 3, at = 0;
        char *doc;

        for (size_t i = 0; i < n; i++)
                len += (rows[i].json ? rows[i].len : 4) + 1;
        if (len > room) {
                doc = realloc(kept, len);
                if (!doc)
                        return NULL;
                kept = doc;
                room = len;
        }
        doc = kept;
        doc[at++] = '[';
        for (size_t i = 0; i < n; i++) {
                if (i)
                        doc[at++] = ',';
                if (rows[i].json) {
                        memcpy(doc + at, rows[i].json, rows[i].len);
                        at += rows[i].len;
                } else {
                        memcpy(doc + at, "null", 4);
                        at += 4;
                }
        }
        doc[at++] = ']';
        doc[at] = 0;
        *doc_len = at;
        return doc;
}

/* Every row on its own: what headers_expand() says of it. */
static int expand_each(struct headers_row *rows, size_t n, char *out, size_t at) {
        for (size_t i = 0; i < n; i++) {
                char reason[HEADERS_REASON_MAX];
                int ret;

                rows[i].at = at;
                ret = headers_expand(rows[i].json, rows[i].len, out + at, &rows[i].out_len, reason,
                                     sizeof(reason));
                if (ret < 0)
                        return ret;
                if (ret == 1 && !(rows[i].error = strdup(reason)))
                        return -ENOMEM;
                at += rows[i].out_len;
        }
        return 0;
}

/* headers_expand_rows() of at most HEADERS_GROUP rows, their pairs from out + at on. */
static int expand_group(struct headers_row *rows, size_t n, char *out, size_t at) {
        struct walk w = { .rows = rows, .n_rows = n, .out = out, .base = 1 };
        size_t doc_len = 0;
        char why[HEADERS_REASON_MAX], *doc = join(rows, n, &doc_len);
        int ret = doc ? 0 : 1;

        rows[0].at = at;
        row_start(&w);
        if (doc)
                ret = read_text(&w, doc, doc_len, why, sizeof(why));
        if (ret == 0)
                return 0;
        for (size_t i = 0; i < n; i++) {
                free(rows[i].error);
                rows[i].error = NULL;
                rows[i].at = rows[i].out_len = 0;
        }
        return ret < 0 ? ret : expand_each(rows, n, out, at);
}

int headers_expand_rows(struct headers_row *rows, size_t n, char *out) {
        size_t at = 0;

        for (size_t i = 0; i < n; i++) {
                rows[i].at = rows[i].out_len = 0;
                rows[i].error = NULL;
        }
        for (size_t i = 0; i < n; i += HEADERS_GROUP) {
                size_t k = n - i < HEADERS_GROUP ? n - i : HEADERS_GROUP;
                int ret = expand_group(rows + i, k, out, at);

                if (ret < 0)
                        return ret;
                at = rows[i + k - 1].at + rows[i + k - 1].out_len;
        }
        return 0;
}
