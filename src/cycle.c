/* cycle.c -- One batch's life in steps the loop interleaves with other batches': claim and send what may go, send what waited for earlier batches, then re-send suspects alone, plan, finish; the rules live in batch.c and overlap.c. */
#include "cycle.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "headers.h"
#include "log.h"
#include "message.h"

void cycle_free(struct cycle *c) {
        if (!c)
                return;
        for (size_t i = 0; c->headers && i < c->claimed.n; i++)
                free(c->headers[i].error);
        free(c->headers);
        free(c->pairs);
        pg_batch_clear(&c->claimed);
        batch_free(&c->b);
        free(c->slots);
        free(c);
}

/* Reads every row's headers (one buffer for the batch's pairs: they fit in the text they come
 * from). A row whose headers cannot be sent gets its reason, and the batch dead-letters it.
 * Returns 0 or -ENOMEM. */
static int expand_headers(struct cycle *c) {
        size_t total = 1;

        for (size_t i = 0; i < c->claimed.n; i++)
                total += c->claimed.rows[i].headers_len;
        c->pairs = malloc(total);
        c->headers = calloc(c->claimed.n, sizeof(*c->headers));
        if (!c->pairs || !c->headers)
                return -ENOMEM;
        for (size_t i = 0; i < c->claimed.n; i++) {
                c->headers[i].json = c->claimed.rows[i].headers;
                c->headers[i].len = c->claimed.rows[i].headers_len;
        }
        return headers_expand_rows(c->headers, c->claimed.n, c->pairs);
}

/* Produces row i. A full local queue is back-pressure: serve reports, the watchdog and signals
 * until there is room, the deadline passes or a second signal comes. */
static rd_kafka_resp_err_t produce_row(struct relay *r, struct cycle *c, size_t i) {
        const struct pg_row *row = &c->claimed.rows[i];
        const struct headers_row *hd = &c->headers[i];

        for (;;) {
                rd_kafka_headers_t *h = NULL;
                rd_kafka_resp_err_t e;
                int ret = message_headers(hd->out_len ? c->pairs + hd->at : NULL, hd->out_len, row->id,
                                          r->source, &h);

                if (ret == -EBADMSG) {
                        c->b.rows[i].map_error = "headers could not be expanded";
                        return RD_KAFKA_RESP_ERR_NO_ERROR;
                }
                if (ret < 0)
                        return RD_KAFKA_RESP_ERR__FAIL;
                e = kafka_produce(&r->kafka, row->topic, row->key, row->key_len, row->payload,
                                  row->payload_len, row->timestamp_ms, h, &c->slots[i], &c->outstanding,
                                  c->round_at);
                if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
                        return e;
                rd_kafka_headers_destroy(h);
                if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL || r->sig->hard_stop ||
                    now_usec() >= relay_deadline(r, c->publish_deadline))
                        return e;
                kafka_poll(&r->kafka, 20);
                relay_serve(r);
        }
}

/* Sends row i (alone: a re-send with nothing else in flight) and records what produce() said. */
static void send_row(struct relay *r, struct cycle *c, size_t i, bool alone) {
        rd_kafka_resp_err_t e = produce_row(r, c, i);

        if (c->b.rows[i].map_error)
                return; /* cannot become a message: the plan dead-letters it */
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
                batch_sent(&c->b, i, alone);
        else
                batch_refused(&c->b, i, e);
}

/* The rows whose reports came since the last look take them in (other batches read them:
 * batch_send_answer). */
static void take_reports(struct relay *r, struct cycle *c) {
        if (c->seen == r->kafka.reports)
                return;
        c->seen = r->kafka.reports;
        for (size_t i = 0; i < c->b.n; i++)
                if (c->b.rows[i].state == ROW_IN_FLIGHT && c->slots[i].reported)
                        batch_reported(&c->b, i, c->slots[i].err, c->slots[i].partition);
}

/* Serves delivery reports until none of this batch's is outstanding or the deadline passes, purges
 * what is left (every batch's: the producer's queue is one), and records every report.
 * -ENOTRECOVERABLE when reports are still due after the purge (they would write into this cycle's
 * slots: the caller must keep them alive) or the producer broke; -ECANCELED on a second signal. */
