/* relay.c -- The relay loop: claim -> publish -> finish with several batches in flight, wake on NOTIFY, reconnect, drain on stop. */
#include "relay.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cycle.h"
#include "log.h"
#include "relay_parts.h"

/* The longest the loop sleeps, so signals and the watchdog are served promptly. */
#define LOOP_SLICE (200 * USEC_PER_MSEC)
/* With batches in flight, a claim waits at most this long for a lock (cycle_start), and the
 * relay's own connection's looks too (its session's lock_timeout). */
#define CLAIM_LOCK_WAIT (200 * USEC_PER_MSEC)
#define LOOK_LOCK_WAIT (1 * USEC_PER_SEC)

static void free_config(struct relay_config *c) {
        config_free(c);
        free(c);
}

/* Called while a database call waits: the watchdog, and a stop is announced at once. */
static void watchdog_tick(void *arg) {
        relay_serve(arg);
}

int relay_init(struct relay *r, struct relay_config *cfg, struct signal_flags *sig) {
        int ret;

        memset(r, 0, sizeof(*r));
        r->cfg = cfg;
        r->sig = sig;
        ret = pg_init(&r->pg, cfg);
        if (ret < 0) {
                free_config(cfg);
                r->cfg = NULL;
                return ret;
        }
        r->pg.tick = watchdog_tick;
        r->pg.tick_arg = r;
        r->pg.cancel = &sig->hard_stop;
        /* Its looks must not wait long behind a lock either (a TRUNCATE queued on the table
         * waits for the batches in flight, which this loop finishes). */
        r->pg.lock_timeout = LOOK_LOCK_WAIT;
        r->n_lanes = cfg->relay.pipelines < 1                ? 1
                : cfg->relay.pipelines > SHARE_PIPELINES_MAX ? SHARE_PIPELINES_MAX
                                                             : (unsigned)cfg->relay.pipelines;
        for (unsigned i = 0; i < r->n_lanes; i++) {
                struct lane *l = &r->lanes[i];

                ret = pg_init(&l->pg, cfg);
                if (ret < 0) {
                        while (i-- > 0)
                                pg_done(&r->lanes[i].pg);
                        pg_done(&r->pg);
                        free_config(cfg);
                        r->cfg = NULL;
                        return ret;
                }
                l->index = i;
                l->pg.no_listen = true;
                l->pg.tick = watchdog_tick;
                l->pg.tick_arg = r;
                l->pg.cancel = &sig->hard_stop;
        }
        overlap_init(&r->overlap);
        r->last_got = -1;
        notify_init(&r->notifier);
        rng_seed(&r->rng, (uint64_t)getpid() ^ wall_usec());
        backoff_init(&r->db_backoff, cfg->retry.base, cfg->retry.cap);
        backoff_init(&r->batch_backoff, cfg->retry.base, cfg->retry.cap);
        ret = breaker_init(&r->breaker, (unsigned)cfg->breaker.failure_threshold, cfg->breaker.failure_ratio,
                           (unsigned)cfg->breaker.window, cfg->breaker.cooldown, cfg->breaker.cooldown_max);
        if (ret < 0) {
                for (unsigned i = 0; i < r->n_lanes; i++)
                        pg_done(&r->lanes[i].pg);
                pg_done(&r->pg);
                free_config(cfg);
                r->cfg = NULL;
                return ret;
        }
        /* 10 s, 20 s, … 5 min for a refused topic: an operator has to act, the relay checks
         * back. A key whose partition is out waits at least as long as a delivery may take. */
        pause_set_init(&r->paused_topics, 10 * USEC_PER_SEC, 300 * USEC_PER_SEC);
        pause_set_init(&r->paused_keys, cfg->relay.batch_timeout / 2, 300 * USEC_PER_SEC);
        /* Each paused pair costs the claim one index descent (docs/claim.md): keep the list
         * bounded. Past it a failing pair is simply claimed again, and fails again, with no
         * attempt spent. */
        r->paused_keys.max = 1000;
        pause_set_init(&r->probe_keys, cfg->breaker.cooldown_max, cfg->breaker.cooldown_max);
        share_init(&r->share);
        floor_init(&r->floor, now_usec());
        ret = metrics_init(&r->metrics, wall_usec());
        if (ret < 0) {
                breaker_done(&r->breaker);
                for (unsigned i = 0; i < r->n_lanes; i++)
                        pg_done(&r->lanes[i].pg);
                pg_done(&r->pg);
                free_config(cfg);
                r->cfg = NULL;
                return ret;
        }
        r->metrics.d.ordering = cfg->relay.ordering == ORDERING_KEY ? "key"
                : cfg->relay.ordering == ORDERING_SINGLE            ? "single"
                                                                    : "none";
        metrics_turn(&r->metrics, now_usec());
        r->probe_keys.max = 1000;
        r->state = RELAY_CONNECTING;
        return 0;
}

