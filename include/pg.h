/* pg.h -- The relay's PostgreSQL connection: connect with a deadline, LISTEN, claim and finish batches. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <signal.h>

#include <libpq-fe.h>

#include "message.h"

#include "config.h"
#include "util.h"

/* Where a row is (its ctid): the block << 16 | the offset in it. */
typedef uint64_t pg_tid;

/* One claimed row. Pointers point into the batch's PGresult and live until pg_batch_clear(). */
struct pg_row {
        int64_t id;
        pg_tid tid; /* stays where it is while the batch holds it (the finish names it so) */
        const char *topic;
        const char *key; /* NULL = no key */
        size_t key_len;
        const char *payload; /* NULL = tombstone */
        size_t payload_len;
        int64_t timestamp_ms; /* created_at, milliseconds since the epoch */
        bool timestamp_known; /* false: created_at is infinity or -infinity (timestamp_ms 0) */
        int attempts;
        const char *headers; /* the headers column as JSON text (headers.h); NULL = SQL NULL */
        size_t headers_len;
};

struct pg_batch {
        PGresult *res;
        struct pg_row *rows;
        size_t n;
        size_t in_view; /* ordering = "key": the pending rows in the claim's view (>= n); with
                         * nothing paused counted up to limit + 1 only, which tells the same
                         * (share_next_wait: did it leave rows it looked at?) */
        int64_t first_pending; /* the sharing claim with nothing paused: the lowest pending id
                                * at or above the floor in its snapshot (floor_claimed); 0
                                * otherwise, or when it returned no row */
};

/* What to record about a row that was not delivered. */
struct pg_failure {
        pg_tid tid; /* the row, as the claim gave it */
        int attempts_inc; /* 1 when the failure was the row's own, 0 for an outage */
        bool dead; /* park it in the dead-letter state */
        const char *reason; /* stored in last_error */
};

/* A claim or a finish sent and not yet read back (pg_poll). */
enum pg_op { PG_OP_NONE, PG_OP_CLAIM, PG_OP_FINISH };

struct pg {
        PGconn *conn;
        const struct relay_config *cfg; /* borrowed */
        char *table; /* cfg's table, quoted for SQL */
        char *sql_claim; /* nothing paused */
        char *sql_claim_skip; /* topics or (topic, key) pairs paused */
        char *sql_claim_alone; /* ordering = "key", nothing paused, no other relay */
        char *sql_delete;
        char *sql_mark;
        char *sql_fail;
        char *sql_retention;
        char *sql_lag;
        char *sql_floor_lowest, *sql_floor_below;
        char *sql_listen;
        char *sql_leader;
        /* ordering = "key": the advisory lock classes of this table's key buckets and of its
         * relays' member slots (from the table's oid, set on connect), and this session's slot. */
        int32_t bucket_class, member_class, relay_class;
        int member_slot; /* -1: none */
        /* The claim floor (floor.h): claims and the lag query read ids >= claim_floor (set by the
         * caller, 0 = all). id_seq: the id column's sequence (oid), found on connect, or 0 when
         * the floor cannot be used, and then floor_off says why. */
        int64_t claim_floor;
        uint32_t id_seq;
        char floor_off[160];
        /* What the table lacks that the relay runs without (schema_check's notes; "" when
         * nothing): pg_connect fills it, the relay says it once. */
        char schema_notes[480];
        /* The outbox-source header (message_source()): relay.source, or derived from the
         * database and the table; pg_connect fills it on the listening connection. */
        char source[MESSAGE_SOURCE_MAX + 1];
        bool requeued; /* a notification said rows were put back in line (sql/003): the caller clears it */
        bool in_tx;
        bool no_listen; /* a pipeline's connection: claims and finishes only, no LISTEN */
        /* The operation in progress (pg_claim_start, pg_finish_start) and how far its results
         * are read. */
        enum pg_op op;
        int op_n, op_pos, op_err, op_keep_at;
        bool op_flush; /* the statements are not all sent yet */
        PGresult *op_keep; /* the claim's result */
        struct pg_batch *op_batch;
        usec_t op_deadline;
        char op_msg[512]; /* the first failure's message */
        usec_t lock_timeout; /* the session's lock_timeout, 0 = none (set before connecting) */
        bool reprepare; /* a prepared statement went stale (ALTER TABLE): prepare them again */
        /* The SQLSTATE of the last statement run outside a pipeline ("" when it succeeded or the
         * failure had none). And whether a failure proved the server session shared with other
         * clients (pooler.h: a pooler in transaction mode): the caller clears it. */
        char err_state[6];
        bool session_shared;
        /* Called about once a second while a call waits on the server, so the caller can keep
         * serving its watchdog during a long but bounded wait. Optional. */
        void (*tick)(void *arg);
        void *tick_arg;
        /* When set (a second stop signal), waits on the server give up at once. Optional. */
        const volatile sig_atomic_t *cancel;
};

