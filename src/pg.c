/* pg.c -- The relay's PostgreSQL connection: connect with a deadline, LISTEN, claim and finish batches. */
#include "pg.h"

#include "floor.h"
#include "message.h"
#include "pooler.h"
#include "schema.h"
#include "share.h"

#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

/* The claim: pending rows in id order, locked, with everything the message needs in the same
 * round trip. Results come in binary so bytea arrives raw (no hex decoding in C). Headers come
 * as they are stored (a jsonb arrives as its JSON text) and are checked and expanded in C
 * (headers.c): expanding and checking them here made the claim take about twice as long
 * (8.9 ms against 4.3 ms per 1000 rows). This is the form for the common case, nothing paused:
 * one walk of outbox_pending_idx in id order. created_at arrives as milliseconds since the
 * epoch, NULL when it is infinity or -infinity: no number stands for either, and the cast of one
 * failed every claim that reached the row, so nothing after it went out (cycle.c dead-letters
 * such a row instead). (bench/run.sh reads this constant; claim_skip_tmpl reuses its column list,
 * up to " FROM".) */
static const char claim_fmt[] =
        "SELECT o.id, o.topic, o.key, o.payload,"
        " CASE WHEN isfinite(o.created_at) THEN floor(extract(epoch FROM o.created_at) * 1000)::int8 END,"
        " o.attempts, o.headers,"
        " o.ctid"
        " FROM %s o"
        " WHERE o.published_at IS NULL AND o.dead_at IS NULL AND o.id >= $2::int8"
        " ORDER BY o.id LIMIT $1"
        " FOR UPDATE SKIP LOCKED";

/* The claim while topics ($2) or (topic, key) pairs ($3[i], $4[i]) are paused. Filtering them out
 * of the id-order walk would read their whole backlog on every claim (it sits at the head of the
 * index and only grows), so this form never reads a paused row it can avoid (docs/claim.md):
 *
 * - topics: distinct pending topics, one descent of outbox_pending_topic_idx each (a skip scan,
 *   which btree in PostgreSQL 15 does not do by itself); per topic neither paused nor holding
 *   paused keys, its first $5 rows in id order.
 * - a topic with paused keys: first its head, up to w rows in id order, paused keys dropped. If
 *   that walk came to the end of the topic or found $5 claimable rows, that is all; otherwise the
 *   head is the paused keys' backlog, and the topic's pending keys are stepped through one descent
 *   of outbox_pending_key_idx each, taking the first rows of every key not paused (together $5)
 *   and of the NULL key. w is 4 x $5, or 8 rows per paused key of the topic when that is more:
 *   a row walked costs a fifteenth to a twentieth of a key step, so the walk costs at most about
 *   half of what stepping would: a short backlog is walked, a long one stepped over.
 *
 * Each source is a prefix in id order of its topic's or its key's claimable rows, so the first $1
 * of their union by id never take a row of a (topic, key) past an earlier claimable one. Only the
 * final rows are locked, with SKIP LOCKED (FOR UPDATE is not allowed with UNION, DISTINCT or
 * aggregates, and inside the candidates it would lock rows that are not returned); the array is
 * computed once (an InitPlan: no rescans). $5, the depth, is $1, or more when other relays' locks
 * may hide the first candidates.
 *
 * The plans are pinned on purpose, each source to one index (sql/004_claim_skip.sql): "topic = t
 * ORDER BY id" let the planner walk outbox_pending_idx and filter, the very scan this form avoids.
 * So a topic's rows are asked for as "topic >= t AND topic <= t ORDER BY topic, id" in COLLATE "C",
 * which only outbox_pending_topic_idx can answer in order, and a key's as "ORDER BY key, id" with
 * the topic in the column's own collation, which only outbox_pending_key_idx can; pg_claim turns
 * bitmap scans off for the transaction, as a bitmap scan would read a whole topic to sort it.
 * {table} is the table, {columns} the column list of claim_fmt. */
static const char claim_skip_tmpl[] =
        "WITH RECURSIVE"
        " topics(topic) AS ("
        "  (SELECT o.topic COLLATE \"C\" FROM {table} o WHERE o.published_at IS NULL AND o.dead_at IS NULL"
        "    ORDER BY o.topic COLLATE \"C\" LIMIT 1)"
        "  UNION ALL"
        "  SELECT (SELECT o.topic COLLATE \"C\" FROM {table} o"
        "           WHERE o.published_at IS NULL AND o.dead_at IS NULL"
        "           AND o.topic COLLATE \"C\" > t.topic ORDER BY o.topic COLLATE \"C\" LIMIT 1)"
        "    FROM topics t WHERE t.topic IS NOT NULL),"
        " key_topics(topic, w) AS ("
        "  SELECT u.topic, greatest(4 * $5::int8, 8 * count(*)) FROM unnest($3::text[]) u(topic)"
        "   WHERE u.topic <> ALL($2::text[]) GROUP BY u.topic),"
        " walk(topic, id, key) AS MATERIALIZED ("
        "  SELECT kt.topic, w.id, w.key FROM key_topics kt CROSS JOIN LATERAL"
        "   (SELECT o.id, o.key FROM {table} o WHERE o.published_at IS NULL AND o.dead_at IS NULL"
        "     AND o.topic COLLATE \"C\" >= kt.topic AND o.topic COLLATE \"C\" <= kt.topic"
        "     ORDER BY o.topic COLLATE \"C\", o.id LIMIT kt.w) w),"
        " walk_free(topic, id) AS MATERIALIZED ("
        "  SELECT w.topic, w.id FROM walk w WHERE w.key IS NULL OR NOT EXISTS"
        "   (SELECT 1 FROM unnest($3::text[], $4::text[]) s(t, k) WHERE s.t = w.topic AND s.k = w.key)),"
        " key_steps(topic) AS ("
        "  SELECT kt.topic FROM key_topics kt"
        "   WHERE (SELECT count(*) FROM walk w WHERE w.topic = kt.topic) = kt.w"
        "     AND (SELECT count(*) FROM walk_free f WHERE f.topic = kt.topic) < $5::int8),"
        " keys(topic, key, id) AS ("
        "  SELECT ks.topic, f.key, f.id FROM key_steps ks CROSS JOIN LATERAL"
        "   (SELECT o.key COLLATE \"C\", o.id FROM {table} o"
        "     WHERE o.published_at IS NULL AND o.dead_at IS NULL AND o.topic = ks.topic"
        "     AND o.key IS NOT NULL ORDER BY o.key COLLATE \"C\", o.id LIMIT 1) f"
        "  UNION ALL"
        "  SELECT k.topic, f.key, f.id FROM keys k CROSS JOIN LATERAL"
        "   (SELECT o.key COLLATE \"C\", o.id FROM {table} o"
        "     WHERE o.published_at IS NULL AND o.dead_at IS NULL AND o.topic = k.topic"
        "     AND o.key COLLATE \"C\" > k.key ORDER BY o.key COLLATE \"C\", o.id LIMIT 1) f),"
        " free_keys(topic, key, id, n) AS ("
        "  SELECT k.topic, k.key, k.id, ceil($5::float8 / count(*) OVER (PARTITION BY k.topic))::int8"
        "    FROM keys k WHERE NOT EXISTS"
        "   (SELECT 1 FROM unnest($3::text[], $4::text[]) s(t, k) WHERE s.t = k.topic AND s.k = k.key)),"
        " cand(id) AS ("
        "  SELECT c.id FROM topics t CROSS JOIN LATERAL"
        "   (SELECT o.id FROM {table} o WHERE o.published_at IS NULL AND o.dead_at IS NULL"
        "     AND o.topic COLLATE \"C\" >= t.topic AND o.topic COLLATE \"C\" <= t.topic"
        "     ORDER BY o.topic COLLATE \"C\", o.id LIMIT $5::int8) c"
        "   WHERE t.topic IS NOT NULL AND t.topic <> ALL($2::text[])"
        "     AND NOT EXISTS (SELECT 1 FROM key_topics kt WHERE kt.topic = t.topic)"
        "  UNION ALL"
        "  SELECT f.id FROM walk_free f"
        "  UNION ALL"
        "  SELECT k.id FROM free_keys k"
        "  UNION ALL"
        "  SELECT c.id FROM free_keys k CROSS JOIN LATERAL"
        "   (SELECT o.id FROM {table} o WHERE o.published_at IS NULL AND o.dead_at IS NULL"
        "     AND o.topic = k.topic AND o.key COLLATE \"C\" >= k.key AND o.key COLLATE \"C\" <= k.key"
        "     AND o.id > k.id ORDER BY o.key COLLATE \"C\", o.id LIMIT k.n - 1) c"
        "   WHERE k.n > 1"
        "  UNION ALL"
        "  SELECT c.id FROM key_steps ks CROSS JOIN LATERAL"
        "   (SELECT o.id FROM {table} o WHERE o.published_at IS NULL AND o.dead_at IS NULL"
        "     AND o.topic = ks.topic AND o.key IS NULL ORDER BY o.key COLLATE \"C\", o.id LIMIT $5::int8) c)"
        " {columns} FROM {table} o"
        " WHERE o.id = ANY(ARRAY(SELECT c.id FROM cand c ORDER BY c.id LIMIT $5::int8))"
        "   AND o.published_at IS NULL AND o.dead_at IS NULL"
        " ORDER BY o.id LIMIT $1"
        " FOR UPDATE SKIP LOCKED";

/* The finish names its rows by where they are (ctid), not by id: a TID scan goes straight to
 * each row where an id list took one descent of the primary key per row. Sound because the
 * batch holds every one of them locked (FOR UPDATE) since the claim: nobody else can update or
 * delete them, so each stays where the claim found it until this transaction ends. */
static const char delete_fmt[] = "DELETE FROM %s WHERE ctid = ANY($1::tid[])";
static const char mark_fmt[] =
        "UPDATE %s SET published_at = now(), last_error = NULL WHERE ctid = ANY($1::tid[])";
static const char fail_fmt[] = "UPDATE %s SET attempts = attempts + $2::int4, last_error = $3,"
                               " dead_at = CASE WHEN $4::bool THEN now() END WHERE ctid = ANY($1::tid[])";
/* Retention: the ids first, as an array computed once (an InitPlan), then the rows by id. The
 * form "id IN (SELECT id ... LIMIT $2)" admits a nested-loop semi join whose inner side, the
 * LIMIT walk, runs again for every row of the table: quadratic in the table's size, and the
 * planner takes it when its estimates make that look cheap. An UPDATE of that form in the test
 * suite (test_relay mark_retention) ran for 110 s and more on a CPU with 23,000 rows in the
 * table; for this DELETE the same plan would hold the relay's loop, which runs retention. */