void relay_done(struct relay *r) {
        if (!r->cfg)
                return;
        /* Whatever ended the loop (a stop, a fatal producer error), /ready says 503 from now on,
         * through the producer's flush below. */
        atomic_store(&r->metrics.exiting, true);
        /* After a second signal nothing is waited for: what is in flight was rolled back. */
        kafka_close(&r->kafka, r->sig->hard_stop ? 0 : r->cfg->relay.drain_timeout);
        /* Batches still in flight here are the ones whose reports never came (they would write
         * into them): left as they are, the process ends. */
        for (size_t i = 0; i < r->n_flight; i++)
                if (r->flight[i]->state == CYCLE_DONE && r->flight[i]->outstanding == 0)
                        cycle_free(r->flight[i]);
        r->n_flight = 0;
        for (unsigned i = 0; i < r->n_lanes; i++)
                pg_done(&r->lanes[i].pg);
        pg_done(&r->pg);
        breaker_done(&r->breaker);
        pause_set_done(&r->paused_topics);
        pause_set_done(&r->paused_keys);
        pause_set_done(&r->probe_keys);
        free(r->floor_running);
        r->floor_running = NULL;
        /* Last: /health answers 200 until the drain is over. */
        http_stop(&r->http);
        metrics_done(&r->metrics);
        free_config(r->cfg);
        r->cfg = NULL;
}

/* SIGHUP: re-read the file; apply what can change live, keep the rest (and say so); keep
 * everything when the new file is invalid. */
static void relay_reload(struct relay *r) {
        struct relay_config *next = calloc(1, sizeof(*next));
        char err[1024], changed[512], file[300];
        const char *fields[] = { file, NULL };
        int n;

        notify_reloading(&r->notifier);
        snprintf(file, sizeof(file), "OUTBOX_CONFIG_FILE=%s", r->cfg->file);
        if (!next) {
                log_error("reload failed: out of memory; keeping the running settings");
                goto out;
        }
        if (config_load(r->cfg->file, next, err, sizeof(err)) < 0) {
                log_event(LOG_ERR, LOG_EV_RELOAD, fields, "reload failed, keeping the running settings: %s",
                          err);
                free(next);
                goto out;
        }
        n = config_keep_restart_only(r->cfg, next, changed, sizeof(changed));
        if (n < 0 ||
            breaker_configure(&r->breaker, (unsigned)next->breaker.failure_threshold,
                              next->breaker.failure_ratio, (unsigned)next->breaker.window,
                              next->breaker.cooldown, next->breaker.cooldown_max) < 0) {
                log_error("reload failed: out of memory; keeping the running settings");
                free_config(next);
                goto out;
        }
        log_set_level(next->log.level);
        r->db_backoff.base = r->batch_backoff.base = next->retry.base;
        r->db_backoff.cap = r->batch_backoff.cap = next->retry.cap;
        if (r->next_poll > now_usec() + next->relay.poll_interval)
                r->next_poll = now_usec() + next->relay.poll_interval;
        free_config(r->cfg);
        r->cfg = next;
        r->pg.cfg = next;
        for (unsigned i = 0; i < r->n_lanes; i++)
                r->lanes[i].pg.cfg = next;
        if (n > 0)
                log_warning("reload: %s changed; that takes effect only after a restart", changed);
        log_event(LOG_NOTICE, LOG_EV_RELOAD, fields, "configuration reloaded from '%s'", r->cfg->file);
out:
        if (r->ready_sent) /* before the first connection, READY=1 is still to come */
                notify_ready(&r->notifier);
}

/* Announces the stop once: STOPPING=1, and the drain's own deadline for systemd. */
static void relay_stopping(struct relay *r) {
        if (r->stop_at)
                return;
        r->stop_at = now_usec();
        notify_stopping(&r->notifier);
        notify_extend_timeout(&r->notifier, r->cfg->relay.drain_timeout + 5 * USEC_PER_SEC);
        log_event(LOG_INFO, LOG_EV_STOPPING, NULL, "stopping: finishing the batch in flight within %.0fs",
                  (double)r->cfg->relay.drain_timeout / USEC_PER_SEC);
}

usec_t relay_deadline(const struct relay *r, usec_t deadline) {
        if (r->stop_at && r->stop_at + r->cfg->relay.drain_timeout < deadline)
                return r->stop_at + r->cfg->relay.drain_timeout;
        return deadline;
}

/* The deadline of one statement between batches: the server cancels it at statement_timeout and
 * says so, and the connection stays; the client's own deadline is only for a server or a network
 * that stopped answering, after which the connection is dropped. Equal, the two raced: a status
 * look blocked on a locked table lost the connection instead of failing one statement. */
#define DB_DEADLINE_GRACE (1 * USEC_PER_SEC)

usec_t relay_db_deadline(const struct relay *r, usec_t now) {
        return now + r->cfg->postgres.statement_timeout + DB_DEADLINE_GRACE;
}

void relay_serve(struct relay *r) {
        usec_t now = now_usec();

        notify_watchdog(&r->notifier, now);
        metrics_turn(&r->metrics, now);
        if (r->sig->stop)
                relay_stopping(r);
}

/* The relay's own connection and every pipeline's. */
bool relay_connected(const struct relay *r) {
        if (!pg_connected(&r->pg))
                return false;
        for (unsigned i = 0; i < r->n_lanes; i++)
                if (!pg_connected(&r->lanes[i].pg))
                        return false;
        return true;
}