/* Prepares the SQL texts for cfg's table and channel. No connection yet. */
int pg_init(struct pg *pg, const struct relay_config *cfg);
void pg_done(struct pg *pg);

/* Connects without blocking past `deadline` (monotonic µs), sets the session timeouts and
 * LISTENs. Returns 0, -ETIMEDOUT, or -ECONNREFUSED with libpq's message (password-free) in err;
 * -ENOPKG when the table lacks what a migration of sql/ creates (schema_check), and err names it.
 * A host name is resolved by libpq with a blocking getaddrinfo() that the deadline does not
 * bound (docs/systemd.md, "PostgreSQL host names and DNS"); hostaddr= avoids it. */
int pg_connect(struct pg *pg, usec_t deadline, char *err, size_t errsz);
void pg_disconnect(struct pg *pg);
bool pg_connected(const struct pg *pg);

/* The socket to poll for notifications, or -1. */
int pg_socket(const struct pg *pg);

/* Reads what the server sent and drains notifications. Returns the number of notifications
 * (>= 0) or -ECONNRESET when the connection is gone. Never blocks. */
int pg_consume_notifies(struct pg *pg);

/* The notifications libpq has already read (while another statement ran, say), without reading
 * the socket: for the loop's turns, which read it only when poll() says there is something. */
int pg_take_notifies(struct pg *pg);

/* What a claim leaves out: whole topics, and single (topic, key) sequences (key_topics[i],
 * keys[i]). Leaving out a (topic, key) leaves out all its rows, so its order holds. Borrowed. */
struct pg_skip {
        const char *const *topics;
        size_t n_topics;
        const char *const *key_topics;
        const char *const *keys;
        size_t n_keys;
};

/* ordering = "key": where the claim starts trying key buckets, and how far it looks. A row of a
 * key is claimed only together with its bucket's transaction-scoped advisory lock, so no two open
 * batches ever hold rows of one (topic, key). */
struct pg_order {
        unsigned first; /* the bucket tried first; the others follow round from it (share.h) */
        int depth; /* pending rows the claim looks at, at most */
        bool alone; /* no other relay's pipeline on the table: rows in id order, no buckets */
        int64_t start; /* the first id to claim (a chain, overlap.h); 0: from pg->claim_floor */
        usec_t lock_wait; /* the longest a lock is waited for (0: statement_timeout); then -EAGAIN */
        unsigned buckets; /* sharing: how many buckets to take at most (0: every free one) */
        int skip_depth; /* while something is paused: candidates to look at (0: depth) */
};

/* BEGIN and claim up to `limit` rows in id order, one round trip, leaving out what `skip`
 * names (NULL = nothing). For every (topic, key) the rows returned are the first of its pending
 * rows that no other transaction holds; rows of a paused topic or pair are not returned, and
 * their backlog is not read either (docs/claim.md). The transaction stays open (pg->in_tx) when
 * rows came back; an empty claim is committed at once. Every failure fills err:
 * -ECONNRESET: connection lost or not connected; -ETIMEDOUT: deadline passed (the connection is
 * then dropped); -EIO: a statement failed; -EAGAIN: a lock was not had within order->lock_wait;
 * -ENOMEM; -EPROTO: a result of the wrong shape;
 * -EINVAL: a NULL name in `skip`. With ordering = "key", `order` says where it starts taking
 * buckets, how many it takes and how deep it looks (NULL: from bucket 0, every free one, one
 * batch deep); with nothing paused it takes that many free buckets (every one with rows in view
 * when those fit in a batch), then their rows in id order; while something is paused it takes
 * buckets until they cover a batch of the rows it looked at. */
int pg_claim(struct pg *pg, int limit, const struct pg_skip *skip, const struct pg_order *order,
             struct pg_batch *b, usec_t deadline, char *err, size_t errsz);

/* pg_claim() without waiting: sends it (0, or -errno as pg_claim), and pg_poll() reads its result
 * into `b` when it has come. `b` must live until then. */
