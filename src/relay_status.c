/* relay_status.c -- What the relay tells its operators as it runs: STATUS=, the journal summary, the gauges of /metrics and /ready. */
#include "relay_parts.h"

#include <inttypes.h>
#include <stdio.h>

#include "log.h"

struct lag_look {
        bool known;
        usec_t lag;
        int64_t pending;
};

static void set_lag(struct metrics_data *d, void *arg) {
        const struct lag_look *l = arg;

        d->lag_known = l->known;
        d->oldest_pending_age = (double)l->lag / USEC_PER_SEC;
        d->pending_rows = l->pending;
}

/* The gauges /metrics and /ready read, as the loop sees them now. */
static void set_gauges(struct metrics_data *d, void *arg) {
        const struct relay *r = arg;

        d->db_connected = relay_connected(r) && r->state != RELAY_CONNECTING;
        d->producer_ok = r->kafka.rk && !r->kafka.fatal;
        d->breaker_state = r->breaker.state == BREAKER_OPEN ? 2
                : r->breaker.state == BREAKER_HALF_OPEN     ? 1
                                                            : 0;
        d->paused_topics = pause_set_count_active(&r->paused_topics, now_usec());
        d->paused_keys = pause_set_count_active(&r->paused_keys, now_usec());
        d->relays = r->cfg->relay.ordering == ORDERING_KEY ? r->share.relays : 1;
        d->pipelines = r->cfg->relay.ordering == ORDERING_KEY ? r->share.members : r->n_lanes;
        d->in_flight = r->n_flight;
        d->first_bucket = r->cfg->relay.ordering == ORDERING_KEY ? share_claim(&r->share, 0, 1).first : 0;
        d->leader = r->cfg->relay.ordering != ORDERING_SINGLE || r->leader;
        d->last_batch_keys = r->last_keys;
}

void relay_publish_gauges(struct relay *r) {
        metrics_update(&r->metrics, set_gauges, r);
}

/* STATUS= every few seconds: totals, rate, lag (age of the oldest pending row), breaker and
 * database state. The figures are those of /metrics (metrics.h), read at the same moment. */
void relay_status(struct relay *r, usec_t now) {
        char status[448], lagbuf[48] = "lag ?", err[256], shared_by[128] = "";
        const char *db = relay_session_shared(r) ? "database session shared (a pooler in transaction mode?)"
                : relay_connected(r)             ? "database ok"
                                                 : "database unavailable";
        const struct metrics_totals *t = &r->metrics.d.totals;
        struct lag_look look = { 0 };
        double rate = 0;

        if (now < r->next_status)
                return;
        if (r->status_at && now > r->status_at)
                rate = (double)(t->published - r->status_published) * USEC_PER_SEC /
                        (double)(now - r->status_at);
        r->status_at = now;
        r->status_published = t->published;
        r->next_status = now + 2 * USEC_PER_SEC;
        if (pg_connected(&r->pg) &&
            pg_lag(&r->pg, &look.lag, &look.pending, relay_db_deadline(r, now), err, sizeof(err)) == 0) {
                look.known = true;
                snprintf(lagbuf, sizeof(lagbuf), "lag %.2fs", (double)look.lag / USEC_PER_SEC);
        }
        metrics_update(&r->metrics, set_lag, &look);
        relay_publish_gauges(r);

        if (!relay_connected(r)) {
                /* Nothing of the table or of the others is known: what is wrong, and the totals. */
                snprintf(status, sizeof(status), "%s, published %" PRIu64 ", dead-lettered %" PRIu64, db,
                         t->published, t->dead_lettered);
                notify_status(&r->notifier, status);
                return;
        }
        if (r->cfg->relay.ordering == ORDERING_SINGLE && !r->leader) {
                snprintf(status, sizeof(status),
                         "standby (another relay publishes), published %" PRIu64 ", %s, %s", t->published,
                         lagbuf, db);
                notify_status(&r->notifier, status);
                return;
        }
        if (r->cfg->relay.ordering == ORDERING_KEY)
                snprintf(shared_by, sizeof(shared_by),
                         ", %u relay(s) on the table (%u pipelines, %u here), %zu keys in the last batch",
                         r->share.relays, r->share.members, r->share.own, r->last_keys);
        snprintf(status, sizeof(status),
                 "published %" PRIu64 " (%.0f/s), %s, dead-lettered %" PRIu64 ", %s, %s%s", t->published,
                 rate, lagbuf, t->dead_lettered, db,
                 r->breaker.state == BREAKER_OPEN                ? "kafka unavailable (breaker open)"
                         : r->breaker.state == BREAKER_HALF_OPEN ? "kafka probing (breaker half-open)"
                         : r->state == RELAY_BACKOFF             ? "kafka failing, retrying"
                                                                 : "kafka ok",
                 shared_by);
        notify_status(&r->notifier, status);
        /* Only when something changed; a quiet period does not push the next one back (the
         * first comes right after the first batch). */
        if (now >= r->next_summary &&
            (t->published != r->last_summary.published || t->dead_lettered != r->last_summary.dead_lettered ||
             t->failed != r->last_summary.failed)) {
                log_event(LOG_INFO, LOG_EV_SUMMARY, NULL,
                          "summary: published %" PRIu64 " (+%" PRIu64 "), dead-lettered %" PRIu64
                          ", failed deliveries %" PRIu64 ", batches %" PRIu64 "%s",
                          t->published, t->published - r->last_summary.published, t->dead_lettered, t->failed,
                          t->batches, shared_by);
                r->last_summary = *t;
                r->next_summary = now + r->cfg->relay.status_interval;
        }
}

void relay_lag_unknown(struct relay *r) {
        metrics_update(&r->metrics, set_lag, &(struct lag_look){ 0 });
}