static void disconnect_all(struct relay *r) {
        pg_disconnect(&r->pg);
        for (unsigned i = 0; i < r->n_lanes; i++)
                pg_disconnect(&r->lanes[i].pg);
}

/* Other relays' pipelines share the table (ordering = "key"): claims take key buckets. */
bool relay_sharing(const struct relay *r) {
        return r->cfg->relay.ordering == ORDERING_KEY && !share_claim(&r->share, 0, 1).alone;
}

/* While the breaker is open nothing is claimed, so no row burns attempts during an outage. */
static bool breaker_gate(struct relay *r, usec_t now) {
        enum breaker_event ev;
        bool allowed = breaker_allow(&r->breaker, now, &ev);

        if (ev == BREAKER_PROBING) {
                metrics_transition(&r->metrics, METRICS_TO_HALF_OPEN);
                relay_publish_gauges(r);
                log_notice("circuit breaker half-open: probing Kafka with a few rows");
        }
        return allowed;
}

/* The breaker hears only what a batch said about Kafka: database trouble, an empty claim or a
 * batch that never reached Kafka (rows with bad headers) give a probe back untested. */
static void breaker_outcome(struct relay *r, int ret, enum batch_verdict verdict, usec_t now) {
        enum breaker_event ev;

        if (ret <= 0 || verdict == VERDICT_NONE) {
                breaker_cancel_probe(&r->breaker);
                return;
        }
        ev = breaker_record(&r->breaker, verdict == VERDICT_FAILURE, now, &r->rng);
        switch (ev) {
        case BREAKER_OPENED:
                metrics_transition(&r->metrics, METRICS_TO_OPEN);
                log_event(LOG_WARNING, LOG_EV_BREAKER_OPEN, NULL,
                          "circuit breaker opened: Kafka deliveries keep failing; claiming nothing "
                          "until a probe in %.1fs",
                          (double)(r->breaker.open_until - now) / USEC_PER_SEC);
                break;
        case BREAKER_REOPENED:
                metrics_transition(&r->metrics, METRICS_TO_REOPEN);
                log_event(LOG_WARNING, LOG_EV_BREAKER_OPEN, NULL,
                          "circuit breaker probe failed: open again, next probe in %.1fs",
                          (double)(r->breaker.open_until - now) / USEC_PER_SEC);
                break;
        case BREAKER_CLOSED_AGAIN:
                metrics_transition(&r->metrics, METRICS_TO_CLOSED);
                pause_set_clear(&r->probe_keys);
                log_event(LOG_NOTICE, LOG_EV_BREAKER_CLOSED, NULL,
                          "circuit breaker closed: Kafka deliveries succeed again");
                break;
        default:
                return;
        }
        relay_publish_gauges(r);
        r->next_status = 0; /* show the change at once */
}

static void schedule_retry(struct relay *r, struct backoff *bo, usec_t now, int level, const char *what) {
        usec_t wait = backoff_next(bo, &r->rng);
        char when[32];

        r->retry_at = now + wait;
        /* Full jitter can draw a wait near 0: say it in milliseconds then, never "0.0s". */
        if (wait < USEC_PER_SEC)
                snprintf(when, sizeof(when), "%llums",
                         (unsigned long long)(wait + USEC_PER_MSEC - 1) / USEC_PER_MSEC);
        else
                snprintf(when, sizeof(when), "%.1fs", (double)wait / USEC_PER_SEC);
        log_msg(level, "%s, retrying in %s", what, when);
}

/* The claim floor back to 0 (pg.h: claims then read from the lowest id there is). */
void relay_drop_floor(struct relay *r, usec_t now) {
        floor_reset(&r->floor, now);
        free(r->floor_running);
        r->floor_running = NULL;
        r->pg.claim_floor = 0;
}

bool relay_session_shared(const struct relay *r) {
        bool shared = r->pg.session_shared;

        for (unsigned i = 0; i < r->n_lanes; i++)
                shared = shared || r->lanes[i].pg.session_shared;
        return shared;
}

/* The relay's own connection, then every pipeline's: all or none (a half-connected relay would
 * only wait for the rest). */
static int connect_all(struct relay *r, usec_t now, char *err, size_t errsz) {
        int ret;

        /* What a connection found last time must not outlive this attempt (a failure stops it
         * before the pipelines' connections are tried). */
        r->pg.session_shared = false;
        for (unsigned i = 0; i < r->n_lanes; i++)
                r->lanes[i].pg.session_shared = false;
        ret = pg_connect(&r->pg, now + r->cfg->postgres.connect_timeout, err, errsz);

        for (unsigned i = 0; ret >= 0 && i < r->n_lanes; i++)
                ret = pg_connect(&r->lanes[i].pg, now_usec() + r->cfg->postgres.connect_timeout, err, errsz);
        if (ret < 0)
                disconnect_all(r);
        return ret;
}

/* Returns -ENOPKG when the table lacks a migration before the relay was ever ready: that is
 * setup, not an outage, and the relay stops (exit 78). Once it has run, the same finding is
 * retried like any connection failure (someone is changing the table under it). */