static const char retention_fmt[] =
        "DELETE FROM %s WHERE id = ANY(ARRAY(SELECT id FROM %s WHERE published_at < now() - $1::interval"
        " LIMIT $2))";
/* The lock key: a constant class id for "outbox-relay" and the table's oid. */
static const char leader_fmt[] = "SELECT pg_try_advisory_lock(hashtext('outbox-relay'),"
                                 " (('%s'::regclass)::oid::int8 & 2147483647)::int4)";
/* The lag (age of the oldest pending row), the pending rows counted up to PG_PENDING_EXACT, and
 * the span of ids from the oldest pending row to the newest pending row: a bounded look (at most
 * that many index entries and two descents of outbox_pending_idx) however long the backlog. */
#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)
static const char lag_tmpl[] =
        "SELECT coalesce(CASE WHEN isfinite(min(s.created_at))"
        "  THEN floor(extract(epoch FROM now() - min(s.created_at)) * 1000000) END, 0)::int8,"
        " (SELECT count(*) FROM (SELECT 1 FROM {table} WHERE published_at IS NULL AND dead_at IS NULL"
        "   AND id >= $1::int8 LIMIT " STRINGIFY(
                PG_PENDING_EXACT) ") c)::int8,"
                                  " coalesce((SELECT id FROM {table} WHERE published_at IS NULL AND dead_at "
                                  "IS NULL"
                                  "   ORDER BY id DESC LIMIT 1) - min(s.id) + 1, 0)::int8"
                                  " FROM (SELECT created_at, id FROM {table} WHERE published_at IS NULL AND "
                                  "dead_at IS NULL"
                                  " AND id >= $1::int8 ORDER BY id LIMIT 1) s";
/* The claim floor (floor.h), one step, in this order: the transactions of the open step ended
 * ($1, virtual ids); the lowest pending id from the floor ($1) on; the id sequence's last value
 * ($1, its oid); the transactions running now, but this one. Separate statements, so each reads
 * after the one before (one snapshot per statement). */
/* The list is an array of text: first "since <statement_timestamp>", then the virtual ids of the
 * transactions running, then "prepared <xid>" for the prepared ones (two-phase commit), which
 * have left their sessions. A listed transaction that has PREPAREd since shows up as prepared
 * after the "since" time. Transactions of other databases are left out (they cannot insert into
 * this table), and autovacuum's (which never insert, and vacuum a big outbox for minutes: the
 * floor would stand still exactly while the dead entries pile up); a backend we cannot place
 * stays in. */
static const char floor_ended_sql[] =
        "WITH l(v) AS (SELECT unnest($1::text[]))"
        " SELECT NOT EXISTS (SELECT 1 FROM pg_locks k"
        "   WHERE k.locktype = 'virtualxid' AND k.virtualxid IN (SELECT v FROM l))"
        "  AND NOT EXISTS (SELECT 1 FROM pg_prepared_xacts p WHERE p.database = current_database()"
        "   AND ('prepared ' || p.transaction IN (SELECT v FROM l)"
        "    OR p.prepared >= (SELECT substr(v, 7)::timestamptz FROM l WHERE v LIKE 'since %')))";
static const char floor_lowest_fmt[] = "SELECT min(id) FROM %s"
                                       " WHERE published_at IS NULL AND dead_at IS NULL AND id >= $1::int8";
static const char floor_running_sql[] =
        "SELECT (ARRAY['since ' || statement_timestamp()::text] || coalesce(array_agg(t.v), '{}'))::text "
        "FROM ("
        "  SELECT k.virtualxid FROM pg_locks k"
        "   WHERE k.locktype = 'virtualxid' AND k.granted AND k.pid <> pg_backend_pid()"
        "    AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = k.pid"
        "     AND ((a.datid IS NOT NULL AND a.datname <> current_database()) OR a.backend_type = 'autovacuum "
        "worker'))"
        "  UNION ALL SELECT 'prepared ' || p.transaction FROM pg_prepared_xacts p"
        "   WHERE p.database = current_database()) t(v)";
/* The id column's sequence: oid, what floor_unusable() asks, its last value (0 before the first),
 * its relfilenode. $1: the table, quoted. */
static const char floor_seq_sql[] =
        "SELECT s.seqrelid::int8, s.seqcache, s.seqincrement, s.seqmin, s.seqcycle, s.ok,"
        " CASE WHEN s.ok THEN coalesce(pg_sequence_last_value(s.seqrelid), 0) END,"
        " pg_relation_filenode(s.seqrelid)::int8"
        " FROM (SELECT q.*, has_sequence_privilege(q.seqrelid, 'SELECT')"
        "   OR has_sequence_privilege(q.seqrelid, 'USAGE') AS ok FROM pg_sequence q"
        "  WHERE q.seqrelid = pg_get_serial_sequence($1, 'id')::regclass) s";
static const char floor_below_fmt[] = "SELECT EXISTS (SELECT 1 FROM %s"
                                      " WHERE published_at IS NULL AND dead_at IS NULL AND id < $1::int8)";

/* Quotes a possibly schema-qualified name ("s.t") part by part. */
static char *quote_qualified(const char *name) {
        char buf[256];
        const char *dot = strchr(name, '.');
        size_t n = 0;

        buf[0] = 0;
        for (const char *part = name; part;) {
                size_t len = dot ? (size_t)(dot - part) : strlen(part);
                char tmp[128];
                int w;

                if (len >= sizeof(tmp))
                        return NULL;
                memcpy(tmp, part, len);
                tmp[len] = 0;
                /* Same rule as PQescapeIdentifier, without needing a connection. */
                w = snprintf(buf + n, sizeof(buf) - n, "%s\"", n ? "." : "");
                n += (size_t)w;
                for (size_t i = 0; i < len && n + 3 < sizeof(buf); i++) {
                        if (tmp[i] == '"')
                                buf[n++] = '"';
                        buf[n++] = tmp[i];
                }
                if (n + 2 >= sizeof(buf))
                        return NULL;
                buf[n++] = '"';
                buf[n] = 0;
                part = dot ? dot + 1 : NULL;
                dot = part ? strchr(part, '.') : NULL;
        }
        return strdup(buf);
}

/* tmpl with every "{table}" replaced by table and every "{columns}" by columns. */
static char *sql_expand(const char *tmpl, const char *table, const char *columns) {
        size_t cap = strlen(tmpl) + 1, len = 0;
        char *out;

        for (const char *c = tmpl; (c = strchr(c, '{')); c++)
                cap += strlen(table) + strlen(columns);
        out = malloc(cap);
        if (!out)
                return NULL;
        for (const char *c = tmpl; *c;) {
                if (strncmp(c, "{table}", 7) == 0) {
                        len += (size_t)sprintf(out + len, "%s", table);
                        c += 7;
                } else if (strncmp(c, "{columns}", 9) == 0) {
                        len += (size_t)sprintf(out + len, "%s", columns);
                        c += 9;
                } else {
                        out[len++] = *c++;
                }
        }
        out[len] = 0;
        return out;
}

static char *sql_printf(const char *fmt, const char *a, const char *b) _printf_(1, 0);
static char *sql_printf(const char *fmt, const char *a, const char *b) {
        char *s = NULL;

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        if (asprintf(&s, fmt, a, b) < 0)
                return NULL;
#pragma GCC diagnostic pop
        return s;
}

/* ordering = "key": a row is claimable only with its bucket's transaction-scoped advisory lock
 * (released by commit, rollback or the session's end: no leases, nothing to clean up). The
 * bucket of a row with a key is a hash of (topic, key) that every relay computes alike, in the
 * server; a row without a key carries no order and takes the bucket of its id.
 *
 * The locks are taken before any row, each bucket once: the claim tries the buckets one by one,
 * starting at the bucket share.c gives and going round, each tried once, until it got as many
 * as share.c says (a share of them, or every one with rows in view when those fit in one
 * batch); then one walk in id order over at most `depth` pending rows takes the rows of the
 * buckets it got (a 256-bit mask, one bit test per row). A lock tried row by row in the walk's
 * filter is not enough: the holder can commit in the middle of the walk, so the bucket is
 * refused at a key's earlier rows and granted at a later one, which then goes first (seen with
 * three relays). Tried once, a bucket refused gives none of its rows. Taking a share leaves the
 * other buckets to the other relays: with 50 hot keys one batch holds rows of every key, and
 * taking every bucket it touches would leave the others nothing (docs/ordering.md).
 *
 * The statement's snapshot is older than the locks: rows that the bucket's last holder finished
 * after it are still pending in it. FOR UPDATE (READ COMMITTED) finds the newer version, checks
 * the row again and leaves it out when it was marked or deleted. `depth` bounds the walk: a share
 * whose buckets hold no pending row never reads the whole backlog.
 *
 * Since every row comes with its bucket's lock, no other relay can hold a row lock on it, and
 * the rows are locked with a plain FOR UPDATE, not SKIP LOCKED: a row locked by something else
 * (a program holding outbox rows) is waited for (statement_timeout bounds it) instead of
 * skipped, which could let a later row of its key go first. */
#define BUCKET_EXPR                                                \
        "((CASE WHEN o.key IS NULL THEN hashint8extended(o.id, 0)" \
        " ELSE hashtextextended(o.topic || E'\\x1f' || o.key, 0) END) & 255)::int4"
/* While something is paused (claim_skip_ordered_tail): the head's candidates are few and
 * scattered, so the claim counts them per bucket instead of taking a share blind. The head's
 * buckets in the order this relay tries them (from bucket `first` round), with their rows in the
 * head; then one lock try per bucket, in that order, while the rows covered are fewer than $1.
 * `first` and `cls` name the parameters. */
#define ORDERED_PICK(first, cls)                                                                         \
        " cnt(bs, ns) AS MATERIALIZED ("                                                                 \
        "  SELECT array_agg(g.b ORDER BY (g.b - " first ") & 255), array_agg(g.n ORDER BY (g.b - " first \
        ") & 255)"                                                                                       \
        "    FROM (SELECT h.b, count(*)::int4 FROM head h GROUP BY h.b) g(b, n)),"                       \
        " pick(i, got, b, ok) AS ("                                                                      \
        "  SELECT 0, 0, NULL::int4, false"                                                               \
        "  UNION ALL"                                                                                    \
        "  SELECT p.i + 1, p.got + CASE WHEN l.ok THEN c.ns[p.i + 1] ELSE 0 END, c.bs[p.i + 1], l.ok"    \
        "    FROM pick p CROSS JOIN cnt c CROSS JOIN LATERAL"                                            \
        "     (SELECT pg_try_advisory_xact_lock(" cls ", c.bs[p.i + 1])) l(ok)"                          \
        "   WHERE p.i < cardinality(c.bs) AND p.got < $1::int4),"                                        \
        " mine(b) AS MATERIALIZED (SELECT p.b FROM pick p WHERE p.ok)"
