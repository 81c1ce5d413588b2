/* relay_looks.c -- The relay's looks at its table between batches, on its own connection: who shares it, the leader lock, the claim floor, retention. */
#include "relay_parts.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"
#include "pooler.h"

#define RETENTION_BATCH 1000
#define RETENTION_EVERY (10 * USEC_PER_SEC)

/* finish = "mark": deletes marked rows past the retention in small batches, between claims
 * (also while busy), for at most a second at a time; comes back sooner while it has a backlog. */
void relay_run_retention(struct relay *r, usec_t now) {
        usec_t until = now + USEC_PER_SEC;
        char err[512];
        int n = 0;
        long total = 0;

        do {
                n = pg_retention(&r->pg, RETENTION_BATCH, relay_db_deadline(r, now_usec()), err, sizeof(err));
                if (n < 0) {
                        log_warning("retention failed: %s", err);
                        break;
                }
                total += n;
        } while (n == RETENTION_BATCH && now_usec() < until && !r->sig->stop);
        if (total > 0)
                log_debug("retention: deleted %ld published rows", total);
        r->next_retention = now_usec() + (n == RETENTION_BATCH ? 100 * USEC_PER_MSEC : RETENTION_EVERY);
}

/* The claim floor (floor.h): a look every second between batches (every 200 ms while a backlog
 * waits on it, floor_busy), and now and then the guard below it; nothing when
 * neither is due. A look that fails changes nothing (the floor stays as safe as it was). */
void relay_step_floor(struct relay *r, usec_t now) {
        bool guard = floor_guard_due(&r->floor, now);
        usec_t deadline;
        int64_t before = r->floor.at;
        char err[512];

        if (!guard &&
            !floor_step_due(&r->floor, now,
                            floor_busy(&r->floor, relay_sharing(r), r->cfg->relay.ordering != ORDERING_NONE,
                                       r->overlap.end, r->backlog_at, now)))
                return;
        deadline = relay_db_deadline(r, now);
        if (guard) {
                bool found = false, asked = r->floor_requeued;

                r->floor_requeued = false;
                if (pg_floor_below(&r->pg, r->floor.at, &found, deadline, err, sizeof(err)) < 0) {
                        log_warning("looking below the claim floor of table '%s' failed: %s",
                                    r->cfg->postgres.table, err);
                        r->floor.next_guard = now + FLOOR_STEP_INTERVAL;
                } else if (floor_guarded(&r->floor, found, now)) {
                        relay_drop_floor(r, now);
                        if (asked)
                                log_notice("rows put back in line below id %" PRId64
                                           " of table '%s' (outbox_requeue): "
                                           "claims read the table from its start again",
                                           before, r->cfg->postgres.table);
                        else
                                log_warning("pending rows below id %" PRId64
                                            " of table '%s', where the claims "
                                            "started, put there by hand (a dead letter put back without "
                                            "outbox_requeue, an id written explicitly, or the sequence set "
                                            "back): "
                                            "they go out now, and may follow later rows of their keys",
                                            before, r->cfg->postgres.table);
                }
        } else {
                struct pg_floor_look pl;
                int ret = pg_floor_look(&r->pg, r->floor.at, r->floor.open ? r->floor_running : NULL, &pl,
                                        deadline, err, sizeof(err));

                if (ret == -EOPNOTSUPP) {
                        relay_drop_floor(r, now);
                        log_notice(
                                "claims read table '%s' from the start of its pending index from now on: %s "
                                "(docs/claim.md, \"The claim floor\")",
                                r->cfg->postgres.table, err);
                } else if (ret < 0) {
                        free(pl.running);
                        log_debug("claim floor: looking failed: %s", err);
                        floor_look_failed(&r->floor, now);
                } else {
                        struct floor_look l = { pl.ended, pl.any, pl.lowest, pl.seq_last, pl.seq_node };

                        switch (floor_step(&r->floor, &l, now)) {
                        case FLOOR_BEGAN:
                                free(r->floor_running);
                                r->floor_running = pl.running;
                                break;
                        case FLOOR_RESET:
                                free(pl.running);
                                relay_drop_floor(r, now);
                                log_notice("the id sequence of table '%s' went back: claims read the table "
                                           "from its "
                                           "start again",
                                           r->cfg->postgres.table);
                                break;
                        case FLOOR_WAITING:
                                free(pl.running);
                                break;
                        }
                }
        }
        r->pg.claim_floor = r->floor.at;
        if (r->floor.at != before)
                log_debug("claims of table '%s' start at id %" PRId64, r->cfg->postgres.table, r->floor.at);
}