static int try_connect(struct relay *r, usec_t now) {
        char err[512];
        int ret = connect_all(r, now, err, sizeof(err));

        if (ret == -ENOPKG && !r->ready_sent) {
                log_error("%s", err);
                return ret;
        }
        if (ret < 0) {
                char what[600];

                snprintf(what, sizeof(what), "cannot connect to PostgreSQL: %s", err);
                /* Behind a pooler in transaction mode retrying cannot help until someone changes the
                 * setup: an error, not a notice. */
                schedule_retry(r, &r->db_backoff, now_usec(), relay_session_shared(r) ? LOG_ERR : LOG_NOTICE,
                               what);
                /* A slow start that is still trying: ask systemd for the time it needs. */
                if (!r->ready_sent)
                        notify_extend_timeout(&r->notifier,
                                              r->retry_at - now_usec() + r->cfg->postgres.connect_timeout +
                                                      5 * USEC_PER_SEC);
                return 0;
        }
        if (!r->source[0])
                log_info("messages carry outbox-source '%s' (relay.source%s)", r->pg.source,
                         r->cfg->relay.source[0] ? "" : " not set: derived from the database and the table");
        else if (strcmp(r->source, r->pg.source) != 0)
                /* The first messages after a reconnect are the repeats of what was in doubt: they
                 * must carry the source their first copies had, or an inbox applies them twice. */
                log_warning(
                        "the table now derives outbox-source '%s' (the database or the table was renamed?); "
                        "messages keep '%s' until a restart: set relay.source to '%s' before restarting, or "
                        "consumers that deduplicate on it take the repeats for new events",
                        r->pg.source, r->source, r->source);
        if (!r->source[0])
                snprintf(r->source, sizeof(r->source), "%s", r->pg.source);
        if (r->pg.schema_notes[0] && !r->schema_said) {
                log_notice("table '%s' runs without: %s", r->cfg->postgres.table, r->pg.schema_notes);
                r->schema_said = true;
        }
        if (r->ready_sent)
                metrics_reconnected(&r->metrics);
        if (r->ready_sent)
                log_event(LOG_NOTICE, LOG_EV_DB_BACK, NULL,
                          "connected to PostgreSQL again after %u failed attempts", r->db_backoff.attempt);
        else
                log_info("connected to PostgreSQL (%u pipeline(s) and one connection listening on '%s')",
                         r->n_lanes, r->cfg->postgres.channel);
        backoff_reset(&r->db_backoff);
        if (r->cfg->relay.ordering == ORDERING_KEY) {
                /* A member slot per pipeline and a relay slot, so the pipelines start their claims
                 * at different key buckets and know how deep to look. Without one this relay still
                 * keeps order (the bucket locks do that); it only counts itself in. */
                if (pg_join(&r->pg, true, relay_db_deadline(r, now_usec()), err, sizeof(err)) < 0)
                        log_warning("no relay slot on table '%s': %s", r->cfg->postgres.table, err);
                for (unsigned i = 0; i < r->n_lanes; i++)
                        if (pg_join(&r->lanes[i].pg, false, relay_db_deadline(r, now_usec()), err,
                                    sizeof(err)) < 0)
                                log_warning("no member slot on table '%s': %s", r->cfg->postgres.table, err);
                r->members_looked_at = 0;
        }
        /* A new session may be on another server (a promoted standby), and the sequence may have
         * changed while we were away: the floor starts again from 0. */
        relay_drop_floor(r, now);
        if (!r->pg.id_seq && !r->floor_said) {
                log_notice("claims read table '%s' from the start of its pending index: %s (docs/claim.md, "
                           "\"The claim floor\")",
                           r->cfg->postgres.table, r->pg.floor_off);
                r->floor_said = true;
        }
        r->leader = false; /* a session lock dies with its connection */
        r->next_leader_try = 0;
        r->state = RELAY_IDLE;
        r->wake = true; /* anything may have been written while we were away */
        return 0;
}

/* Sleeps until the database socket is readable or `timeout` passes. */
static void wait_for_work(struct relay *r, usec_t timeout) {
        struct pollfd p = { .fd = pg_socket(&r->pg), .events = POLLIN };
        int n;

        if (timeout > LOOP_SLICE)
                timeout = LOOP_SLICE;
        /* A notification may already sit in libpq's buffer (read while another query ran):
         * poll() on the socket would not see it. */
        if (p.fd >= 0 && pg_take_notifies(&r->pg) > 0) {
                r->wake = true;
                return;
        }
        if (timeout == 0)
                return;
        if (p.fd < 0) {
                kafka_poll(&r->kafka, (int)(timeout / USEC_PER_MSEC));
                return;
        }
        /* librdkafka delivers its reports only when polled; between batches nothing is in
         * flight, so waiting on the database socket alone is enough. */
        /* Readable, or closed (POLLHUP, POLLERR): reading says which. */
        if (poll(&p, 1, (int)(timeout / USEC_PER_MSEC)) > 0 && p.revents) {
                n = pg_consume_notifies(&r->pg);
                if (n > 0)
                        r->wake = true;
        }
}

/* /health must say "stuck" no sooner than systemd's watchdog would act: its WATCHDOG_USEC, or
 * the units' WatchdogSec (30 s) without one. */
#define ALIVE_WITHOUT_WATCHDOG (30 * USEC_PER_SEC)