/* The rows, and with each how many pending rows the claim looked at (share_next_wait). */
#define ORDERED_ROWS                                                                            \
        " {columns}, (SELECT count(*) FROM head)::int8 FROM {table} o"                          \
        " WHERE o.id = ANY(ARRAY(SELECT h.id FROM head h WHERE h.b IN (SELECT m.b FROM mine m)" \
        "  ORDER BY h.id LIMIT $1))"                                                            \
        "   AND o.published_at IS NULL AND o.dead_at IS NULL"                                   \
        " ORDER BY o.id LIMIT $1 FOR UPDATE"
/* Nothing paused: $2 first bucket, $3 depth, $4 lock class, $5 floor, $6 buckets to take. The
 * head is the first $1 + 1 pending rows, counted from the index: how many there are (the rows in
 * view: at most a batch is a trickle, share_next_wait needs no more), the last one's id, and the
 * first one's (returned, it may raise the floor: floor_claimed). The walk ends there for a
 * trickle, else $3 - $1 - 1 ids further: ids are unique, so it reads at most $3 pending rows, and
 * a share whose buckets hold no pending row never reads the whole backlog. (Counting all $3 rows
 * cost as much as the rest of the head and walk did over the others' rows: docs/ordering.md, "A
 * head of one batch".) The buckets: a bit mask of
 * those the claim got, tried from $2 round until it got $6 of them. When the rows in view fit
 * in one batch (a nearly drained table, a trickle) it tries every bucket those rows are in, and
 * no other: a bucket without a row in view stays free for the others, and a relay frozen in the
 * middle of its batch holds up only keys it had rows of. */
static const char claim_ordered_tmpl[] =
        "WITH head(n, first, last) AS MATERIALIZED ("
        "  SELECT count(*), min(h.id), CASE WHEN count(*) <= $1::int8 THEN max(h.id)"
        "   ELSE max(h.id) + least($3::int8 - $1::int8 - 1, 9223372036854775807 - greatest(max(h.id), 0)) END"
        "  FROM (SELECT o.id FROM {table} o"
        "   WHERE o.published_at IS NULL AND o.dead_at IS NULL AND o.id >= $5::int8"
        "   ORDER BY o.id LIMIT $1::int8 + 1) h),"
        " want(w) AS MATERIALIZED ("
        "  SELECT CASE WHEN (SELECT n FROM head) <= $1::int8 THEN"
        "   (SELECT bit_or(set_bit(0::bit(256), " BUCKET_EXPR ", 1)) FROM {table} o"
        "     WHERE o.published_at IS NULL AND o.dead_at IS NULL AND o.id >= $5::int8"
        "       AND o.id <= (SELECT last FROM head))"
        "   ELSE ~0::bit(256) END),"
        " mine(m) AS MATERIALIZED ("
        "  SELECT bit_or(set_bit(0::bit(256), t.b, 1)) FROM"
        "   (SELECT (($2::int4 + g) & 255) FROM generate_series(0, 255) g"
        "     WHERE CASE WHEN get_bit((SELECT w FROM want), ($2::int4 + g) & 255) = 1"
        "      THEN pg_try_advisory_xact_lock($4::int4, ($2::int4 + g) & 255) ELSE false END"
        "     LIMIT CASE WHEN (SELECT n FROM head) <= $1::int8 THEN 256 ELSE $6::int4 END) t(b))"
        " {columns}, (SELECT n FROM head)::int8, (SELECT first FROM head)::int8 FROM {table} o"
        " WHERE o.published_at IS NULL AND o.dead_at IS NULL AND o.id >= $5::int8"
        "   AND o.id <= (SELECT last FROM head)"
        "   AND get_bit((SELECT m FROM mine), " BUCKET_EXPR ") = 1"
        " ORDER BY o.id LIMIT $1 FOR UPDATE";
/* Nothing paused, and no other relay's pipeline on the table (or ordering = "single", the one
 * publisher): the first $1 pending rows in id order from $2, as the unordered claim takes them but
 * waiting for a row something else holds rather than skipping it (see above), and no lock beside
 * the rows': no other relay shares the table. So the claim takes every pending row of its range,
 * and the next one can start right after it while this batch is in flight (overlap.h). A relay
 * whose view of the others is stale (one just started) only waits for their rows until its next
 * look, a second later: every claim takes its rows in id order without skipping any that another
 * sharing relay could hold, so order holds, and no claim holds a row lock while waiting for
 * another, so nothing waits in a cycle. At 10,000 keys the bucket locks (even without the ring
 * walk's counting) made the claim of a relay alone 0.68-0.78 of the unordered one's rate in most
 * drains (docs/ordering.md). Seven columns (no count): the rows in view are the rows it got.
 * {table} is the table, {columns} the column list of claim_fmt. */
static const char claim_alone_tmpl[] =
        "{columns} FROM {table} o WHERE o.published_at IS NULL AND o.dead_at IS NULL"
        " AND o.id >= $2::int8 ORDER BY o.id LIMIT $1 FOR UPDATE";
/* Something paused: claim_skip_tmpl's candidates (already WITH RECURSIVE), then $6 first
 * bucket, $7 lock class. */
static const char claim_skip_ordered_tail[] =
        ", head(id, b) AS MATERIALIZED ("
        "  SELECT o.id, " BUCKET_EXPR " FROM {table} o"
        "   WHERE o.id = ANY(ARRAY(SELECT c.id FROM cand c ORDER BY c.id LIMIT $5::int8))"
        "   AND o.published_at IS NULL AND o.dead_at IS NULL)," ORDERED_PICK("$6::int4", "$7::int4")
                ORDERED_ROWS;

static int order_claims(struct pg *pg, const char *table, const char *cols) {
        const char *final = strstr(claim_skip_tmpl, " {columns} FROM {table} o");
        _cleanup_free_ char *skip_tmpl = NULL;
        char *a, *b;

        if (!final ||
            asprintf(&skip_tmpl, "%.*s%s", (int)(final - claim_skip_tmpl), claim_skip_tmpl,
                     claim_skip_ordered_tail) < 0)
                return -ENOMEM;
        a = sql_expand(claim_ordered_tmpl, table, cols);
        b = sql_expand(skip_tmpl, table, cols);
        if (!a || !b) {
                free(a);
                free(b);
                return -ENOMEM;
        }
        free(pg->sql_claim);
        free(pg->sql_claim_skip);
        pg->sql_claim = a;
        pg->sql_claim_skip = b;
        return 0;
}

int pg_init(struct pg *pg, const struct relay_config *cfg) {
        _cleanup_free_ char *table = NULL, *channel = NULL;

        memset(pg, 0, sizeof(*pg));
        pg->cfg = cfg;
        table = quote_qualified(cfg->postgres.table);
        channel = quote_qualified(cfg->postgres.channel);
        if (!table || !channel)
                return -EINVAL;
        pg->table = strdup(table);
        pg->sql_claim = sql_printf(claim_fmt, table, NULL);
        {
                /* claim_skip_tmpl selects what claim_fmt selects: its column list, %% unescaped. */
                const char *from = strstr(claim_fmt, " FROM %s o");
                _cleanup_free_ char *cols_fmt = from ? strndup(claim_fmt, (size_t)(from - claim_fmt)) : NULL;
/* cols_fmt is a prefix of claim_fmt, a literal (clang checks the call, gcc does not) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
                _cleanup_free_ char *cols = cols_fmt ? sql_printf(cols_fmt, NULL, NULL) : NULL;
#pragma GCC diagnostic pop

                pg->sql_claim_skip = cols ? sql_expand(claim_skip_tmpl, table, cols) : NULL;
                if (pg->sql_claim_skip && cfg->relay.ordering == ORDERING_KEY &&
                    order_claims(pg, table, cols) < 0) {
                        pg_done(pg);
                        return -ENOMEM;
                }
                /* ordering = "key" alone, and "single": rows in id order, none skipped. */
                if (cols && cfg->relay.ordering != ORDERING_NONE &&
                    !(pg->sql_claim_alone = sql_expand(claim_alone_tmpl, table, cols))) {
                        pg_done(pg);
                        return -ENOMEM;
                }
        }
        pg->sql_delete = sql_printf(delete_fmt, table, NULL);
        pg->sql_mark = sql_printf(mark_fmt, table, NULL);
        pg->sql_fail = sql_printf(fail_fmt, table, NULL);
        pg->sql_retention = sql_printf(retention_fmt, table, table);
        pg->sql_lag = sql_expand(lag_tmpl, table, "");
        pg->sql_floor_lowest = sql_printf(floor_lowest_fmt, table, NULL);
        pg->sql_floor_below = sql_printf(floor_below_fmt, table, NULL);
        pg->sql_listen = sql_printf("LISTEN %s", channel, NULL);
        {
                /* The quoted name goes inside a string literal: double its single quotes. */
                char lit[600];
                size_t n = 0;

                for (const char *c = table; *c && n + 2 < sizeof(lit); c++) {
                        if (*c == '\'')
                                lit[n++] = '\'';
                        lit[n++] = *c;
                }
                lit[n] = 0;
                pg->sql_leader = sql_printf(leader_fmt, lit, NULL);
        }
        if (!pg->sql_claim || !pg->sql_claim_skip || !pg->sql_delete || !pg->sql_mark || !pg->sql_fail ||
            !pg->sql_retention || !pg->sql_lag || !pg->sql_floor_lowest || !pg->sql_floor_below ||
            !pg->sql_listen || !pg->sql_leader || !pg->table) {
                pg_done(pg);
                return -ENOMEM;
        }
        pg->member_slot = -1;
        return 0;
}

void pg_done(struct pg *pg) {
        pg_disconnect(pg);
        free(pg->sql_claim);
        free(pg->sql_claim_skip);
        free(pg->sql_claim_alone);
        free(pg->sql_delete);
        free(pg->sql_mark);
        free(pg->sql_fail);
        free(pg->sql_retention);
        free(pg->sql_lag);
        free(pg->sql_floor_lowest);
        free(pg->sql_floor_below);
        free(pg->table);
        free(pg->sql_listen);
        free(pg->sql_leader);
        memset(pg, 0, sizeof(*pg));
}

void pg_disconnect(struct pg *pg) {
        if (pg->conn)
                PQfinish(pg->conn);
        pg->conn = NULL;
        pg->op = PG_OP_NONE;
        PQclear(pg->op_keep);
        pg->op_keep = NULL;
        pg->in_tx = false;
        pg->member_slot = -1; /* a session lock ends with its session */
}

bool pg_connected(const struct pg *pg) {
        return pg->conn && PQstatus(pg->conn) == CONNECTION_OK && PQsocket(pg->conn) >= 0;
}

int pg_socket(const struct pg *pg) {
        return pg->conn ? PQsocket(pg->conn) : -1;
}

