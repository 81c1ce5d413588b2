/* relay_parts.h -- What the relay loop (relay.c) shares with its own modules: the looks at the table between batches (relay_looks.c) and what operators see (relay_status.c). */
#pragma once

#include <stdbool.h>

#include "relay.h"
#include "util.h"

/* ---- relay.c ---- */

/* The deadline of one statement between batches (statement_timeout, and a grace for a server or
 * network that stopped answering). */
usec_t relay_db_deadline(const struct relay *r, usec_t now);

/* The relay's own connection and every pipeline's. */
bool relay_connected(const struct relay *r);
/* Whether a connection's last failure proved its server session shared with other clients
 * (pooler.h: a pooler in transaction mode). */
bool relay_session_shared(const struct relay *r);

/* Other relays' pipelines share the table (ordering = "key"): claims take key buckets. */
bool relay_sharing(const struct relay *r);

/* The claim floor back to 0 (pg.h: claims then read from the lowest id there is). */
void relay_drop_floor(struct relay *r, usec_t now);

/* ---- relay_looks.c: on the relay's own connection, between batches ---- */

/* ordering = "key": who else publishes this table, and so where our claims start in the key
 * buckets and how deep they look; due as share_look_due() says. */
void relay_look_at_members(struct relay *r, usec_t now);

/* ordering = "single": takes the table's leader lock if it is free (r->leader). */
void relay_try_lead(struct relay *r, usec_t now);

/* The claim floor (floor.h): its step or its guard, whichever is due; nothing when neither is. */
void relay_step_floor(struct relay *r, usec_t now);

/* finish = "mark": deletes published rows past the retention, for at most a second. */
void relay_run_retention(struct relay *r, usec_t now);

/* ---- relay_status.c ---- */

/* The gauges /metrics and /ready read, as the loop sees them now. */
void relay_publish_gauges(struct relay *r);

/* No lag figures until a look can read them again (the database connection was lost). */
void relay_lag_unknown(struct relay *r);

/* STATUS= every two seconds, and the journal summary every relay.status_interval when something
 * changed. */
void relay_status(struct relay *r, usec_t now);