static int start_http(struct relay *r) {
        char err[512];
        int ret;

        if (!r->cfg->http.listen[0]) {
                log_info("HTTP is off (http.listen = \"\")");
                return 0;
        }
        r->probe = (struct probe_source){
                .metrics = &r->metrics,
                .stop = &r->sig->stopping,
                .alive_within = r->notifier.watchdog_interval ? 2 * r->notifier.watchdog_interval
                                                              : ALIVE_WITHOUT_WATCHDOG,
                .build = { VERSION, rd_kafka_version_str(), pg_lib_version() },
        };
        relay_publish_gauges(r);
        ret = http_start(&r->http, r->cfg->http.listen, (unsigned)r->cfg->http.connection_limit,
                         (unsigned)((r->cfg->http.timeout + USEC_PER_SEC - 1) / USEC_PER_SEC), probe_answer,
                         &r->probe, err, sizeof(err));
        if (ret < 0) {
                log_error("cannot serve HTTP (http.listen): %s", err);
                return ret;
        }
        /* Not "ready" in this line: tests and operators wait for the word once connected. */
        log_info("serving HTTP on %s (health, readiness and metrics)", r->http.bound);
        return 0;
}

/* Every batch in flight given up: rolled back, its rows stay pending (sent again later: the
 * duplicates the design allows after a fault). */
static void abandon_all(struct relay *r) {
        for (size_t i = r->n_flight; i-- > 0;) {
                r->flight[i]->lane->busy = false;
                cycle_abandon(r, r->flight[i]);
        }
        r->n_flight = 0;
        overlap_init(&r->overlap);
}

/* What a finished batch (or a failed claim) says for the loop: the breaker, and when to go on. */
static int after_batch(struct relay *r, int ret, enum batch_verdict verdict, usec_t now) {
        breaker_outcome(r, ret, verdict, now);
        if (ret == -ECANCELED)
                return ret;
        if (ret == -ENOTRECOVERABLE) {
                kafka_poll(&r->kafka, 0); /* the error callback may still hold the reason */
                log_error("the Kafka producer cannot go on, exiting for a restart: %s",
                          r->kafka.fatal_reason[0] ? r->kafka.fatal_reason
                                                   : "a delivery report said it is broken");
                return ret;
        }
        if (ret > 0 && verdict == VERDICT_FAILURE) {
                r->state = RELAY_BACKOFF;
                schedule_retry(r, &r->batch_backoff, now, LOG_NOTICE, "Kafka delivery failing");
                r->wake = true;
        } else if (ret < 0) {
                /* Database trouble: a lost connection is re-made at the top of the loop; a failing
                 * statement (or anything else) backs off rather than spin. */
                if (relay_connected(r)) {
                        r->state = RELAY_BACKOFF;
                        schedule_retry(r, &r->db_backoff, now, relay_session_shared(r) ? LOG_ERR : LOG_NOTICE,
                                       "the batch failed in the database");
                        r->wake = true;
                }
        } else if (ret > 0) {
                if (r->state == RELAY_BACKOFF)
                        log_notice("deliveries succeed again");
                r->state = RELAY_IDLE;
                backoff_reset(&r->batch_backoff);
                backoff_reset(&r->db_backoff);
        }
        return 0;
}

/* Batches claimed and not yet done (the flight may keep done ones a while: see reap()). */
static size_t active(const struct relay *r) {
        size_t n = 0;

        for (size_t i = 0; i < r->n_flight; i++)
                n += r->flight[i]->state != CYCLE_DONE;
        return n;
}

static bool claiming(const struct relay *r) {
        for (size_t i = 0; i < r->n_flight; i++)
                if (r->flight[i]->state == CYCLE_CLAIMING)
                        return true;
        return false;
}

/* A batch is over (committed, failed, or nothing claimed): its lane is free, the chain hears of
 * it, and the breaker and the back-off of what it said. */
static int batch_over(struct relay *r, struct cycle *c, int ret, enum batch_verdict verdict, bool left) {
        if (ret > 0 && r->metrics.d.totals.batches == 1)
                r->next_status = 0; /* the first batch: STATUS= and the summary say so at once */
        c->state = CYCLE_DONE;
        c->lane->busy = false;
        overlap_finished(&r->overlap, left || ret < 0, active(r));
        return after_batch(r, ret, verdict, now_usec());
}

/* Frees the batches that are done, but not while a claim is in progress: the rows it brings may
 * follow theirs (batch_follow), and must see how they ended. (A batch done before a claim was
 * sent is no concern of that claim: overlap.h knew how it ended, and claims from the floor
 * after one that left rows pending.) So at most relay.pipelines - 1 batches wait here. */
static void reap(struct relay *r) {
        if (claiming(r))
                return;
        for (size_t i = 0; i < r->n_flight;) {
                struct cycle *c = r->flight[i];

                if (c->state != CYCLE_DONE) {
                        i++;
                        continue;
                }
                memmove(&r->flight[i], &r->flight[i + 1], (r->n_flight - i - 1) * sizeof(r->flight[0]));
                r->n_flight--;
                if (c->outstanding == 0)
                        cycle_free(c); /* else late reports still write into it: we exit */
        }
}

static int claim_more(struct relay *r);