/* libpq's messages end in a newline and may span lines; keep the first line. */
static void set_err(char *err, size_t errsz, const char *what, const char *msg) {
        size_t n;

        if (!err || !errsz)
                return;
        snprintf(err, errsz, "%s%s%s", what, msg && *msg ? ": " : "", msg ? msg : "");
        n = strcspn(err, "\n");
        err[n] = 0;
}

/* libpq's message for the connection, or `fallback` when libpq has none to give. */
static void conn_err(struct pg *pg, char *err, size_t errsz, const char *what, const char *fallback) {
        const char *msg = pg->conn ? PQerrorMessage(pg->conn) : NULL;

        set_err(err, errsz, what, msg && *msg ? msg : fallback);
}

/* Waits until the socket is ready for `events` or the deadline passes. */
static int wait_socket(struct pg *pg, short events, usec_t deadline) {
        for (;;) {
                usec_t now = now_usec();
                struct pollfd p = { .fd = PQsocket(pg->conn), .events = events };
                int r;

                if (p.fd < 0)
                        return -ECONNRESET;
                if (now >= deadline)
                        return -ETIMEDOUT;
                if (pg->tick)
                        pg->tick(pg->tick_arg);
                if (pg->cancel && *pg->cancel)
                        return -ECANCELED; /* a second stop signal: give up at once */
                r = poll(&p, 1, deadline - now > USEC_PER_SEC ? 1000 : (int)((deadline - now + 999) / 1000));
                if (r > 0)
                        return 0;
                if (r < 0 && errno != EINTR)
                        return -errno;
        }
}

/* Pushes the output buffer out (non-blocking mode). */
static int flush_out(struct pg *pg, usec_t deadline) {
        for (;;) {
                int r = PQflush(pg->conn);

                if (r == 0)
                        return 0;
                if (r < 0)
                        return -ECONNRESET;
                r = wait_socket(pg, POLLOUT | POLLIN, deadline);
                if (r < 0)
                        return r;
                if (!PQconsumeInput(pg->conn))
                        return -ECONNRESET;
        }
}

/* Next result, waiting for it until the deadline. NULL with *rp set on failure. */
static PGresult *next_result(struct pg *pg, usec_t deadline, int *rp) {
        *rp = 0;
        while (PQisBusy(pg->conn)) {
                int r = wait_socket(pg, POLLIN, deadline);

                if (r < 0) {
                        *rp = r;
                        return NULL;
                }
                if (!PQconsumeInput(pg->conn)) {
                        *rp = -ECONNRESET;
                        return NULL;
                }
        }
        return PQgetResult(pg->conn);
}

/* Maps a failed result or connection to -errno, says why in err, and drops the connection. */
static int fail_conn(struct pg *pg, int r, char *err, size_t errsz, const char *what) {
        if (r == -ETIMEDOUT)
                set_err(err, errsz, what, "deadline passed, dropping the connection");
        else if (r == -ECANCELED)
                set_err(err, errsz, what, "cancelled by a second stop signal");
        else if (r == -EPROTO)
                set_err(err, errsz, what, "unexpected reply from the server, dropping the connection");
        else
                conn_err(pg, err, errsz, what, r < 0 && r != -ECONNRESET ? strerror(-r) : "connection lost");
        /* After a timeout or a broken stream the protocol state is unknown: start afresh. The
         * server rolls back whatever the connection had open. */
        pg_disconnect(pg);
        return r == -ETIMEDOUT ? r : -ECONNRESET;
}

/* The server's message for a failed result (never empty). */
static void result_err(const PGresult *res, char *err, size_t errsz, const char *what) {
        const char *msg = PQresultErrorMessage(res);

        set_err(err, errsz, what, msg && *msg ? msg : PQresStatus(PQresultStatus(res)));
}

/* A failure in `step` whose SQLSTATE proves the server session shared (pooler.h): notes it and
 * says so after the server's message. */
static void note_pooler(struct pg *pg, enum pooler_step step, const char *state, char *err, size_t errsz) {
        size_t n;

        if (!pooler_sign(step, state))
                return;
        pg->session_shared = true;
        n = strlen(err);
        if (n < errsz)
                snprintf(err + n, errsz - n, "; %s", pooler_hint);
}

/* A prepared statement whose result type the table no longer gives ("cached plan must not
 * change result type", after an ALTER TABLE) fails until it is prepared again: note it, and the
 * next claim does so. */
static void note_stale_plan(struct pg *pg, const PGresult *res) {
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

        if (state && strcmp(state, "0A000") == 0)
                pg->reprepare = true;
}

/* The early return of a call made while there is no connection. */
static int not_connected(char *err, size_t errsz, const char *what) {
        set_err(err, errsz, what, "not connected to PostgreSQL");
        return -ECONNRESET;
}

/* Collects the (single) result of a statement sent outside pipeline mode (`sent` is what the
 * send call returned). */
static int exec_sent(struct pg *pg, int sent, usec_t deadline, PGresult **out, char *err, size_t errsz,
                     const char *what) {
        PGresult *res = NULL, *extra;
        ExecStatusType st;
        int r;

        *out = NULL;
        pg->err_state[0] = 0;
        if (!sent)
                return fail_conn(pg, -ECONNRESET, err, errsz, what);
        r = flush_out(pg, deadline);
        if (r < 0)
                return fail_conn(pg, r, err, errsz, what);
        res = next_result(pg, deadline, &r);
        if (!res)
                return fail_conn(pg, r ? r : -ECONNRESET, err, errsz, what);
        while ((extra = next_result(pg, deadline, &r)))
                PQclear(extra);
        if (r < 0) {
                PQclear(res);
                return fail_conn(pg, r, err, errsz, what);
        }
        st = PQresultStatus(res);
        if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
                const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

                result_err(res, err, errsz, what);
                snprintf(pg->err_state, sizeof(pg->err_state), "%s", state ? state : "");
                PQclear(res);
                if (PQstatus(pg->conn) != CONNECTION_OK) {
                        pg_disconnect(pg);
                        return -ECONNRESET;
                }
                return -EIO;
        }
        *out = res;
        return 0;
}

/* Runs one statement outside pipeline mode and returns its (single) result. */
static int exec_one(struct pg *pg, const char *sql, int nparams, const char *const *values, int result_format,
                    usec_t deadline, PGresult **out, char *err, size_t errsz, const char *what) {
        return exec_sent(pg,
                         PQsendQueryParams(pg->conn, sql, nparams, NULL, values, NULL, NULL, result_format),
                         deadline, out, err, errsz, what);
}

static int exec_simple(struct pg *pg, const char *sql, usec_t deadline, char *err, size_t errsz,
                       const char *what) {
        PGresult *res;
        int r = exec_one(pg, sql, 0, NULL, 0, deadline, &res, err, errsz, what);

        PQclear(res);
        return r;
}

/* The statements of every batch, prepared once per connection: parsing and planning the
 * ordered claim took about 1 ms of a 7 ms claim (server log, 500 rows). */
static const char stmt_claim[] = "outbox_relay_claim", stmt_claim_skip[] = "outbox_relay_claim_skip",
                  stmt_claim_alone[] = "outbox_relay_claim_alone", stmt_delete[] = "outbox_relay_delete",
                  stmt_mark[] = "outbox_relay_mark", stmt_fail[] = "outbox_relay_fail";

static int prepare_all(struct pg *pg, usec_t deadline, char *err, size_t errsz) {
        const struct {
                const char *name, *sql, *what;
        } stmts[] = {
                { stmt_claim, pg->sql_claim, "preparing the claim" },
                { stmt_claim_skip, pg->sql_claim_skip, "preparing the claim of what is not paused" },
                { stmt_claim_alone, pg->sql_claim_alone, "preparing the claim of a relay alone" },
                /* both: relay.finish may change on reload */
                { stmt_delete, pg->sql_delete, "preparing the finish (delete)" },
                { stmt_mark, pg->sql_mark, "preparing the finish (mark)" },
                { stmt_fail, pg->sql_fail, "preparing the failure record" },
        };

        if (pg->reprepare) {
                int r = exec_simple(pg, "DEALLOCATE ALL", deadline, err, errsz, "DEALLOCATE");

                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < ELEMENTSOF(stmts); i++) {
                PGresult *res;
                int r;

                if (!stmts[i].sql)
                        continue; /* not needed in this mode */
                r = exec_sent(pg, PQsendPrepare(pg->conn, stmts[i].name, stmts[i].sql, 0, NULL), deadline,
                              &res, err, errsz, stmts[i].what);

                PQclear(res);
                if (r == -EIO)
                        note_pooler(pg, POOLER_PREPARE, pg->err_state, err, errsz);
                /* A failure part way (a lock timeout behind a migration) leaves `reprepare` set: the
                 * next claim starts over with DEALLOCATE ALL instead of running statements that
                 * are gone (which would also read as a pooler's 26000). */
                if (r < 0)
                        return r;
        }
        pg->reprepare = false;
        return 0;
}

static void notice_sink(void *arg, const char *message) {
        (void)arg;
        (void)message; /* server notices (e.g. the FATAL before a termination) are not ours to log */
}

/* Reads the id column's sequence (floor_seq_sql). Sets pg->id_seq, or 0 and pg->floor_off saying
 * why the floor cannot be used; *last and *node for a look. A failed statement is returned. */
static int read_id_sequence(struct pg *pg, int64_t *last, int64_t *node, usec_t deadline, char *err,
                            size_t errsz) {
        const char *params[1] = { pg->table };
        struct floor_sequence fs = { 0 };
        const char *why;
        PGresult *res;
        int r;

        r = exec_one(pg, floor_seq_sql, 1, params, 0, deadline, &res, err, errsz, "the id sequence");
        if (r < 0)
                return r;
        fs.exists = PQntuples(res) == 1;
        if (fs.exists) {
                fs.cache = strtol(PQgetvalue(res, 0, 1), NULL, 10);
                fs.increment = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
                fs.min = strtoll(PQgetvalue(res, 0, 3), NULL, 10);
                fs.cycle = strcmp(PQgetvalue(res, 0, 4), "t") == 0;
                fs.readable = strcmp(PQgetvalue(res, 0, 5), "t") == 0;
                *last = strtoll(PQgetvalue(res, 0, 6), NULL, 10);
                *node = strtoll(PQgetvalue(res, 0, 7), NULL, 10);
        }
        why = floor_unusable(&fs);
        snprintf(pg->floor_off, sizeof(pg->floor_off), "%s", why ? why : "");
        pg->id_seq = why ? 0 : (uint32_t)strtoul(PQgetvalue(res, 0, 0), NULL, 10);
        PQclear(res);
        return 0;
}

/* What the table has, against what sql/ creates (schema_check): a table that lacks a migration
 * would fail on its first claim with a message that names a column or an index, not the file to
 * apply. One catalog query, on the listening connection only. */