static int await_reports(struct relay *r, struct cycle *c) {
        kafka_poll(&r->kafka, 0);
        while (c->outstanding > 0 && !r->sig->hard_stop && !r->kafka.fatal) {
                usec_t now = now_usec(), d = relay_deadline(r, c->publish_deadline);
                int ms;

                if (now >= d)
                        break;
                ms = (int)((d - now) / USEC_PER_MSEC > 100 ? 100 : (d - now) / USEC_PER_MSEC + 1);
                /* Alone in the producer, flush: what linger.ms holds back goes at once. With other
                 * batches' messages in flight flush would wait for theirs too. */
                if (r->kafka.pending == c->outstanding)
                        kafka_flush(&r->kafka, ms);
                else
                        kafka_poll(&r->kafka, ms);
                relay_serve(r);
        }
        if (c->outstanding > 0) {
                /* Purged messages report at once, as purge errors; bounded, like everything. */
                usec_t until = now_usec() + 5 * USEC_PER_SEC;

                kafka_purge_begin(&r->kafka);
                while (c->outstanding > 0 && !r->sig->hard_stop && now_usec() < until) {
                        kafka_poll(&r->kafka, 50);
                        relay_serve(r);
                }
        }
        if (c->outstanding > 0) {
                snprintf(r->kafka.fatal_reason, sizeof(r->kafka.fatal_reason),
                         "%zu delivery reports missing after purging", c->outstanding);
                return -ENOTRECOVERABLE;
        }
        for (size_t i = 0; i < c->b.n; i++) {
                const struct kafka_delivery *d = &c->slots[i];

                if (c->b.rows[i].state != ROW_IN_FLIGHT)
                        continue;
                if (d->reported)
                        batch_reported(&c->b, i, d->err, d->partition);
                else
                        batch_unreported(&c->b, i);
        }
        c->seen = r->kafka.reports;
        if (r->sig->hard_stop)
                return -ECANCELED;
        if (r->kafka.fatal)
                return -ENOTRECOVERABLE;
        return 0;
}

/* The claim leaves out paused topics and (topic, key) pairs; a probe also the keys earlier
 * probes failed on. */
static int claim(struct relay *r, struct lane *lane, int limit, bool probe, int64_t start, usec_t lock_wait,
                 struct cycle *c, usec_t now, char *err, size_t errsz) {
        size_t n_keys = r->paused_keys.n + (probe ? r->probe_keys.n : 0);
        _cleanup_free_ const char **topics = calloc(r->paused_topics.n + 1, sizeof(char *));
        _cleanup_free_ const char **key_topics = calloc(n_keys + 1, sizeof(char *));
        _cleanup_free_ const char **keys = calloc(n_keys + 1, sizeof(char *));
        struct pg_skip skip = { .topics = topics, .key_topics = key_topics, .keys = keys };
        struct pg_order order = { .depth = limit, .start = start, .lock_wait = lock_wait };

        if (!topics || !key_topics || !keys) {
                snprintf(err, errsz, "claim: out of memory");
                return -ENOMEM;
        }
        skip.n_topics = pause_set_active(&r->paused_topics, now, topics, NULL, r->paused_topics.n);
        skip.n_keys = pause_set_active(&r->paused_keys, now, key_topics, keys, r->paused_keys.n);
        if (probe)
                skip.n_keys += pause_set_active(&r->probe_keys, now, key_topics + skip.n_keys,
                                                keys + skip.n_keys, r->probe_keys.n);
        c->covers = skip.n_topics == 0 && skip.n_keys == 0;
        if (r->cfg->relay.ordering == ORDERING_KEY) {
                /* Where our buckets start, and deep enough to find a batch among the rows the
                 * other relays' open batches hold. */
                struct share_claim sc = share_take(&r->share, lane->index, limit);

                order = (struct pg_order){ .first = sc.first,
                                           .depth = sc.depth,
                                           .alone = sc.alone,
                                           .start = start,
                                           .lock_wait = lock_wait,
                                           .buckets = sc.buckets,
                                           .skip_depth = sc.skip_depth };
                c->covers = c->covers && sc.alone;
        }
        return pg_claim_start(&lane->pg, limit, &skip, &order, &c->claimed, c->deadline, err, errsz);
}

/* Carries out the plan's pauses: refused topics and held-back keys wait, what was delivered is
 * forgotten (so a later pause starts short). Says so once per pause. */