/* A claim's rows came (or none, or an error): the chain hears of it, and when to claim again. */
static int claimed(struct relay *r, struct cycle *c, int ret) {
        usec_t now = now_usec();
        int64_t proven = c->proven;
        int limit = c->limit;

        if (ret == -EAGAIN) {
                /* Claim again once a batch in flight is done (from the floor). */
                overlap_claimed(&r->overlap, 0, (size_t)limit, 0, false, proven, true);
                r->wake = true;
                return batch_over(r, c, 0, VERDICT_NONE, false);
        }
        if (ret <= 0) {
                overlap_claimed(&r->overlap, 0, (size_t)limit, 0, false, proven,
                                r->cfg->relay.ordering != ORDERING_NONE);
                r->last_got = 0;
        } else {
                overlap_claimed(&r->overlap, (size_t)ret, (size_t)limit, c->highest, c->covers, proven,
                                r->cfg->relay.ordering != ORDERING_NONE);
                r->last_got = ret;
        }
        /* A full batch or a probe that found rows: more at once (as overlap.h allows). Sharing
         * the table in key order, a short batch may only mean the rest is in the others' open
         * batches (share.c says when); otherwise a notification or the poll. */
        if (ret >= limit)
                r->backlog_at = now;
        if (ret >= limit || (c->probe && ret > 0)) {
                r->wake = true;
        } else {
                usec_t again = r->cfg->relay.poll_interval;

                if (r->cfg->relay.ordering == ORDERING_KEY)
                        again = share_next_wait(&r->share, ret > 0 ? (size_t)ret : 0, r->last_in_view, limit,
                                                r->cfg->relay.poll_interval);
                if (again == 0) {
                        r->wake = true;
                        r->backlog_at = now;
                } else {
                        r->next_poll = now + again;
                }
        }
        if (ret <= 0)
                return batch_over(r, c, ret, VERDICT_NONE, false);
        return 0;
}

/* One step of every batch in flight, oldest first: rows of a claim that came are sent (after the
 * next claim is on its way, so the database works while this loop produces), a batch whose
 * reports are in is planned and its finish sent, a finish that came back ends the batch. */
static int step_flight(struct relay *r) {
        for (size_t i = 0; i < r->n_flight; i++) {
                struct cycle *c = r->flight[i];
                bool left;
                int ret = 0;

                switch (c->state) {
                case CYCLE_CLAIMING:
                        ret = cycle_claimed(r, c);
                        if (ret == -EINPROGRESS)
                                break;
                        ret = claimed(r, c, ret);
                        if (ret == 0 && c->state == CYCLE_FLIGHT) {
                                ret = claim_more(r);
                                cycle_send(r, c);
                        }
                        break;
                case CYCLE_FLIGHT:
                        if (!cycle_ready(r, c, now_usec()))
                                break;
                        ret = cycle_finish_start(r, c, &c->verdict);
                        /* Planned: the rows of later batches that waited for it are decided. */
                        for (size_t j = i + 1; j < r->n_flight; j++)
                                if (r->flight[j]->state == CYCLE_FLIGHT)
                                        cycle_resolve(r, r->flight[j]);
                        if (ret < 0)
                                ret = batch_over(r, c, ret, c->verdict, true);
                        break;
                case CYCLE_FINISHING:
                        ret = cycle_finished(r, c, &left);
                        if (ret == -EINPROGRESS) {
                                ret = 0;
                                break;
                        }
                        ret = batch_over(r, c, ret, ret < 0 ? VERDICT_NONE : c->verdict, left);
                        break;
                case CYCLE_DONE:
                        break;
                }
                if (ret < 0 && ret != -EINPROGRESS)
                        return ret;
        }
        reap(r);
        return 0;
}

static struct lane *free_lane(struct relay *r) {
        for (unsigned i = 0; i < r->n_lanes; i++)
                if (!r->lanes[i].busy)
                        return &r->lanes[i];
        return NULL;
}

/* Sends the next claim when claims are due and overlap.h allows one more batch in flight; one
 * claim at a time (a chain's next start is the newest claim's highest id). Nothing may come
 * between the breaker's gate and the claim: in half-open state the gate hands out the one probe,
 * and only the batch's outcome gives it back. */