static int check_schema(struct pg *pg, usec_t deadline, char *err, size_t errsz) {
        const struct relay_config *cfg = pg->cfg;
        const char *params[1] = { pg->table };
        struct schema_facts f;
        struct schema_verdict v;
        PGresult *res;
        int r;

        r = exec_one(
                pg,
                "SELECT c.oid IS NOT NULL,"
                " (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), E'\\n')"
                "    FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),"
                " (SELECT string_agg(regexp_replace(pg_get_indexdef(i.indexrelid), '^.*? USING ', ''), "
                "E'\\n')"
                "    FROM pg_index i WHERE i.indrelid = c.oid AND i.indisvalid),"
                " EXISTS (SELECT 1 FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid"
                "    WHERE t.tgrelid = c.oid AND p.proname = 'outbox_notify' AND t.tgenabled <> 'D'),"
                " to_regprocedure('outbox_enqueue(text,text,bytea,jsonb)') IS NOT NULL,"
                " to_regprocedure('outbox_requeue(bigint[])') IS NOT NULL,"
                " quote_ident(current_database()), quote_ident(n.nspname), quote_ident(r.relname)"
                " FROM (SELECT to_regclass($1)::oid AS oid) c"
                " LEFT JOIN pg_class r ON r.oid = c.oid LEFT JOIN pg_namespace n ON n.oid = r.relnamespace",
                1, params, 0, deadline, &res, err, errsz, "the table's schema");
        if (r < 0)
                return r;
        f = (struct schema_facts){
                .table = PQgetvalue(res, 0, 0)[0] == 't',
                .columns = PQgetvalue(res, 0, 1),
                .indexes = PQgetvalue(res, 0, 2),
                .notify_trigger = PQgetvalue(res, 0, 3)[0] == 't',
                .enqueue = PQgetvalue(res, 0, 4)[0] == 't',
                .requeue = PQgetvalue(res, 0, 5)[0] == 't',
        };
        r = schema_check(&f, cfg->relay.finish == FINISH_MARK && cfg->relay.retention, &v);
        if (r >= 0 &&
            message_source(cfg->relay.source, PQgetvalue(res, 0, 6), PQgetvalue(res, 0, 7),
                           PQgetvalue(res, 0, 8), pg->source, sizeof(pg->source)) < 0) {
                snprintf(err, errsz,
                         "the outbox-source header of table '%s' cannot be derived: %s; set relay.source",
                         cfg->postgres.table, pg->source);
                pg->source[0] = 0;
                PQclear(res);
                return -ENOPKG;
        }
        PQclear(res);
        if (r < 0) {
                snprintf(err, errsz,
                         "table '%s' lacks what sql/%s creates: %s; apply it (outbox-relay --print-sql | "
                         "psql)",
                         cfg->postgres.table, v.missing, v.what);
                return r;
        }
        snprintf(pg->schema_notes, sizeof(pg->schema_notes), "%s", v.notes);
        return 0;
}

int pg_connect(struct pg *pg, usec_t deadline, char *err, size_t errsz) {
        const struct relay_config *cfg = pg->cfg;
        char idle[32], ktimeout[32], stmt[32], itx[32];
        char set_sql[640];
        /* Our settings first, the user's conninfo last: what the user wrote wins. */
        const char *keys[] = { "keepalives",
                               "keepalives_idle",
                               "keepalives_interval",
                               "keepalives_count",
                               "tcp_user_timeout",
                               "fallback_application_name",
                               "dbname",
                               NULL };
        const char *vals[] = { "1", idle, "5", "3", ktimeout, "outbox-relay", cfg->postgres.conninfo, NULL };
        int r;

        pg_disconnect(pg);
        snprintf(idle, sizeof(idle), "%llu",
                 (unsigned long long)(cfg->postgres.keepalives_idle > USEC_PER_SEC
                                              ? cfg->postgres.keepalives_idle / USEC_PER_SEC
                                              : 1));
        snprintf(ktimeout, sizeof(ktimeout), "%llu",
                 (unsigned long long)(cfg->postgres.tcp_user_timeout / USEC_PER_MSEC));
        pg->conn = PQconnectStartParams(keys, vals, 1);
        if (!pg->conn) {
                set_err(err, errsz, "connecting", "out of memory");
                return -ENOMEM;
        }
        if (PQstatus(pg->conn) == CONNECTION_BAD) {
                conn_err(pg, err, errsz, "connecting", "connection refused");
                pg_disconnect(pg);
                return -ECONNREFUSED;
        }
        /* libpq ignores connect_timeout in PQconnectPoll(): the deadline is ours to keep. */
        for (PostgresPollingStatusType st = PGRES_POLLING_WRITING;;) {
                if (st == PGRES_POLLING_OK)
                        break;
                if (st == PGRES_POLLING_FAILED) {
                        conn_err(pg, err, errsz, "connecting", "connection failed");
                        pg_disconnect(pg);
                        return -ECONNREFUSED;
                }
                r = wait_socket(pg, st == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline);
                if (r < 0) {
                        set_err(err, errsz, "connecting",
                                r == -ETIMEDOUT ? "no connection within the connect timeout" : strerror(-r));
                        pg_disconnect(pg);
                        return r == -ETIMEDOUT ? r : -ECONNREFUSED;
                }
                st = PQconnectPoll(pg->conn);
        }
        PQsetNoticeProcessor(pg->conn, notice_sink, NULL);
        if (PQsetnonblocking(pg->conn, 1) != 0) {
                conn_err(pg, err, errsz, "connecting", "cannot switch to non-blocking mode");
                pg_disconnect(pg);
                return -ECONNREFUSED;
        }
        /* Session settings are re-applied on every (re)connect, so they survive reconnects. The
         * idle-in-transaction backstop must outlast a whole batch, publish included. */
        snprintf(stmt, sizeof(stmt), "%llu",
                 (unsigned long long)(cfg->postgres.statement_timeout / USEC_PER_MSEC));
        snprintf(itx, sizeof(itx), "%llu",
                 (unsigned long long)((cfg->relay.batch_timeout * 2) / USEC_PER_MSEC));
        /* The server side of the connection gets keepalives and a user timeout too: a relay
         * cut off by the network must not keep its backend, and with it the leader lock and
         * row locks, for the kernel's two hours. JIT is off: the claim while something is
         * paused has estimated costs past jit_above_cost, and compiling it took 0.6-1 s where
         * running it takes 5-30 ms (docs/claim.md); nothing the relay runs gains from JIT.
         * Prepared statements keep one generic plan: the batch's statements have one good plan
         * whatever their parameters, and planning the ordered claim anew took 0.7 ms of its
         * 4.8 (EXPLAIN ANALYZE, 500 rows: the same plan, planned in 0.06 ms). The claim while
         * something is paused is planned for its values (below). */
        snprintf(set_sql, sizeof(set_sql),
                 "SELECT set_config('statement_timeout', '%s', false),"
                 " set_config('idle_in_transaction_session_timeout', '%s', false),"
                 " set_config('jit', 'off', false),"
                 " set_config('client_encoding', 'UTF8', false),"
                 " set_config('plan_cache_mode', 'force_generic_plan', false),"
                 " set_config('tcp_keepalives_idle', '%s', false),"
                 " set_config('tcp_keepalives_interval', '5', false),"
                 " set_config('tcp_keepalives_count', '3', false),"
                 " set_config('tcp_user_timeout', '%s', false),"
                 " set_config('lock_timeout', '%llu', false)",
                 stmt, itx, idle, ktimeout, (unsigned long long)(pg->lock_timeout / USEC_PER_MSEC));
        r = exec_simple(pg, set_sql, deadline, err, errsz, "setting session timeouts");
        if (r < 0) {
                pg_disconnect(pg);
                return r == -EIO ? -ECONNREFUSED : r;
        }
        r = pg->no_listen ? 0 : check_schema(pg, deadline, err, errsz);
        if (r == -ENOPKG) {
                pg_disconnect(pg);
                return r;
        }
        if (r >= 0)
                r = pg->no_listen ? 0 : exec_simple(pg, pg->sql_listen, deadline, err, errsz, "LISTEN");
        if (r < 0) {
                pg_disconnect(pg);
                return r == -EIO ? -ECONNREFUSED : r;
        }
        if (cfg->relay.ordering == ORDERING_KEY) {
                /* The lock classes of this table: from its oid, so two tables never share them. */
                const char *params[1] = { pg->table };
                PGresult *res;

                r = exec_one(pg,
                             "SELECT hashtext('outbox-relay/bucket ' || c.oid::text),"
                             " hashtext('outbox-relay/member ' || c.oid::text),"
                             " hashtext('outbox-relay/relay ' || c.oid::text)"
                             " FROM (SELECT $1::text::regclass::oid AS oid) c",
                             1, params, 0, deadline, &res, err, errsz, "lock classes");
                if (r < 0) {
                        pg_disconnect(pg);
                        return r == -EIO ? -ECONNREFUSED : r;
                }
                pg->bucket_class = (int32_t)strtol(PQgetvalue(res, 0, 0), NULL, 10);
                pg->member_class = (int32_t)strtol(PQgetvalue(res, 0, 1), NULL, 10);
                pg->relay_class = (int32_t)strtol(PQgetvalue(res, 0, 2), NULL, 10);
                PQclear(res);
        }
        {
                /* A table whose sequence cannot be read is claimed from the start: no floor. */
                char why[sizeof(pg->floor_off)];
                int64_t last = 0, node = 0;

                r = read_id_sequence(pg, &last, &node, deadline, why, sizeof(why));
                if (r == -EIO) {
                        pg->id_seq = 0;
                        snprintf(pg->floor_off, sizeof(pg->floor_off), "%s", why);
                } else if (r < 0) {
                        set_err(err, errsz, "the id sequence", why);
                        pg_disconnect(pg);
                        return r;
                }
        }
        r = prepare_all(pg, deadline, err, errsz);
        if (r < 0) {
                pg_disconnect(pg);
                return r == -EIO ? -ECONNREFUSED : r;
        }
        return 0;
}

int pg_join(struct pg *pg, bool relay, usec_t deadline, char *err, size_t errsz) {
        char cls[16];
        const char *params[1] = { cls };
        PGresult *res;
        int r;

        if (!pg_connected(pg))
                return not_connected(err, errsz, "member slot");
        snprintf(cls, sizeof(cls), "%d", relay ? pg->relay_class : pg->member_class);
        /* The function scan hands the filter one slot at a time: LIMIT 1 stops at the first lock. */
        r = exec_one(
                pg,
                "SELECT s FROM generate_series(0, 1023) s WHERE pg_try_advisory_lock($1::int4, s) LIMIT 1", 1,
                params, 0, deadline, &res, err, errsz, "member slot");
        if (r < 0)
                return r;
        if (PQntuples(res) != 1) {
                PQclear(res);
                set_err(err, errsz, "member slot", "all 1024 member slots of the table are taken");
                return -EBUSY;
        }
        pg->member_slot = (int)strtol(PQgetvalue(res, 0, 0), NULL, 10);
        PQclear(res);
        return 0;
}