static void apply_pauses(struct relay *r, const struct batch *b, usec_t now) {
        size_t keys_paused = 0;
        usec_t key_wait = 0;
        const char *key_reason = NULL, *key_topic = NULL;

        for (size_t i = 0; i < b->n; i++) {
                const struct batch_row *row = &b->rows[i];
                usec_t w;

                if (row->action == ACT_FINISH) {
                        if (r->paused_topics.n && pause_set_forget(&r->paused_topics, row->topic, NULL))
                                log_notice("topic '%s' accepted by Kafka again", row->topic);
                        if (r->paused_keys.n && row->key)
                                pause_set_forget(&r->paused_keys, row->topic, row->key);
                        continue;
                }
                if (row->pause_topic && (w = pause_set_add(&r->paused_topics, row->topic, NULL, now))) {
                        char field[300];
                        const char *fields[] = { field, NULL };

                        snprintf(field, sizeof(field), "OUTBOX_TOPIC=%s", row->topic);
                        log_event(LOG_ERR, LOG_EV_KAFKA_ERROR, fields,
                                  "topic '%s' refused by Kafka (%s); its rows stay pending, other "
                                  "topics go on; trying the topic again in %.0fs",
                                  row->topic, row->reason, (double)w / USEC_PER_SEC);
                }
                if (row->pause_key && (w = pause_set_add(&r->paused_keys, row->topic, row->key, now))) {
                        keys_paused++;
                        key_wait = w > key_wait ? w : key_wait;
                        key_reason = row->reason;
                        key_topic = row->topic;
                }
                if (row->probe_failed)
                        pause_set_add(&r->probe_keys, row->topic, row->key, now);
        }
        if (keys_paused)
                log_warning("a partition of topic '%s' takes no messages (%s) while others do: "
                            "holding back %zu keys for up to %.0fs, the rest goes on",
                            key_topic, key_reason, keys_paused, (double)key_wait / USEC_PER_SEC);
}

/* The finishing transaction's lists, from the plan. */
static int finish(struct relay *r, struct cycle *c, char *err, size_t errsz) {
        const struct batch *b = &c->b;
        _cleanup_free_ pg_tid *done = calloc(b->n, sizeof(*done));
        _cleanup_free_ struct pg_failure *fails = calloc(b->n, sizeof(*fails));
        size_t n_done = 0, n_fails = 0;
        usec_t deadline = c->deadline;

        if (!done || !fails) {
                snprintf(err, errsz, "finish: out of memory");
                return -ENOMEM;
        }
        for (size_t i = 0; i < b->n; i++) {
                const struct batch_row *row = &b->rows[i];

                if (row->action == ACT_FINISH)
                        done[n_done++] = c->claimed.rows[i].tid;
                else if (row->action == ACT_FAIL)
                        fails[n_fails++] = (struct pg_failure){ .tid = c->claimed.rows[i].tid,
                                                                .attempts_inc = row->attempts_inc,
                                                                .dead = row->dead,
                                                                .reason = row->reason };
        }
        /* While stopping, the finish gets the drain timeout plus the grace announced to
         * systemd (EXTEND_TIMEOUT_USEC), not the whole batch deadline. */
        if (r->stop_at && r->stop_at + r->cfg->relay.drain_timeout + 5 * USEC_PER_SEC < deadline)
                deadline = r->stop_at + r->cfg->relay.drain_timeout + 5 * USEC_PER_SEC;
        return pg_finish_start(&c->lane->pg, done, n_done, fails, n_fails, deadline, err, errsz);
}

/* The batch's figures for metrics.h: totals, the published rows by topic (one call per run of
 * rows of one topic), and per message the delivery time and the time from created_at. */
static void record(struct relay *r, const struct cycle *c, usec_t claim, usec_t finish, usec_t total) {
        const struct batch *b = &c->b;
        struct metrics_batch mb = { .add = { .published = b->delivered,
                                             .failed = b->failed,
                                             .overtaken = b->overtaken,
                                             .batches = 1 },
                                    .claim = claim,
                                    .finish = finish,
                                    .total = total };
        /* Reports carry the monotonic clock; created_at is wall time. */
        double wall_minus_mono = ((double)wall_usec() - (double)now_usec()) / USEC_PER_SEC;
        const char *topic = NULL;
        uint64_t run = 0;

        for (size_t i = 0; i < b->n; i++) {
                const struct batch_row *row = &b->rows[i];
                const struct kafka_delivery *d = &c->slots[i];

                mb.add.dead_lettered += row->dead;
                mb.add.held += row->state == ROW_HELD;
                if (row->action != ACT_FINISH)
                        continue;
                if (d->reported) {
                        /* created_at is the database's clock, the report the relay's: a skew
                         * between them must not make an observation negative (it would lower
                         * the histogram's _sum, which a rate() reads as a counter reset). */
                        double e2e = (double)d->reported_at / USEC_PER_SEC + wall_minus_mono -
                                (double)c->claimed.rows[i].timestamp_ms / 1000;

                        histogram_observe(&mb.delivery, (double)d->latency / USEC_PER_SEC);
                        histogram_observe(&mb.end_to_end, e2e > 0 ? e2e : 0);
                }
                if (topic && strcmp(topic, row->topic) != 0) {
                        metrics_published(&r->metrics, topic, run);
                        run = 0;
                }
                topic = row->topic;
                run++;
        }
        if (topic)
                metrics_published(&r->metrics, topic, run);
        metrics_add_batch(&r->metrics, &mb);
}