/* ordering = "key": who else publishes this table, and so where our claims start in the key
 * buckets and how deep they look. Looked at every second, five times a second while this relay is
 * alone and its claims find a backlog (share_look_due). */
void relay_look_at_members(struct relay *r, usec_t now) {
        int slots[1024], pids[1024], own[SHARE_PIPELINES_MAX], own_pids[SHARE_PIPELINES_MAX];
        size_t n = 0;
        unsigned relays = 0;
        char err[512];

        r->members_looked_at = now;
        r->members_look_failed = pg_members(&r->pg, slots, pids, ELEMENTSOF(slots), &n, &relays,
                                            relay_db_deadline(r, now), err, sizeof(err)) < 0;
        if (r->members_look_failed) {
                log_warning("looking at the relays sharing table '%s' failed: %s", r->cfg->postgres.table,
                            err);
                return;
        }
        for (unsigned p = 0; p < r->n_lanes; p++) {
                own[p] = r->lanes[p].pg.member_slot;
                own_pids[p] = pg_backend_pid(&r->lanes[p].pg);
        }
        if (pooler_lock_elsewhere(slots, pids, n, own, own_pids, r->n_lanes)) {
                /* Our session lock is not on this backend: a pooler in transaction mode hands our
                 * statements to other sessions. Order still holds (bucket locks live within one
                 * transaction), but the relay needs a session of its own to share the work. */
                if (!r->pooler_said)
                        log_error("the relay's member lock on table '%s' is held by a backend other than the "
                                  "one that took it; %s",
                                  r->cfg->postgres.table, pooler_hint);
                r->pooler_said = true;
        }
        if (share_update(&r->share, slots, n, own, r->n_lanes, relays)) {
                r->next_status = 0;
                log_event(LOG_NOTICE, LOG_EV_SHARING, NULL,
                          "%u relay(s) share table '%s' with %u pipelines, %u of them this relay's; %s",
                          r->share.relays, r->cfg->postgres.table, r->share.members, r->share.own,
                          relay_sharing(r) ? "claims take key buckets, one batch in flight at a time"
                                           : "alone: claims follow each other");
        }
}

/* ordering = "single": one relay per table publishes; the others wait and take over when its
 * connection (and with it the lock) goes away. */
void relay_try_lead(struct relay *r, usec_t now) {
        char err[512];
        bool got;

        if (pg_try_leader(&r->pg, &got, relay_db_deadline(r, now), err, sizeof(err)) < 0) {
                log_warning("taking the leader lock failed: %s", err);
                r->next_leader_try = now + r->cfg->relay.poll_interval;
                return;
        }
        if (got) {
                r->leader = true;
                r->standby_said = false;
                r->wake = true;
                r->next_status = 0;
                log_event(LOG_NOTICE, LOG_EV_LEADER, NULL,
                          "publishing table '%s' (ordering = \"single\": one relay at a time)",
                          r->cfg->postgres.table);
                return;
        }
        if (!r->standby_said) {
                r->standby_said = true;
                r->next_status = 0;
                log_event(LOG_NOTICE, LOG_EV_STANDBY, NULL,
                          "standby: another relay publishes table '%s'; taking over when it goes away "
                          "(ordering = \"single\")",
                          r->cfg->postgres.table);
        }
        r->next_leader_try = now + r->cfg->relay.poll_interval;
}
