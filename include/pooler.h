/* pooler.h -- Signs that a connection's server session is not its own (a connection pooler in transaction mode): pure rules over what PostgreSQL answered. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* The relay keeps state in its server session: prepared statements (pg.c) and, when it shares
 * the table, a session advisory lock per member (share.h). A pooler in transaction mode (e.g.
 * PgBouncer's pool_mode = transaction) hands each transaction of a client to whichever server
 * session is free, so that state lands on sessions other clients use. These rules tell when
 * PostgreSQL's answers prove it; the relay then says so (docs/ordering.md, "Limits"). */

/* What the connection was doing when the statement failed. */
enum pooler_step {
        POOLER_PREPARE, /* preparing the relay's statements on a connection (new, or after DEALLOCATE ALL) */
        POOLER_EXECUTE, /* running one of the statements it prepared */
        POOLER_OTHER, /* anything else */
};

/* Whether SQLSTATE `state` (NULL: none) of a statement that failed in `step` proves that the
 * session is shared with other clients:
 * - 42P05 duplicate_prepared_statement while preparing: the connection has prepared nothing
 *   since it started (or since its DEALLOCATE ALL), so another client made the statement on this
 *   server session;
 * - 26000 invalid_sql_statement_name while executing: the connection prepared the statement,
 *   and the server session that runs it has never seen it.
 * Any other state, or either one in another step, proves nothing. */
bool pooler_sign(enum pooler_step step, const char *state);

/* What the relay adds to the message of such a failure. */
extern const char pooler_hint[];

/* Whether the member locks a relay took are held by other backends than its sessions': `slots`
 * and `pids` (n of them) are what pg_locks lists (each member slot's lock and the backend holding
 * it); `own_slots` and `own_pids` (n_own of them) are the relay's connections' slots (-1: none
 * taken) and their backends (pg_backend_pid). A slot of ours held by another pid means the
 * lock was taken on a session the pooler handed over. */
bool pooler_lock_elsewhere(const int *slots, const int *pids, size_t n, const int *own_slots,
                           const int *own_pids, size_t n_own);