/* What the committed batch changed: dead letters (one journal event each, they are rare), order
 * kept by dead-lettering, the outcome line. */
static void account(struct relay *r, const struct batch *b) {
        r->last_keys = 0;
        for (size_t i = 0; i < b->n; i++)
                r->last_keys += b->rows[i].key && b->rows[i].prev < 0;
        for (size_t i = 0; i < b->n; i++) {
                const struct batch_row *row = &b->rows[i];
                char id[48], reason[400];
                const char *fields[] = { id, reason, NULL };

                if (!row->dead)
                        continue;
                snprintf(id, sizeof(id), "OUTBOX_ROW_ID=%" PRId64, row->id);
                snprintf(reason, sizeof(reason), "OUTBOX_REASON=%s", row->reason);
                log_event(LOG_WARNING, LOG_EV_DEAD_LETTER, fields, "row %" PRId64 " dead-lettered: %s",
                          row->id, row->reason);
        }
        if (b->overtaken)
                log_warning("per-key order: %zu rows dead-lettered instead of sent late, because a "
                            "later row of their (topic, key) was already acknowledged",
                            b->overtaken);
        if (b->verdict == VERDICT_FAILURE)
                log_warning("batch of %zu rows: nothing delivered (%s)", b->n,
                            b->first_error ? b->first_error : "no report");
        else if (b->first_error)
                log_notice("batch of %zu rows: %zu delivered, some failed (%s)", b->n, b->delivered,
                           b->first_error);
}

/* Row i's turn: send it, hold it back for good, or let it wait. Once decided, a row no longer
 * looks at the batch it followed (which may be freed after it). */
static void decide(struct relay *r, struct cycle *c, size_t i) {
        struct batch_row *row = &c->b.rows[i];

        switch (batch_send_answer(&c->b, i)) {
        case SEND_NOW:
                send_row(r, c, i, false);
                if (row->state == ROW_REFUSED && message_classify(row->err) == OUTCOME_FATAL)
                        r->kafka.fatal = true; /* the error callback may not have run yet */
                break;
        case SEND_WAIT:
                batch_waiting(&c->b, i);
                return;
        case SEND_HOLD:
                batch_held(&c->b, i);
                break;
        case SEND_NEVER:
                if (row->state == ROW_WAITING)
                        batch_held(&c->b, i);
                break;
        }
        row->after = NULL;
}

/* Every row still waiting, in id order (a row sent lets the next of its key go too). */
static void decide_waiting(struct relay *r, struct cycle *c) {
        c->round_at = now_usec();
        for (size_t i = 0; i < c->b.n && c->b.waiting > 0 && !r->sig->hard_stop && !r->kafka.fatal; i++)
                if (c->b.rows[i].state == ROW_WAITING)
                        decide(r, c, i);
}

/* No more waiting: what still waits is held back (its earlier batch ran out of time). */
static void stop_waiting(struct cycle *c) {
        for (size_t i = 0; i < c->b.n && c->b.waiting > 0; i++)
                if (c->b.rows[i].state == ROW_WAITING) {
                        batch_held(&c->b, i);
                        c->b.rows[i].after = NULL;
                }
}