static int claim_more(struct relay *r) {
        usec_t now = now_usec();
        struct overlap_rules rules;
        struct overlap_next next;
        struct lane *lane;
        struct cycle *c;
        bool probe;
        int limit, ret;

        r->claim_held = false;
        if (r->stop_at || r->sig->stop || claiming(r))
                return 0;
        if (!r->wake && now < r->next_poll)
                return 0;
        if (r->state == RELAY_BACKOFF && now < r->retry_at)
                return 0;
        rules = (struct overlap_rules){
                .in_flight = active(r),
                .pipelines = r->n_lanes,
                .sharing = relay_sharing(r),
                /* A probe goes alone; so does a claim while something is paused (its form skips
                 * rows, so nothing can follow it) or after it. */
                .serial = r->breaker.state != BREAKER_CLOSED ||
                        pause_set_count_active(&r->paused_topics, now) > 0 ||
                        pause_set_count_active(&r->paused_keys, now) > 0,
        };
        next = overlap_next(&r->overlap, &rules);
        if (next.form == OVERLAP_WAIT || !(lane = free_lane(r))) {
                r->claim_held = true;
                return 0;
        }
        if (!breaker_gate(r, now))
                return 0;
        reap(r);
        probe = r->breaker.state == BREAKER_HALF_OPEN;
        limit = probe && r->cfg->relay.batch_size > CYCLE_PROBE_ROWS ? CYCLE_PROBE_ROWS
                                                                     : r->cfg->relay.batch_size;
        r->wake = false;
        /* With batches in flight this loop must not wait long for a lock: it is the one that
         * finishes them (a TRUNCATE queued on the table waits for them, and the claim behind it). */
        ret = cycle_claim(r, lane, limit, probe, next.form == OVERLAP_CHAIN ? next.start : r->floor.at,
                          active(r) ? CLAIM_LOCK_WAIT : 0, now, &c);
        if (ret < 0) {
                overlap_claimed(&r->overlap, 0, (size_t)limit, 0, false, 0, true);
                return after_batch(r, ret, VERDICT_NONE, now_usec());
        }
        c->proven = r->pg.id_seq ? r->floor.proven : 0;
        c->floor_epoch = r->floor.epoch;
        lane->busy = true;
        r->flight[r->n_flight++] = c;
        /* Without other batches in flight nothing is gained by not waiting for it. */
        if (active(r) == 1) {
                ret = cycle_claimed(r, c);
                while (ret == -EINPROGRESS) {
                        struct pollfd p = { .fd = pg_socket(&lane->pg), .events = pg_poll_events(&lane->pg) };

                        if (p.fd < 0 || poll(&p, 1, 1000) < 0 || (relay_serve(r), r->sig->hard_stop))
                                break;
                        ret = cycle_claimed(r, c);
                }
                if (ret != -EINPROGRESS) {
                        ret = claimed(r, c, ret);
                        if (ret == 0 && c->state == CYCLE_FLIGHT) {
                                ret = claim_more(r);
                                cycle_send(r, c);
                        }
                        return ret;
                }
        }
        return 0;
}

/* With batches in flight: waits until a claim or a finish comes back, Kafka has reports, a
 * notification comes, or `timeout` passes. One batch alone waiting for Kafka is flushed instead:
 * what linger.ms holds back goes at once. */
static void wait_in_flight(struct relay *r, usec_t timeout) {
        struct pollfd p[SHARE_PIPELINES_MAX + 2];
        size_t n = 0, db_ops = 0, listening = SIZE_MAX, events = SIZE_MAX;
        int ms;

        if (pg_connected(&r->pg) && pg_take_notifies(&r->pg) > 0)
                r->wake = true;
        if (timeout > 50 * USEC_PER_MSEC)
                timeout = 50 * USEC_PER_MSEC;
        ms = (int)((timeout + USEC_PER_MSEC - 1) / USEC_PER_MSEC);
        for (unsigned i = 0; i < r->n_lanes; i++)
                if (pg_poll_events(&r->lanes[i].pg) && pg_socket(&r->lanes[i].pg) >= 0) {
                        p[n++] = (struct pollfd){ .fd = pg_socket(&r->lanes[i].pg),
                                                  .events = pg_poll_events(&r->lanes[i].pg) };
                        db_ops++;
                }
        if (db_ops == 0 && active(r) == 1) {
                kafka_flush(&r->kafka, ms);
                return;
        }
        if (pg_socket(&r->pg) >= 0) {
                listening = n;
                p[n++] = (struct pollfd){ .fd = pg_socket(&r->pg), .events = POLLIN };
        }
        if (kafka_event_fd(&r->kafka) >= 0) {
                events = n;
                p[n++] = (struct pollfd){ .fd = kafka_event_fd(&r->kafka), .events = POLLIN };
        }
        if (kafka_has_events(&r->kafka))
                ms = 0;
        /* Each socket is read only when poll() says so: a read on every turn (the loop turns
         * for every part of a claim's result that arrives) cost a system call each. */
        if (poll(p, n, ms) > 0) {
                if (listening != SIZE_MAX && p[listening].revents && pg_connected(&r->pg) &&
                    pg_consume_notifies(&r->pg) > 0)
                        r->wake = true;
                if (events != SIZE_MAX && p[events].revents)
                        kafka_event_seen(&r->kafka);
        }
        kafka_poll(&r->kafka, 0);
}