int pg_members(struct pg *pg, int *slots, int *pids, size_t cap, size_t *n, unsigned *relays, usec_t deadline,
               char *err, size_t errsz) {
        char cls[16], rcls[16];
        const char *params[2] = { cls, rcls };
        PGresult *res;
        int r;

        *n = 0;
        *relays = 0;
        if (!pg_connected(pg))
                return not_connected(err, errsz, "members");
        snprintf(cls, sizeof(cls), "%d", pg->member_class);
        snprintf(rcls, sizeof(rcls), "%d", pg->relay_class);
        r = exec_one(pg,
                     "SELECT l.classid = ($1::int4)::oid, l.objid::int8, l.pid"
                     " FROM pg_locks l WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted"
                     "  AND l.classid IN (($1::int4)::oid, ($2::int4)::oid)"
                     "  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                     2, params, 0, deadline, &res, err, errsz, "members");
        if (r < 0)
                return r;
        for (int i = 0; i < PQntuples(res); i++) {
                if (strcmp(PQgetvalue(res, i, 0), "t") != 0) {
                        (*relays)++;
                        continue;
                }
                if (*n >= cap)
                        continue;
                slots[*n] = (int)strtol(PQgetvalue(res, i, 1), NULL, 10);
                pids[*n] = (int)strtol(PQgetvalue(res, i, 2), NULL, 10);
                (*n)++;
        }
        PQclear(res);
        return 0;
}

int pg_backend_pid(const struct pg *pg) {
        return pg->conn ? PQbackendPID(pg->conn) : 0;
}

int pg_consume_notifies(struct pg *pg) {
        if (!pg->conn)
                return -ECONNRESET;
        if (!PQconsumeInput(pg->conn) || !pg_connected(pg))
                return -ECONNRESET;
        return pg_take_notifies(pg);
}

int pg_take_notifies(struct pg *pg) {
        PGnotify *n;
        int count = 0;

        if (!pg->conn)
                return -ECONNRESET;
        while ((n = PQnotifies(pg->conn))) {
                count++;
                if (n->extra && strcmp(n->extra, "requeue") == 0)
                        pg->requeued = true;
                PQfreemem(n);
        }
        return count;
}

static int64_t be64(const char *p) {
        uint64_t v;

        memcpy(&v, p, sizeof(v));
        return (int64_t)be64toh(v);
}

static int32_t be32(const char *p) {
        uint32_t v;

        memcpy(&v, p, sizeof(v));
        return (int32_t)be32toh(v);
}

static int batch_parse(struct pg_batch *b) {
        PGresult *res = b->res;
        int n = PQntuples(res);

        /* The ordered claim adds a ninth column: the pending rows it looked at; with nothing
         * paused a tenth, the lowest of them. */
        if (PQnfields(res) < 8 || PQnfields(res) > 10)
                return -EPROTO;
        b->n = (size_t)n;
        b->in_view = (size_t)n;
        if (n == 0)
                return 0;
        if (PQnfields(res) >= 9) {
                if (PQgetlength(res, 0, 8) != 8)
                        return -EPROTO;
                b->in_view = (size_t)be64(PQgetvalue(res, 0, 8));
        }
        if (PQnfields(res) == 10) {
                if (PQgetlength(res, 0, 9) != 8)
                        return -EPROTO;
                b->first_pending = be64(PQgetvalue(res, 0, 9));
        }
        b->rows = calloc((size_t)n, sizeof(*b->rows));
        if (!b->rows)
                return -ENOMEM;
        for (int i = 0; i < n; i++) {
                struct pg_row *row = &b->rows[i];

                /* created_at arrives NULL when it is infinite (claim_fmt) */
                if (PQgetlength(res, i, 0) != 8 || (!PQgetisnull(res, i, 4) && PQgetlength(res, i, 4) != 8) ||
                    PQgetlength(res, i, 5) != 4 || PQgetlength(res, i, 7) != 6)
                        return -EPROTO;
                row->id = be64(PQgetvalue(res, i, 0));
                /* tid's binary form: the block (4 bytes) and the offset in it (2), big-endian */
                row->tid = (pg_tid)(uint32_t)be32(PQgetvalue(res, i, 7)) << 16 |
                        (pg_tid)(((unsigned char)PQgetvalue(res, i, 7)[4] << 8) |
                                 (unsigned char)PQgetvalue(res, i, 7)[5]);
                row->topic = PQgetvalue(res, i, 1);
                if (!PQgetisnull(res, i, 2)) {
                        row->key = PQgetvalue(res, i, 2);
                        row->key_len = (size_t)PQgetlength(res, i, 2);
                }
                if (!PQgetisnull(res, i, 3)) {
                        row->payload = PQgetvalue(res, i, 3);
                        row->payload_len = (size_t)PQgetlength(res, i, 3);
                }
                row->timestamp_known = !PQgetisnull(res, i, 4);
                row->timestamp_ms = row->timestamp_known ? be64(PQgetvalue(res, i, 4)) : 0;
                row->attempts = be32(PQgetvalue(res, i, 5));
                if (!PQgetisnull(res, i, 6)) {
                        /* jsonb's binary form: a version byte (1), then the JSON text. */
                        if (PQgetlength(res, i, 6) < 1 || PQgetvalue(res, i, 6)[0] != 1)
                                return -EPROTO;
                        row->headers = PQgetvalue(res, i, 6) + 1;
                        row->headers_len = (size_t)PQgetlength(res, i, 6) - 1;
                }
        }
        return 0;
}

void pg_batch_clear(struct pg_batch *b) {
        PQclear(b->res);
        free(b->rows);
        memset(b, 0, sizeof(*b));
}

/* Statements sent in pipeline mode whose results are read as they come (pg_poll): a claim (BEGIN,
 * the settings, the claim) or a finish (DELETE or UPDATE, the failures, COMMIT), then the sync.
 * Each statement's result is followed by a NULL; the first failure is the one kept (the results
 * after it only say the pipeline was aborted). */
static int op_begin(struct pg *pg, enum pg_op op, int statements, int keep, struct pg_batch *b,
                    usec_t deadline) {
        int r;

        pg->op = op;
        pg->op_n = statements;
        pg->op_pos = 0;
        pg->op_err = 0;
        pg->op_msg[0] = 0;
        pg->op_keep_at = keep;
        pg->op_keep = NULL;
        pg->op_batch = b;
        pg->op_deadline = deadline;
        r = PQflush(pg->conn);
        if (r < 0) {
                pg->op = PG_OP_NONE;
                return -ECONNRESET;
        }
        pg->op_flush = r == 1;
        return 0;
}

/* One statement's result, at its place in the pipeline. */
static void op_result(struct pg *pg, int i, PGresult *res) {
        ExecStatusType st = PQresultStatus(res);
        bool ok = pg->op == PG_OP_CLAIM ? st == (i == 0 ? PGRES_COMMAND_OK : PGRES_TUPLES_OK)
                                        : st == PGRES_COMMAND_OK;
        const char *what = pg->op == PG_OP_CLAIM ? (i == 0 ? "BEGIN" : "claim") : "finish";

        if (pg->op_err == 0 && !ok) {
                const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

                result_err(res, pg->op_msg, sizeof(pg->op_msg), what);
                note_stale_plan(pg, res);
                note_pooler(pg, POOLER_EXECUTE, state, pg->op_msg, sizeof(pg->op_msg));
                /* lock_not_available: the claim's bound on lock waits ran out. */
                pg->op_err = state && strcmp(state, "55P03") == 0 ? -EAGAIN : -EIO;
        } else if (pg->op_err == 0 && pg->op == PG_OP_FINISH && i == pg->op_n - 1 &&
                   strcmp(PQcmdStatus(res), "COMMIT") != 0) {
                set_err(pg->op_msg, sizeof(pg->op_msg), "finish", "COMMIT turned into ROLLBACK");
                pg->op_err = -EIO;
        }
        if (i == pg->op_keep_at && pg->op_err == 0)
                pg->op_keep = res;
        else
                PQclear(res);
}

/* Reads what has come without waiting. 1: every result is in, 0: not yet, or -errno for the
 * connection (-ECONNRESET, -ETIMEDOUT, -EPROTO, -ECANCELED). */
static int op_step(struct pg *pg) {
        if (pg->op_flush) {
                int r = PQflush(pg->conn);

                if (r < 0)
                        return -ECONNRESET;
                pg->op_flush = r == 1;
        }
        if (pg->cancel && *pg->cancel)
                return -ECANCELED;
        if (!PQconsumeInput(pg->conn))
                return -ECONNRESET;
        while (!PQisBusy(pg->conn)) {
                PGresult *res = PQgetResult(pg->conn);
                int pos = pg->op_pos++;

                if (pos == 2 * pg->op_n) {
                        bool sync = res && PQresultStatus(res) == PGRES_PIPELINE_SYNC;

                        PQclear(res);
                        if (!sync || !PQexitPipelineMode(pg->conn))
                                return -EPROTO;
                        return 1;
                }
                if (pos % 2 == 1) {
                        if (res) {
                                PQclear(res);
                                return -EPROTO;
                        }
                        continue;
                }
                if (!res)
                        return -EPROTO;
                op_result(pg, pos / 2, res);
        }
        if (now_usec() >= pg->op_deadline)
                return -ETIMEDOUT;
        return 0;
}

static int claim_done(struct pg *pg, usec_t deadline, char *err, size_t errsz);
static int finish_done(struct pg *pg, usec_t deadline, char *err, size_t errsz);

int pg_poll(struct pg *pg, char *err, size_t errsz) {
        enum pg_op op = pg->op;
        int r;

        if (!op)
                return 0;
        if (!pg->conn) {
                pg->op = PG_OP_NONE;
                return not_connected(err, errsz, op == PG_OP_CLAIM ? "claim" : "finish");
        }
        r = op_step(pg);
        if (r == 0)
                return -EINPROGRESS;
        pg->op = PG_OP_NONE;
        if (r < 0) {
                PQclear(pg->op_keep);
                pg->op_keep = NULL;
                if (op == PG_OP_CLAIM)
                        pg_batch_clear(pg->op_batch);
                return fail_conn(pg, r, err, errsz, op == PG_OP_CLAIM ? "claim" : "finish");
        }
        /* The transaction's end (a rollback after a failure, the COMMIT of an empty claim) is
         * short: it keeps the batch deadline. */
        return op == PG_OP_CLAIM ? claim_done(pg, pg->op_deadline, err, errsz)
                                 : finish_done(pg, pg->op_deadline, err, errsz);
}

short pg_poll_events(const struct pg *pg) {
        return pg->op ? (short)(POLLIN | (pg->op_flush ? POLLOUT : 0)) : 0;
}

/* The blocking form of an operation just started: waits for it (serving pg->tick). */
static int op_wait(struct pg *pg, char *err, size_t errsz) {
        for (;;) {
                int r = pg_poll(pg, err, errsz);

                if (r != -EINPROGRESS)
                        return r;
                r = wait_socket(pg, pg_poll_events(pg), pg->op_deadline);
                if (r < 0 && r != -ETIMEDOUT) {
                        enum pg_op op = pg->op;

                        pg->op = PG_OP_NONE;
                        PQclear(pg->op_keep);
                        pg->op_keep = NULL;
                        if (op == PG_OP_CLAIM)
                                pg_batch_clear(pg->op_batch);
                        return fail_conn(pg, r, err, errsz, op == PG_OP_CLAIM ? "claim" : "finish");
                }
        }
}

/* A text[] literal ({"a","b\"c"}) of n strings; the caller frees it. NULL without memory. */
static char *text_array(const char *const *v, size_t n) {
        size_t cap = 3, len = 0;
        char *out;

        for (size_t i = 0; i < n; i++)
                cap += 2 * strlen(v[i]) + 3;
        out = malloc(cap);
        if (!out)
                return NULL;
        out[len++] = '{';
        for (size_t i = 0; i < n; i++) {
                if (i)
                        out[len++] = ',';
                out[len++] = '"';
                for (const char *c = v[i]; *c; c++) {
                        if (*c == '"' || *c == '\\')
                                out[len++] = '\\';
                        out[len++] = *c;
                }
                out[len++] = '"';
        }
        out[len++] = '}';
        out[len] = 0;
        return out;
}

/* True when any of the n strings is NULL (a literal cannot say "no such topic"). */
static bool any_null(const char *const *v, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (!v[i])
                        return true;
        return false;
}

/* Without a floor, from the lowest id there is (ids written by hand may be 0 or below). */
static int64_t claim_floor(const struct pg *pg) {
        return pg->claim_floor > 0 ? pg->claim_floor : INT64_MIN;
}

int pg_claim_start(struct pg *pg, int limit, const struct pg_skip *skip, const struct pg_order *order,
                   struct pg_batch *b, usec_t deadline, char *err, size_t errsz) {
        char lim[16], depth[16], first[16], cls[16], floor[24];
        _cleanup_free_ char *topics = NULL, *key_topics = NULL, *keys = NULL;
        char buckets[16];
        const char *params[8] = { lim };
        const char *sql, *stmt;
        bool ordered = pg->cfg->relay.ordering == ORDERING_KEY;
        struct pg_order all = { .depth = limit };
        int nparams = 1;
        int r;

        memset(b, 0, sizeof(*b));
        if (!pg_connected(pg))
                return not_connected(err, errsz, "claim");
        if (pg->op) {
                set_err(err, errsz, "claim", "a statement is still in progress on the connection");
                return -EBUSY;
        }
        if (pg->reprepare && !pg->in_tx) {
                r = prepare_all(pg, deadline, err, errsz);
                if (r < 0)
                        return r;
        }
        if (!order)
                order = &all;
        snprintf(lim, sizeof(lim), "%d", limit);
        snprintf(first, sizeof(first), "%u", order->first % SHARE_BUCKETS);
        snprintf(cls, sizeof(cls), "%d", pg->bucket_class);
        snprintf(floor, sizeof(floor), "%lld",
                 (long long)(order->start > 0 ? order->start : claim_floor(pg)));
        sql = pg->sql_claim;
        stmt = stmt_claim;
        /* $2 where to start */
        params[1] = floor;
        nparams = 2;
        if (pg->cfg->relay.ordering == ORDERING_SINGLE || (ordered && order->alone)) {
                /* the same two parameters, rows in id order without skipping any */
                stmt = stmt_claim_alone;
        } else if (ordered) {
                /* $2 first bucket, $3 depth, $4 lock class, $5 floor, $6 buckets to take */
                /* at least a batch + 1: the head tells a backlog from a trickle */
                snprintf(depth, sizeof(depth), "%d", order->depth > limit ? order->depth : limit + 1);
                snprintf(buckets, sizeof(buckets), "%u",
                         order->buckets > 0 && order->buckets < SHARE_BUCKETS ? order->buckets
                                                                              : SHARE_BUCKETS);
                params[1] = first;
                params[2] = depth;
                params[3] = cls;
                params[4] = floor;
                params[5] = buckets;
                nparams = 6;
        }
        if (skip && (skip->n_topics || skip->n_keys)) {
                if (any_null(skip->topics, skip->n_topics) || any_null(skip->key_topics, skip->n_keys) ||
                    any_null(skip->keys, skip->n_keys)) {
                        set_err(err, errsz, "claim", "a paused topic or key is NULL");
                        return -EINVAL;
                }
                topics = text_array(skip->topics, skip->n_topics);
                key_topics = text_array(skip->key_topics, skip->n_keys);
                keys = text_array(skip->keys, skip->n_keys);
                if (!topics || !key_topics || !keys) {
                        set_err(err, errsz, "claim", "out of memory");
                        return -ENOMEM;
                }
                /* Other relays' locked rows come first among the candidates: with ordering =
                 * "none" look four batches deep, so a relay behind up to three others still gets a
                 * full batch (docs/claim.md, "Depth"); with "key" as deep as the caller says (the
                 * other relays' buckets are among the candidates). */
                int deep = order->skip_depth > 0 ? order->skip_depth : order->depth;

                snprintf(depth, sizeof(depth), "%lld",
                         ordered ? (long long)(deep > limit ? deep : limit)
                                 : (long long)limit * (pg->cfg->relay.ordering == ORDERING_NONE ? 4 : 1));
                params[1] = topics;
                params[2] = key_topics;
                params[3] = keys;
                params[4] = depth;
                nparams = 5;
                if (ordered) {
                        /* $6 first bucket, $7 lock class */
                        params[5] = first;
                        params[6] = cls;
                        nparams = 7;
                }
                sql = pg->sql_claim_skip;
                stmt = stmt_claim_skip;
        }
        /* BEGIN and the claim travel together: one round trip. An explicit BEGIN keeps the
         * transaction (and the row locks) open past the sync. The paused form is planned without
         * bitmap scans (for this transaction only): a bitmap scan reads every row of a topic and
         * sorts them, where the index scan in id order stops after the rows it needs, and with
         * an estimate of a few rows for "topic >= t AND topic <= t" the planner preferred it.
         * It is also planned for its values each time (its pinned plans were chosen that way). */
        {
                /* The settings of this transaction, in one statement after BEGIN. A bound on lock
                 * waits (order->lock_wait): with other batches of this relay in flight, a claim
                 * that waited for a lock (a row another relay holds; the table, queued behind an
                 * ALTER TABLE or a TRUNCATE that itself waits for one of those batches) would hold
                 * up the very loop that must finish them. The bound is the claim's alone: the
                 * statement after it puts the session's lock_timeout back for the rest of the
                 * transaction, so the finish may wait for a lock (a CREATE INDEX's SHARE lock)
                 * rather than roll back rows Kafka already has and send them again. */
                char settings[256] = "", restore[96] = "";
                size_t n = 0;

                if (sql == pg->sql_claim_skip)
                        n += (size_t)snprintf(settings + n, sizeof(settings) - n,
                                              "SELECT set_config('enable_bitmapscan', 'off', true),"
                                              " set_config('plan_cache_mode', 'force_custom_plan', true)");
                if (order->lock_wait) {
                        n += (size_t)snprintf(
                                settings + n, sizeof(settings) - n,
                                "%s set_config('lock_timeout', '%llu', true)", n ? "," : "SELECT",
                                (unsigned long long)((order->lock_wait + USEC_PER_MSEC - 1) / USEC_PER_MSEC));
                        snprintf(restore, sizeof(restore), "SELECT set_config('lock_timeout', '%llu', true)",
                                 (unsigned long long)(pg->lock_timeout / USEC_PER_MSEC));
                }
                if (!PQenterPipelineMode(pg->conn) ||
                    !PQsendQueryParams(pg->conn, "BEGIN", 0, NULL, NULL, NULL, NULL, 0) ||
                    (n && !PQsendQueryParams(pg->conn, settings, 0, NULL, NULL, NULL, NULL, 0)) ||
                    !PQsendQueryPrepared(pg->conn, stmt, nparams, params, NULL, NULL, 1) ||
                    (restore[0] && !PQsendQueryParams(pg->conn, restore, 0, NULL, NULL, NULL, NULL, 0)) ||
                    !PQpipelineSync(pg->conn))
                        return fail_conn(pg, -ECONNRESET, err, errsz, "claim");
                pg->in_tx = true;
                r = op_begin(pg, PG_OP_CLAIM, 2 + (n > 0) + (restore[0] != 0), n ? 2 : 1, b, deadline);
                if (r < 0)
                        return fail_conn(pg, r, err, errsz, "claim");
        }
        return 0;
}

/* The claim's results are in (op_step): what they say. */
static int claim_done(struct pg *pg, usec_t deadline, char *err, size_t errsz) {
        struct pg_batch *b = pg->op_batch;
        int r = pg->op_err;

        if (r < 0) {
                snprintf(err, errsz, "%s", pg->op_msg);
                pg_batch_clear(b);
                pg_rollback(pg, deadline);
                return r;
        }
        b->res = pg->op_keep;
        pg->op_keep = NULL;
        r = batch_parse(b);
        if (r < 0) {
                set_err(err, errsz, "claim", r == -ENOMEM ? "out of memory" : "unexpected result shape");
                pg_batch_clear(b);
                pg_rollback(pg, deadline);
                return r;
        }
        if (b->n == 0) {
                /* Nothing to do: end the transaction now rather than keep a snapshot open. */
                r = exec_simple(pg, "COMMIT", deadline, err, errsz, "COMMIT");
                pg->in_tx = false;
                pg_batch_clear(b);
                return r < 0 ? r : 0;
        }
        return 0;
}

/* The rows' places as a binary tid[] parameter (*len bytes): no formatting or parsing. */
static char *tid_array(const pg_tid *tids, size_t n, int *len) {
        /* array_recv()'s format: dimensions, no NULLs, element type tid (oid 27), one dimension
         * of n from 1, then each element's length and value (tidsend: block, offset). */
        size_t size = 20 + 10 * n;
        char *s = malloc(size), *p = s;
        uint32_t head[5] = { htobe32(1), htobe32(0), htobe32(27), htobe32((uint32_t)n), htobe32(1) };

        if (!s || size > INT32_MAX) {
                free(s);
                return NULL;
        }
        memcpy(p, head, sizeof(head));
        p += sizeof(head);
        for (size_t i = 0; i < n; i++) {
                uint32_t l = htobe32(6), block = htobe32((uint32_t)(tids[i] >> 16));
                uint16_t off = htobe16((uint16_t)(tids[i] & 0xffff));

                memcpy(p, &l, 4);
                memcpy(p + 4, &block, 4);
                memcpy(p + 8, &off, 2);
                p += 10;
        }
        *len = (int)size;
        return s;
}

int pg_finish_start(struct pg *pg, const pg_tid *done, size_t n_done, const struct pg_failure *fails,
                    size_t n_fails, usec_t deadline, char *err, size_t errsz) {
        _cleanup_free_ char *done_arr = NULL;
        _cleanup_free_ pg_tid *group = NULL;
        /* The row lists go in binary (tid[]), the rest as text. */
        static const int formats[4] = { 1, 0, 0, 0 };
        char **fail_arrs = NULL;
        size_t n_groups = 0, expected = 0;
        int r = 0;

        if (!pg_connected(pg))
                return not_connected(err, errsz, "finish");
        if (!pg->in_tx || pg->op) {
                set_err(err, errsz, "finish", "no claimed batch to finish");
                return -ECONNRESET;
        }
        if (n_fails) {
                group = calloc(n_fails, sizeof(*group));
                fail_arrs = calloc(n_fails, sizeof(*fail_arrs));
                if (!group || !fail_arrs) {
                        set_err(err, errsz, "finish", "out of memory, rolling back");
                        pg_rollback(pg, deadline);
                        r = -ENOMEM;
                        goto out;
                }
        }
        if (!PQenterPipelineMode(pg->conn)) {
                r = fail_conn(pg, -ECONNRESET, err, errsz, "finish");
                goto out;
        }
        if (n_done) {
                const char *params[1];
                int lengths[1];

                done_arr = tid_array(done, n_done, &lengths[0]);
                if (!done_arr) {
                        r = -ENOMEM;
                        goto abandon;
                }
                params[0] = done_arr;
                if (!PQsendQueryPrepared(pg->conn,
                                         pg->cfg->relay.finish == FINISH_MARK ? stmt_mark : stmt_delete, 1,
                                         params, lengths, formats, 0))
                        goto send_failed;
                expected++;
        }
        /* Failures sharing reason and treatment go in one statement: an outage fails a whole
         * batch with one reason, and that must stay one round trip's worth of work. */
        for (size_t i = 0; i < n_fails;) {
                size_t j = i, k = 0;
                char inc[12];
                const char *params[4];
                int lengths[4] = { 0 };

                while (j < n_fails && fails[j].attempts_inc == fails[i].attempts_inc &&
                       fails[j].dead == fails[i].dead && strcmp(fails[j].reason, fails[i].reason) == 0)
                        group[k++] = fails[j++].tid;
                fail_arrs[n_groups] = tid_array(group, k, &lengths[0]);
                if (!fail_arrs[n_groups]) {
                        r = -ENOMEM;
                        goto abandon;
                }
                snprintf(inc, sizeof(inc), "%d", fails[i].attempts_inc);
                params[0] = fail_arrs[n_groups++];
                params[1] = inc;
                params[2] = fails[i].reason;
                params[3] = fails[i].dead ? "true" : "false";
                if (!PQsendQueryPrepared(pg->conn, stmt_fail, 4, params, lengths, formats, 0))
                        goto send_failed;
                expected++;
                i = j;
        }
        if (!PQsendQueryParams(pg->conn, "COMMIT", 0, NULL, NULL, NULL, NULL, 0) || !PQpipelineSync(pg->conn))
                goto send_failed;
        expected++;
        r = op_begin(pg, PG_OP_FINISH, (int)expected, -1, NULL, deadline);
        if (r < 0)
                goto lost;
        r = 0;
        goto out;

send_failed:
        r = -ECONNRESET;
lost:
        r = fail_conn(pg, r, err, errsz, "finish");
        goto out;
abandon:
        /* Results may still be queued in the pipeline: no cheap way back to a known state. */
        set_err(err, errsz, "finish", "out of memory, dropping the connection");
        pg_disconnect(pg);
out:
        if (fail_arrs)
                for (size_t i = 0; i < n_groups; i++)
                        free(fail_arrs[i]);
        free(fail_arrs);
        return r;
}

/* The finish's results are in (op_step). */
static int finish_done(struct pg *pg, usec_t deadline, char *err, size_t errsz) {
        if (pg->op_err < 0) {
                snprintf(err, errsz, "%s", pg->op_msg);
                pg_rollback(pg, deadline);
                return pg->op_err;
        }
        pg->in_tx = false;
        return 0;
}

int pg_claim(struct pg *pg, int limit, const struct pg_skip *skip, const struct pg_order *order,
             struct pg_batch *b, usec_t deadline, char *err, size_t errsz) {
        int r = pg_claim_start(pg, limit, skip, order, b, deadline, err, errsz);

        return r < 0 ? r : op_wait(pg, err, errsz);
}

int pg_finish(struct pg *pg, const pg_tid *done, size_t n_done, const struct pg_failure *fails,
              size_t n_fails, usec_t deadline, char *err, size_t errsz) {
        int r = pg_finish_start(pg, done, n_done, fails, n_fails, deadline, err, errsz);

        return r < 0 || !pg->op ? r : op_wait(pg, err, errsz);
}

void pg_rollback(struct pg *pg, usec_t deadline) {
        char err[256];

        if (!pg->conn || !pg->in_tx)
                return;
        pg->in_tx = false;
        if (exec_simple(pg, "ROLLBACK", deadline, err, sizeof(err), "ROLLBACK") < 0)
                pg_disconnect(pg);
}

int pg_retention(struct pg *pg, int limit, usec_t deadline, char *err, size_t errsz) {
        char interval[32], lim[16];
        const char *params[2] = { interval, lim };
        PGresult *res;
        int r;

        if (!pg_connected(pg))
                return not_connected(err, errsz, "retention");
        snprintf(interval, sizeof(interval), "%llu milliseconds",
                 (unsigned long long)(pg->cfg->relay.retention / USEC_PER_MSEC));
        snprintf(lim, sizeof(lim), "%d", limit);
        r = exec_one(pg, pg->sql_retention, 2, params, 0, deadline, &res, err, errsz, "retention");
        if (r < 0)
                return r;
        r = atoi(PQcmdTuples(res));
        PQclear(res);
        return r;
}

int pg_try_leader(struct pg *pg, bool *leader, usec_t deadline, char *err, size_t errsz) {
        PGresult *res;
        int r;

        *leader = false;
        if (!pg_connected(pg))
                return not_connected(err, errsz, "leader lock");
        r = exec_one(pg, pg->sql_leader, 0, NULL, 0, deadline, &res, err, errsz, "leader lock");
        if (r < 0)
                return r;
        *leader = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
        PQclear(res);
        return 0;
}

int pg_lag(struct pg *pg, usec_t *lag, int64_t *pending, usec_t deadline, char *err, size_t errsz) {
        char floor[24];
        const char *params[1] = { floor };
        PGresult *res;
        int r;

        if (!pg_connected(pg))
                return not_connected(err, errsz, "lag");
        snprintf(floor, sizeof(floor), "%lld", (long long)claim_floor(pg));
        r = exec_one(pg, pg->sql_lag, 1, params, 1, deadline, &res, err, errsz, "lag");
        if (r < 0)
                return r;
        *lag = 0;
        *pending = 0;
        if (PQntuples(res) == 1 && PQnfields(res) == 3 && PQgetlength(res, 0, 0) == 8 &&
            PQgetlength(res, 0, 1) == 8 && PQgetlength(res, 0, 2) == 8) {
                int64_t counted = (int64_t)be64(PQgetvalue(res, 0, 1)),
                        span = (int64_t)be64(PQgetvalue(res, 0, 2));

                *lag = (usec_t)be64(PQgetvalue(res, 0, 0));
                *pending = counted < PG_PENDING_EXACT || span < counted ? counted : span;
        }
        PQclear(res);
        return 0;
}

int pg_floor_look(struct pg *pg, int64_t at, const char *running, struct pg_floor_look *l, usec_t deadline,
                  char *err, size_t errsz) {
        char num[24];
        const char *params[1] = { num };
        PGresult *res;
        int r;

        memset(l, 0, sizeof(*l));
        if (!pg_connected(pg))
                return not_connected(err, errsz, "claim floor");
        if (running) {
                const char *list[1] = { running };

                r = exec_one(pg, floor_ended_sql, 1, list, 0, deadline, &res, err, errsz, "claim floor");
                if (r < 0)
                        return r;
                l->ended = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
                PQclear(res);
        }
        snprintf(num, sizeof(num), "%lld", (long long)at);
        r = exec_one(pg, pg->sql_floor_lowest, 1, params, 0, deadline, &res, err, errsz, "claim floor");
        if (r < 0)
                return r;
        l->any = PQntuples(res) == 1 && !PQgetisnull(res, 0, 0);
        l->lowest = l->any ? strtoll(PQgetvalue(res, 0, 0), NULL, 10) : 0;
        PQclear(res);
        r = read_id_sequence(pg, &l->seq_last, &l->seq_node, deadline, err, errsz);
        if (r < 0)
                return r;
        if (!pg->id_seq) {
                set_err(err, errsz, "claim floor", pg->floor_off);
                return -EOPNOTSUPP;
        }
        r = exec_one(pg, floor_running_sql, 0, NULL, 0, deadline, &res, err, errsz, "claim floor");
        if (r < 0)
                return r;
        l->running = PQntuples(res) == 1 ? strdup(PQgetvalue(res, 0, 0)) : NULL;
        PQclear(res);
        if (!l->running) {
                set_err(err, errsz, "claim floor", "out of memory");
                return -ENOMEM;
        }
        return 0;
}

int pg_floor_below(struct pg *pg, int64_t at, bool *found, usec_t deadline, char *err, size_t errsz) {
        char num[24];
        const char *params[1] = { num };
        PGresult *res;
        int r;

        *found = false;
        if (!pg_connected(pg))
                return not_connected(err, errsz, "claim floor guard");
        snprintf(num, sizeof(num), "%lld", (long long)at);
        r = exec_one(pg, pg->sql_floor_below, 1, params, 0, deadline, &res, err, errsz, "claim floor guard");
        if (r < 0)
                return r;
        *found = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
        PQclear(res);
        return 0;
}

const char *pg_lib_version(void) {
        static char v[24];
        int n = PQlibVersion();

        if (!v[0])
                snprintf(v, sizeof(v), "%d.%d", n / 10000, n % 10000);
        return v;
}