int cycle_claim(struct relay *r, struct lane *lane, int limit, bool probe, int64_t start, usec_t lock_wait,
                usec_t now, struct cycle **out) {
        /* Publishing may use the batch deadline less a reserve for the finish: a batch whose
         * deliveries ran to the deadline must still be able to record them and commit. */
        usec_t timeout = r->cfg->relay.batch_timeout;
        usec_t reserve = timeout / 4 < 5 * USEC_PER_SEC ? timeout / 4 : 5 * USEC_PER_SEC;
        struct cycle *c = calloc(1, sizeof(*c));
        char err[512];
        int ret;

        *out = NULL;
        if (!c)
                return -ENOMEM;
        c->lane = lane;
        c->limit = limit;
        c->probe = probe;
        c->start = start;
        c->lock_wait = lock_wait;
        c->started = now_usec();
        c->deadline = now + timeout;
        c->publish_deadline = c->deadline - reserve;
        c->state = CYCLE_CLAIMING;
        ret = claim(r, lane, limit, probe, start, lock_wait, c, now, err, sizeof(err));
        if (ret < 0) {
                log_warning("claiming rows failed: %s", err);
                cycle_free(c);
                return ret; /* the database's trouble, not Kafka's */
        }
        *out = c;
        return 0;
}

int cycle_claimed(struct relay *r, struct cycle *c) {
        char err[512];
        int ret = pg_poll(&c->lane->pg, err, sizeof(err));

        if (ret == -EINPROGRESS)
                return ret;
        if (ret == 0 && c->claimed.n == 0 && c->probe && r->probe_keys.n > 0) {
                /* Only keys earlier probes failed on are left: try them again rather than
                 * wait for their exclusion to run out while Kafka may be back. */
                pause_set_clear(&r->probe_keys);
                ret = claim(r, c->lane, c->limit, true, c->start, c->lock_wait, c, now_usec(), err,
                            sizeof(err));
                if (ret == 0)
                        return -EINPROGRESS;
        }
        if (ret == -EAGAIN) {
                /* A lock not had within lock_wait: another batch holds it; later. */
                log_debug("claim: %s", err);
                return ret;
        }
        if (ret < 0) {
                log_warning("claiming rows failed: %s", err);
                return ret; /* the database's trouble, not Kafka's */
        }
        r->last_in_view = c->claimed.in_view;
        if (floor_claimed(&r->floor, c->claimed.first_pending, c->proven, c->floor_epoch))
                r->pg.claim_floor = r->floor.at;
        if (c->claimed.n == 0)
                return 0;
        c->claimed_at = now_usec();
        ret = batch_init(&c->b, c->claimed.n);
        c->slots = calloc(c->claimed.n, sizeof(*c->slots));
        if (ret < 0 || !c->slots || expand_headers(c) < 0) {
                ret = -ENOMEM;
                goto rollback;
        }
        for (size_t i = 0; i < c->claimed.n; i++) {
                const struct pg_row *row = &c->claimed.rows[i];

                c->b.rows[i] = (struct batch_row){
                        .id = row->id,
                        .topic = row->topic,
                        .key = row->key,
                        .attempts = row->attempts,
                        /* c->headers[i] owns its error; the other is a literal. */
                        .map_error = message_row_invalid(c->headers[i].error, row->timestamp_known),
                };
        }
        c->highest = c->claimed.rows[c->claimed.n - 1].id;
        ret = batch_prepare(&c->b);
        if (ret < 0)
                goto rollback;
        /* Rows of a (topic, key) that a batch still in flight holds too follow its newest one. */
        if (r->cfg->relay.ordering != ORDERING_NONE)
                for (size_t k = r->n_flight; k-- > 0;)
                        if (r->flight[k] != c && r->flight[k]->state != CYCLE_CLAIMING)
                                batch_follow(&c->b, &r->flight[k]->b);
        c->state = CYCLE_FLIGHT;
        return (int)c->b.n;

rollback:
        pg_rollback(&c->lane->pg, now_usec() + 5 * USEC_PER_SEC);
        return ret;
}

void cycle_send(struct relay *r, struct cycle *c) {
        /* First round: every row that may go, in id order, together. */
        c->seen = r->kafka.reports;
        c->round_at = now_usec();
        for (size_t i = 0; i < c->b.n && !r->sig->hard_stop && !r->kafka.fatal; i++)
                decide(r, c, i);
}

bool cycle_ready(struct relay *r, struct cycle *c, usec_t now) {
        bool late = now >= relay_deadline(r, c->publish_deadline);
        uint64_t before = c->seen;

        take_reports(r, c);
        if (c->b.waiting > 0) {
                if (late || r->sig->hard_stop)
                        stop_waiting(c);
                else if (c->seen != before)
                        decide_waiting(r, c);
        }
        return c->b.waiting == 0 && (c->outstanding == 0 || late);
}