int pg_claim_start(struct pg *pg, int limit, const struct pg_skip *skip, const struct pg_order *order,
                   struct pg_batch *b, usec_t deadline, char *err, size_t errsz);

/* The operation in progress (a claim or a finish started): -EINPROGRESS while its results are
 * still to come, then what pg_claim() or pg_finish() would have returned; 0 with nothing in
 * progress. Never waits: call it when pg_socket() is ready for pg_poll_events(). The deadline
 * given to the start is kept (past it the connection is dropped, -ETIMEDOUT). */
int pg_poll(struct pg *pg, char *err, size_t errsz);
short pg_poll_events(const struct pg *pg); /* 0: nothing in progress */
void pg_batch_clear(struct pg_batch *b);

/* Finishes the claimed rows and COMMITs, one round trip: deletes or marks `done` (the rows as
 * the claim gave them: pg_row.tid), records `fails`. On any error the transaction is gone, nothing was changed, and err says why. */
int pg_finish(struct pg *pg, const pg_tid *done, size_t n_done, const struct pg_failure *fails,
              size_t n_fails, usec_t deadline, char *err, size_t errsz);

/* pg_finish() without waiting; pg_poll() reads its outcome. */
int pg_finish_start(struct pg *pg, const pg_tid *done, size_t n_done, const struct pg_failure *fails,
                    size_t n_fails, usec_t deadline, char *err, size_t errsz);

/* Rolls back an open transaction. Drops the connection if that fails. */
void pg_rollback(struct pg *pg, usec_t deadline);

/* ordering = "single": tries to become the one relay that publishes this table, by a session
 * advisory lock on the table's oid (released when the connection ends, so a dead leader's
 * successor takes over). Sets *leader. */
int pg_try_leader(struct pg *pg, bool *leader, usec_t deadline, char *err, size_t errsz);

/* ordering = "key": takes a member slot of the table (a session advisory lock; it ends with the
 * session), sets pg->member_slot: a pipeline's, or with `relay` a relay's (one per relay, so the
 * relays can be counted apart from their pipelines). */
int pg_join(struct pg *pg, bool relay, usec_t deadline, char *err, size_t errsz);

/* ordering = "key": the pipelines' member slots held on the table (up to cap) and the backend
 * holding each (a pooler in transaction mode hands a relay's statements to other backends: its
 * session locks are then not its own), and how many relay slots are held. */
int pg_members(struct pg *pg, int *slots, int *pids, size_t cap, size_t *n, unsigned *relays, usec_t deadline,
               char *err, size_t errsz);

/* The server process of the connection (PQbackendPID), 0 without one. */
int pg_backend_pid(const struct pg *pg);

/* finish = "mark": deletes up to `limit` marked rows older than the retention. Returns the count. */
int pg_retention(struct pg *pg, int limit, usec_t deadline, char *err, size_t errsz);

/* Age in µs of the oldest pending row (0 when none), and the pending rows: exact below
 * PG_PENDING_EXACT; from there on the span of ids from the oldest to the newest pending row, an
 * estimate from above (finished rows between two pending ones count too). */
#define PG_PENDING_EXACT 10000
int pg_lag(struct pg *pg, usec_t *lag, int64_t *pending, usec_t deadline, char *err, size_t errsz);

/* The claim floor's look (floor.h): `running` is the open step's list of transactions (NULL:
 * no step open), as the last look returned it. Fills l (l->running malloc'd: the transactions
 * running now, to keep if a step begins). Four statements outside a transaction, in floor.h's
 * order. -EOPNOTSUPP (err = floor_off, id_seq = 0) when the table's ids no longer allow a floor
 * (e.g. an ALTER SEQUENCE ... CACHE 20 since the connect). */
struct pg_floor_look {
        bool ended;
        bool any; /* a row is pending at or above `at`: the lowest is `lowest` */
        int64_t lowest;
        int64_t seq_last, seq_node; /* the id sequence's last value and relfilenode */
        char *running;
};
int pg_floor_look(struct pg *pg, int64_t at, const char *running, struct pg_floor_look *l, usec_t deadline,
                  char *err, size_t errsz);

/* Whether a pending row lies below `at` (the floor's guard). */
int pg_floor_below(struct pg *pg, int64_t at, bool *found, usec_t deadline, char *err, size_t errsz);

/* The libpq the relay runs with, "MAJOR.MINOR" (PQlibVersion()). A static buffer. */
const char *pg_lib_version(void);