int relay_run(struct relay *r) {
        char err[512];
        rd_kafka_conf_t *kconf;
        int ret;

        kconf = config_kafka_conf(r->cfg, err, sizeof(err));
        if (!kconf) {
                log_error("%s", err);
                return -EINVAL;
        }
        ret = kafka_open(&r->kafka, kconf, err, sizeof(err));
        if (ret < 0) {
                rd_kafka_conf_destroy(kconf);
                log_error("cannot create the Kafka producer: %s", err);
                return ret;
        }
        ret = start_http(r);
        if (ret < 0)
                return ret;

        /* On a stop request nothing more is claimed, and the loop turns until the batches in
         * flight are finished (within the drain timeout: relay_deadline). */
        while (!r->sig->stop || active(r) > 0) {
                usec_t now = now_usec(), wait;

                if (r->sig->hard_stop) {
                        abandon_all(r);
                        break;
                }
                if (r->sig->stop)
                        relay_stopping(r);
                notify_watchdog(&r->notifier, now);
                metrics_turn(&r->metrics, now);
                if (r->sig->reload) {
                        r->sig->reload = 0;
                        relay_reload(r);
                }
                kafka_poll(&r->kafka, 0);
                if (r->kafka.fatal) {
                        log_error("fatal Kafka producer error, exiting for a restart: %s",
                                  r->kafka.fatal_reason);
                        abandon_all(r);
                        return -ENOTRECOVERABLE;
                }
                relay_publish_gauges(r);
                if (r->kafka.last_error_new) {
                        r->kafka.last_error_new = false;
                        log_event(r->kafka.last_error_level, LOG_EV_KAFKA_ERROR, NULL, "kafka: %s",
                                  r->kafka.last_error);
                }

                if (!relay_connected(r)) {
                        if (r->state != RELAY_CONNECTING) {
                                log_event(LOG_WARNING, LOG_EV_DB_LOST, NULL,
                                          "lost the PostgreSQL connection, reconnecting");
                                /* no lag figures until a look can read them again */
                                relay_lag_unknown(r);
                                r->state = RELAY_CONNECTING;
                                /* One connection lost is usually all (a restart, a cut link):
                                 * give up every batch in flight and connect afresh. */
                                abandon_all(r);
                                disconnect_all(r);
                                r->retry_at = now;
                        }
                        if (r->sig->stop)
                                break; /* nothing in flight any more */
                        if (now >= r->retry_at) {
                                ret = try_connect(r, now);
                                if (ret < 0) {
                                        abandon_all(r);
                                        return ret;
                                }
                        } else
                                wait_for_work(r, r->retry_at - now);
                        /* systemctl status says why nothing moves. */
                        if (!relay_connected(r))
                                relay_status(r, now);
                        if (relay_connected(r) && !r->ready_sent) {
                                notify_ready(&r->notifier);
                                r->ready_sent = true;
                                log_event(LOG_INFO, LOG_EV_READY, NULL, "ready");
                        }
                        continue;
                }

                if (r->cfg->relay.ordering == ORDERING_KEY &&
                    now >= share_look_due(&r->share, r->members_looked_at, r->members_look_failed,
                                          r->backlog_at, now))
                        relay_look_at_members(r, now);
                if (r->pg.requeued) {
                        /* Put back in line: they may lie below the floor, and below the chain of
                         * batches in flight. Look now; claim from the floor once they are done. */
                        r->pg.requeued = false;
                        r->floor_requeued = true;
                        floor_requeued(&r->floor, now);
                        overlap_break(&r->overlap);
                }
                if (r->pg.id_seq) {
                        int64_t proven = r->floor.proven;

                        relay_step_floor(r, now);
                        if (r->floor.proven < proven)
                                overlap_break(&r->overlap); /* the floor went back */
                }
                if (r->cfg->relay.ordering == ORDERING_SINGLE && !r->leader) {
                        if (now >= r->next_leader_try)
                                relay_try_lead(r, now);
                        if (!r->leader) {
                                relay_status(r, now);
                                wait_for_work(r, r->next_leader_try > now ? r->next_leader_try - now : 0);
                                continue;
                        }
                }
                if (r->cfg->relay.finish == FINISH_MARK && r->cfg->relay.retention &&
                    now >= r->next_retention) {
                        relay_run_retention(r, now);
                        continue;
                }

                ret = step_flight(r);
                if (ret == 0)
                        ret = claim_more(r);
                if (ret < 0) {
                        abandon_all(r);
                        return ret;
                }
                now = now_usec();
                relay_status(r, now);
                if (active(r) > 0) {
                        struct overlap_pace pace = {
                                .now = now,
                                .stopping = r->stop_at || r->sig->stop,
                                .claiming = claiming(r),
                                .held = r->claim_held,
                                .wake = r->wake,
                                .next_poll = r->next_poll,
                                .not_before = r->state == RELAY_BACKOFF ? r->retry_at : 0,
                        };

                        wait_in_flight(r, overlap_pace(&pace, 50 * USEC_PER_MSEC));
                        continue;
                }
                if (r->sig->stop)
                        break;
                if (r->state == RELAY_BACKOFF && now < r->retry_at) {
                        wait_for_work(r, r->retry_at - now);
                        continue;
                }
                if (r->breaker.state == BREAKER_OPEN && (r->wake || now >= r->next_poll)) {
                        wait_for_work(r, r->breaker.open_until > now ? r->breaker.open_until - now : 0);
                        continue;
                }
                /* Due but nothing claimed (the breaker's gate): a moment, not a spin. */
                wait = r->wake ? USEC_PER_MSEC : r->next_poll > now ? r->next_poll - now : 0;
                if (notify_watchdog_due(&r->notifier, now) < wait)
                        wait = notify_watchdog_due(&r->notifier, now);
                wait_for_work(r, wait);
        }
        relay_stopping(r);
        if (r->sig->hard_stop)
                return -ECANCELED;
        log_info("drained: published %" PRIu64 ", dead-lettered %" PRIu64, r->metrics.d.totals.published,
                 r->metrics.d.totals.dead_lettered);
        return 0;
}