void cycle_resolve(struct relay *r, struct cycle *c) {
        take_reports(r, c);
        decide_waiting(r, c);
}

int cycle_finish_start(struct relay *r, struct cycle *c, enum batch_verdict *verdict) {
        struct batch_rules rules = { .max_attempts = r->cfg->relay.max_attempts, .probe = c->probe };
        char err[512];
        ssize_t j;
        int ret;

        *verdict = VERDICT_NONE;
        stop_waiting(c);
        ret = await_reports(r, c);
        /* Then the suspects of a broker-side rejection, each alone, while time is left: "alone"
         * means nothing else in the producer, other batches' messages included. */
        while (ret == 0 && (j = batch_next_resend(&c->b)) >= 0 &&
               now_usec() < relay_deadline(r, c->publish_deadline)) {
                while (r->kafka.pending > 0 && !r->sig->hard_stop && !r->kafka.fatal &&
                       now_usec() < relay_deadline(r, c->publish_deadline)) {
                        kafka_flush(&r->kafka, 100);
                        relay_serve(r);
                }
                if (r->kafka.pending > 0)
                        break;
                c->round_at = now_usec();
                send_row(r, c, (size_t)j, true);
                ret = await_reports(r, c);
        }
        if (ret < 0)
                goto rollback;

        batch_plan(&c->b, &rules, &r->paused_keys);
        *verdict = c->b.verdict;
        if (c->b.verdict == VERDICT_FATAL) {
                ret = -ENOTRECOVERABLE;
                goto rollback;
        }
        c->finish_at = now_usec();
        ret = finish(r, c, err, sizeof(err));
        if (ret < 0) {
                log_warning("finishing a batch of %zu rows failed, they stay pending: %s", c->b.n, err);
                *verdict = VERDICT_NONE;
                return ret;
        }
        c->state = CYCLE_FINISHING;
        return 0;

rollback:
        pg_rollback(&c->lane->pg, now_usec() + 5 * USEC_PER_SEC);
        if (ret == -ENOTRECOVERABLE && c->outstanding > 0)
                c->slots = NULL; /* late reports still point into them: never freed, we exit */
        return ret;
}

int cycle_finished(struct relay *r, struct cycle *c, bool *left_pending) {
        char err[512];
        int ret = pg_poll(&c->lane->pg, err, sizeof(err));
        usec_t finished_at;

        if (ret == -EINPROGRESS)
                return ret;
        *left_pending = true;
        if (ret < 0) {
                /* Nothing was changed: every row stays pending and is published again (the
                 * duplicates the design allows after a lost connection). */
                log_warning("finishing a batch of %zu rows failed, they stay pending: %s", c->b.n, err);
                return ret;
        }
        finished_at = now_usec();
        *left_pending = c->b.left + c->b.failed > 0;
        apply_pauses(r, &c->b, finished_at);
        record(r, c, c->claimed_at - c->started, finished_at - c->finish_at, finished_at - c->started);
        account(r, &c->b);
        c->state = CYCLE_DONE;
        return (int)c->b.n;
}

void cycle_abandon(struct relay *r, struct cycle *c) {
        usec_t until = now_usec() + 5 * USEC_PER_SEC;

        /* What Kafka took of it goes out again: the duplicates the design allows after a fault. */
        if (c->state == CYCLE_FLIGHT || c->state == CYCLE_FINISHING)
                log_warning("giving up a batch of %zu rows in flight, they stay pending", c->b.n);
        if (c->state != CYCLE_DONE) {
                /* A statement in progress: the connection goes, and the server rolls back. */
                if (c->lane->pg.op)
                        pg_disconnect(&c->lane->pg);
                else
                        pg_rollback(&c->lane->pg, now_usec() + 5 * USEC_PER_SEC);
        }
        stop_waiting(c);
        if (c->outstanding > 0)
                kafka_purge_begin(&r->kafka);
        while (c->outstanding > 0 && now_usec() < until) {
                kafka_poll(&r->kafka, 50);
                relay_serve(r);
        }
        if (c->outstanding > 0) {
                /* Late reports would still write into it: never freed, and the relay exits. */
                snprintf(r->kafka.fatal_reason, sizeof(r->kafka.fatal_reason),
                         "%zu delivery reports missing after purging", c->outstanding);
                r->kafka.fatal = true;
                return;
        }
        cycle_free(c);
}
