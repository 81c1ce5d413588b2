/* relay.c -- The relay loop: claim -> publish -> finish, wake on NOTIFY, reconnect, drain on stop. */
#include "relay.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "message.h"

/* The longest the loop sleeps, so signals and the watchdog are served promptly. */
#define LOOP_SLICE (200 * USEC_PER_MSEC)
#define RETENTION_BATCH 1000
#define RETENTION_EVERY (10 * USEC_PER_SEC)

/* Per-row bookkeeping of one batch. */
struct slot {
        struct kafka_delivery d;
        enum outcome outcome;
        bool produced; /* handed to librdkafka: its delivery report decides */
        bool skipped;  /* not produced (an earlier row of its key failed): stays pending, untouched */
        char reason[256];
};

struct batch {
        struct pg_batch rows;
        struct slot *slots;
        int64_t *done;
        struct pg_failure *fails;
        size_t n_done, n_fails;
};

static void batch_free(struct batch *b) {
        pg_batch_clear(&b->rows);
        free(b->slots);
        free(b->done);
        free(b->fails);
        memset(b, 0, sizeof(*b));
}

static void free_config(struct relay_config *c) {
        config_free(c);
        free(c);
}

static void watchdog_tick(void *arg) {
        struct relay *r = arg;

        notify_watchdog(&r->notifier, now_usec());
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
        notify_init(&r->notifier);
        rng_seed(&r->rng, (uint64_t)getpid() ^ wall_usec());
        backoff_init(&r->db_backoff, cfg->retry.base, cfg->retry.cap);
        backoff_init(&r->batch_backoff, cfg->retry.base, cfg->retry.cap);
        ret = breaker_init(&r->breaker, (unsigned)cfg->breaker.failure_threshold,
                           cfg->breaker.failure_ratio, (unsigned)cfg->breaker.window,
                           cfg->breaker.cooldown, cfg->breaker.cooldown_max);
        if (ret < 0) {
                pg_done(&r->pg);
                free_config(cfg);
                r->cfg = NULL;
                return ret;
        }
        /* 10 s, 20 s, … 5 min for a refused topic: an operator has to act, the relay checks
         * back. A key whose partition is out waits at least as long as a delivery may take. */
        pause_set_init(&r->paused_topics, 10 * USEC_PER_SEC, 300 * USEC_PER_SEC);
        pause_set_init(&r->paused_keys, cfg->relay.batch_timeout / 2, 300 * USEC_PER_SEC);
        /* The claim compares every scanned row with the paused keys: keep the list bounded. */
        r->paused_keys.max = 10000;
        r->state = RELAY_CONNECTING;
        return 0;
}

void relay_done(struct relay *r) {
        if (!r->cfg)
                return;
        kafka_close(&r->kafka, r->cfg->relay.drain_timeout);
        pg_done(&r->pg);
        breaker_done(&r->breaker);
        pause_set_done(&r->paused_topics);
        pause_set_done(&r->paused_keys);
        free_config(r->cfg);
        r->cfg = NULL;
}

/* SIGHUP: re-read the file; apply what can change live, keep the rest (and say so); keep
 * everything when the new file is invalid. */
static void relay_reload(struct relay *r) {
        struct relay_config *next = calloc(1, sizeof(*next));
        char err[1024], changed[512], file[300];
        const char *fields[] = {file, NULL};
        int n;

        notify_reloading(&r->notifier);
        snprintf(file, sizeof(file), "OUTBOX_CONFIG_FILE=%s", r->cfg->file);
        if (!next) {
                log_error("reload failed: out of memory; keeping the running settings");
                goto out;
        }
        if (config_load(r->cfg->file, next, err, sizeof(err)) < 0) {
                log_event(LOG_ERR, LOG_EV_RELOAD, fields,
                          "reload failed, keeping the running settings: %s", err);
                free(next);
                goto out;
        }
        n = config_keep_restart_only(r->cfg, next, changed, sizeof(changed));
        if (n < 0 || breaker_configure(&r->breaker, (unsigned)next->breaker.failure_threshold,
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

/* The deadline a batch must keep: its own, shortened to the drain timeout once stopping. */
static usec_t batch_deadline(struct relay *r, usec_t deadline) {
        if (r->sig->stop) {
                relay_stopping(r);
                if (r->stop_at + r->cfg->relay.drain_timeout < deadline)
                        return r->stop_at + r->cfg->relay.drain_timeout;
        }
        return deadline;
}

/* Serves delivery reports until none is outstanding or the deadline passes; then purges what
 * is left (its reports arrive as purge errors, i.e. transient failures). */
static void await_deliveries(struct relay *r, usec_t deadline) {
        while (r->kafka.pending > 0 && !r->sig->hard_stop && !r->kafka.fatal) {
                usec_t now = now_usec(), d = batch_deadline(r, deadline);

                if (now >= d)
                        break;
                kafka_flush(&r->kafka, (int)((d - now) / USEC_PER_MSEC > 100 ? 100 : (d - now) / USEC_PER_MSEC + 1));
                notify_watchdog(&r->notifier, now_usec());
        }
        if (r->kafka.pending > 0)
                kafka_purge(&r->kafka);
}

static bool key_equal(const struct pg_row *a, const struct pg_row *b) {
        return a->key && b->key && a->key_len == b->key_len && memcmp(a->key, b->key, a->key_len) == 0;
}

/* Produces row i into its slot. Returns the synchronous outcome (OK = enqueued). */
static enum outcome produce_row(struct relay *r, struct batch *b, size_t i, usec_t deadline) {
        const struct pg_row *row = &b->rows.rows[i];
        struct slot *s = &b->slots[i];
        rd_kafka_headers_t *h = NULL;
        rd_kafka_resp_err_t e;

        if (message_headers(row->headers, row->headers_len, row->id, &h) < 0) {
                snprintf(s->reason, sizeof(s->reason), "headers could not be expanded");
                return OUTCOME_PERMANENT;
        }
        e = kafka_produce(&r->kafka, row->topic, row->key, row->key_len, row->payload,
                          row->payload_len, row->timestamp_ms, h, &s->d, deadline);
        if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
                rd_kafka_headers_destroy(h);
                snprintf(s->reason, sizeof(s->reason), "Kafka refused the message: %s (%s)",
                         rd_kafka_err2str(e), rd_kafka_err2name(e));
                return message_classify(e) == OUTCOME_OK ? OUTCOME_TRANSIENT : message_classify(e);
        }
        s->produced = true;
        return OUTCOME_OK;
}

/* Is there an earlier row of row i's key in the batch that is neither delivered nor dead? */
static bool earlier_pending(const struct batch *b, size_t i) {
        const struct pg_row *row = &b->rows.rows[i];

        for (size_t j = 0; row->key && j < i; j++) {
                const struct slot *e = &b->slots[j];

                if (key_equal(row, &b->rows.rows[j]) &&
                    (e->skipped || (e->outcome != OUTCOME_OK && e->outcome != OUTCOME_PERMANENT)))
                        return true;
        }
        return false;
}

/* A broker-side rejection (e.g. MSG_SIZE_TOO_LARGE from the topic's own limit) fails every
 * message of the produce request, innocent neighbours included. Send each suspect alone: only
 * a row that fails on its own is dead-lettered. */
static void isolate_suspects(struct relay *r, struct batch *b, usec_t deadline) {
        size_t produced = 0, suspects = 0;

        for (size_t i = 0; i < b->rows.n; i++) {
                produced += b->slots[i].produced;
                suspects += b->slots[i].produced && b->slots[i].outcome == OUTCOME_PERMANENT;
        }
        if (suspects == 0 || produced == 1)
                return;
        for (size_t i = 0; i < b->rows.n && !r->sig->hard_stop; i++) {
                struct slot *s = &b->slots[i];
                enum outcome o;

                if (!s->produced || s->outcome != OUTCOME_PERMANENT)
                        continue;
                if (earlier_pending(b, i)) {
                        /* Sending it now would overtake an earlier row of its key that is
                         * still to be delivered: leave it for a later batch, untouched. */
                        s->skipped = true;
                        continue;
                }
                o = produce_row(r, b, i, deadline);
                if (o != OUTCOME_OK) {
                        s->produced = false;
                        s->outcome = o;
                        continue;
                }
                await_deliveries(r, deadline);
                s->outcome = message_classify(s->d.err);
                if (s->outcome != OUTCOME_OK)
                        snprintf(s->reason, sizeof(s->reason), "delivery failed: %s (%s)",
                                 rd_kafka_err2str(s->d.err), rd_kafka_err2name(s->d.err));
        }
}

/* Stops claiming a topic Kafka refuses, for a growing while, and says so once per pause. */
static void pause_topic(struct relay *r, const char *topic, const char *reason) {
        usec_t wait = pause_set_add(&r->paused_topics, topic, now_usec());
        char field[300];
        const char *fields[] = {field, NULL};

        if (!wait)
                return; /* already paused by an earlier row of this batch */
        snprintf(field, sizeof(field), "OUTBOX_TOPIC=%s", topic);
        log_event(LOG_ERR, LOG_EV_KAFKA_ERROR, fields,
                  "topic '%s' refused by Kafka (%s); its rows stay pending, other topics go on; "
                  "trying the topic again in %.0fs",
                  topic, reason, (double)wait / USEC_PER_SEC);
}

/* Topics and keys that were delivered again are forgotten, so a later pause starts short. */
static void unpause_delivered(struct relay *r, const struct batch *b) {
        for (size_t j = 0; j < b->rows.n; j++) {
                const struct pg_row *row = &b->rows.rows[j];

                if (b->slots[j].outcome != OUTCOME_OK || b->slots[j].skipped)
                        continue;
                if (r->paused_topics.n && pause_set_forget(&r->paused_topics, row->topic))
                        log_notice("topic '%s' accepted by Kafka again", row->topic);
                if (r->paused_keys.n && row->key)
                        pause_set_forget(&r->paused_keys, row->key);
        }
}

/* Where deliveries succeeded in this batch: (topic, partition) pairs, few in practice. */
struct delivered_at {
        const char *topic;
        int32_t partition;
};

static bool delivered_to(const struct delivered_at *d, size_t n, const char *topic, int32_t partition) {
        for (size_t i = 0; i < n; i++)
                if ((partition == RD_KAFKA_PARTITION_UA || d[i].partition == partition) &&
                    strcmp(d[i].topic, topic) == 0)
                        return true;
        return false;
}

/* Sorts the outcomes into rows to finish and failures to record. A transient failure is the
 * row's own (it spends an attempt) only when other messages reached the same partition of the
 * same topic in this batch. A topic none of whose messages went through while other topics'
 * did is refused as a whole (unknown topic, no partitions, …): it is paused, its rows spend
 * nothing. When nothing went through at all, Kafka is the problem: the breaker's business. */
static int settle(struct relay *r, struct batch *b, size_t *n_ok, size_t *n_transient,
                  const char **first_error) {
        size_t n = b->rows.n, ok = 0, transient = 0, n_at = 0, keys_paused = 0;
        usec_t key_wait = 0;
        const char *key_reason = NULL, *key_topic = NULL;
        _cleanup_free_ struct delivered_at *at = calloc(n + 1, sizeof(*at));
        bool any_ok;

        b->done = calloc(n, sizeof(*b->done));
        b->fails = calloc(n, sizeof(*b->fails));
        if (!b->done || !b->fails || !at)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                const struct slot *s = &b->slots[i];

                if (s->outcome != OUTCOME_OK || s->skipped)
                        continue;
                ok++;
                if (!delivered_to(at, n_at, b->rows.rows[i].topic, s->d.partition))
                        at[n_at++] = (struct delivered_at){b->rows.rows[i].topic, s->d.partition};
        }
        /* A row that failed while others in its batch went through failed on its own and
         * spends an attempt; when nothing went through, Kafka is the problem, not the row. */
        any_ok = ok > 0;
        *first_error = NULL;
        for (size_t i = 0; i < n; i++) {
                const struct pg_row *row = &b->rows.rows[i];
                struct slot *s = &b->slots[i];
                struct pg_failure *f;

                if (s->skipped)
                        continue;
                if (s->outcome == OUTCOME_OK) {
                        b->done[b->n_done++] = row->id;
                        continue;
                }
                f = &b->fails[b->n_fails++];
                f->id = row->id;
                f->reason = s->reason;
                switch (s->outcome) {
                case OUTCOME_PERMANENT:
                        f->attempts_inc = 1;
                        f->dead = true;
                        break;
                case OUTCOME_TRANSIENT:
                        if (any_ok && !delivered_to(at, n_at, row->topic, RD_KAFKA_PARTITION_UA)) {
                                /* The whole topic failed while others went through. */
                                f->attempts_inc = 0;
                                f->dead = false;
                                pause_topic(r, row->topic, s->reason);
                                break;
                        }
                        if ((any_ok && s->produced && s->d.partition != RD_KAFKA_PARTITION_UA &&
                             !delivered_to(at, n_at, row->topic, s->d.partition)) ||
                            (!any_ok && row->key && pause_set_known(&r->paused_keys, row->key))) {
                                /* Its partition took nothing while the topic's others did: a
                                 * partition outage. Hold the key back so the oldest rows
                                 * (all of that partition, soon) do not block the rest. A key
                                 * held back before that fails again when its pause ran out
                                 * is the same outage, even in a batch of only such keys. */
                                usec_t w = row->key ? pause_set_add(&r->paused_keys, row->key, now_usec()) : 0;

                                f->attempts_inc = 0;
                                f->dead = false;
                                if (w) {
                                        keys_paused++;
                                        key_wait = w > key_wait ? w : key_wait;
                                        key_reason = s->reason;
                                        key_topic = row->topic;
                                }
                                break;
                        }
                        transient++;
                        /* The relay's own purges (deadline, drain) are never the row's fault. */
                        f->attempts_inc =
                                any_ok && s->produced && s->d.reported &&
                                s->d.err != RD_KAFKA_RESP_ERR__PURGE_QUEUE &&
                                s->d.err != RD_KAFKA_RESP_ERR__PURGE_INFLIGHT &&
                                delivered_to(at, n_at, row->topic, s->d.partition) ? 1 : 0;
                        f->dead = f->attempts_inc && row->attempts + 1 >= r->cfg->relay.max_attempts;
                        if (f->dead)
                                snprintf(s->reason + strlen(s->reason),
                                         sizeof(s->reason) - strlen(s->reason),
                                         "; failed %d times on its own", row->attempts + 1);
                        break;
                default: /* configuration fault: not the row's, not Kafka's availability */
                        f->attempts_inc = 0;
                        f->dead = false;
                        pause_topic(r, row->topic, s->reason);
                        break;
                }
                if (!f->dead && !*first_error)
                        *first_error = s->reason;
        }
        {
                /* A failed row whose later same-key row was acknowledged: Kafka now has them out
                 * of order. Nothing can undo it; say so. */
                size_t overtaken = 0;

                for (size_t i = 0; ok && i < n; i++) {
                        const struct slot *s = &b->slots[i];

                        if (s->skipped || s->outcome == OUTCOME_OK || s->outcome == OUTCOME_PERMANENT ||
                            !b->rows.rows[i].key)
                                continue;
                        for (size_t j = i + 1; j < n; j++)
                                if (b->slots[j].outcome == OUTCOME_OK && !b->slots[j].skipped &&
                                    key_equal(&b->rows.rows[i], &b->rows.rows[j])) {
                                        overtaken++;
                                        break;
                                }
                }
                if (overtaken)
                        log_warning("per-key order not kept for %zu rows: a later row of their key was "
                                    "acknowledged although they failed; they follow in a later batch",
                                    overtaken);
        }
        if (keys_paused)
                log_warning("a partition of topic '%s' takes no messages (%s) while others do: "
                            "holding back %zu keys for up to %.0fs, the rest goes on",
                            key_topic, key_reason, keys_paused, (double)key_wait / USEC_PER_SEC);
        *n_ok = ok;
        *n_transient = transient;
        return 0;
}

/* One claim -> publish -> finish cycle. Returns the number of rows claimed, or -errno:
 * -ECONNRESET/-ETIMEDOUT (database), -EAGAIN (nothing delivered, retry later),
 * -ECANCELED (hard stop), -ENOTRECOVERABLE (fatal producer error). */
static int relay_batch(struct relay *r, usec_t now, int limit) {
        struct batch b = {0};
        usec_t deadline = now + r->cfg->relay.batch_timeout;
        /* Publishing may use the batch deadline less a reserve for the finish: a batch whose
         * deliveries ran to the deadline must still be able to record them and commit. */
        usec_t reserve = r->cfg->relay.batch_timeout / 4 < 5 * USEC_PER_SEC
                                 ? r->cfg->relay.batch_timeout / 4
                                 : 5 * USEC_PER_SEC;
        usec_t publish_deadline = deadline - reserve;
        char err[512];
        const char *first_error;
        size_t n_ok = 0, n_transient = 0, held = 0;
        _cleanup_free_ char *skip_topics = pause_set_literal(&r->paused_topics, now);
        _cleanup_free_ char *skip_keys = pause_set_literal(&r->paused_keys, now);
        int ret;

        if (!skip_topics || !skip_keys)
                return -ENOMEM;
        ret = pg_claim(&r->pg, limit, skip_topics, skip_keys, &b.rows, deadline, err, sizeof(err));
        if (ret < 0) {
                log_warning("claiming rows failed: %s", err);
                return ret; /* -EIO: a statement failed; the database's trouble, not Kafka's */
        }
        if (b.rows.n == 0)
                return 0;
        b.slots = calloc(b.rows.n, sizeof(*b.slots));
        if (!b.slots) {
                ret = -ENOMEM;
                goto rollback;
        }
        /* Every row starts as "left alone": only a row that was really handled below can be
         * finished, whatever path the loop leaves by. */
        for (size_t i = 0; i < b.rows.n; i++) {
                b.slots[i].skipped = true;
                b.slots[i].outcome = OUTCOME_TRANSIENT;
        }

        for (size_t i = 0; i < b.rows.n && !r->sig->hard_stop; i++) {
                const struct pg_row *row = &b.rows.rows[i];
                struct slot *s = &b.slots[i];

                s->skipped = false;
                if (row->map_error) {
                        s->outcome = OUTCOME_PERMANENT;
                        snprintf(s->reason, sizeof(s->reason), "%s", row->map_error);
                        continue;
                }
                /* Per-key order: once a row of a key is held back, so are its successors. Rows
                 * are rarely held back, so the scan is rarely needed. */
                for (size_t j = 0; held && j < i && row->key; j++)
                        if (!b.slots[j].produced && b.slots[j].outcome != OUTCOME_PERMANENT &&
                            key_equal(row, &b.rows.rows[j])) {
                                s->skipped = true;
                                break;
                        }
                if (s->skipped)
                        continue;
                s->outcome = produce_row(r, &b, i, batch_deadline(r, publish_deadline));
                if (s->outcome == OUTCOME_FATAL) {
                        r->kafka.fatal = true; /* the error callback may not have run yet */
                        break;
                }
                held += s->outcome != OUTCOME_OK && s->outcome != OUTCOME_PERMANENT;
        }
        kafka_poll(&r->kafka, 0);
        await_deliveries(r, publish_deadline);
        if (r->kafka.pending > 0) {
                /* Reports still due after the purge would write into this batch's slots: keep
                 * them alive (never freed), roll back and exit for a restart. */
                log_error("%zu delivery reports missing after purging; exiting for a restart",
                          r->kafka.pending);
                b.slots = NULL;
                ret = -ENOTRECOVERABLE;
                goto rollback;
        }
        if (r->sig->hard_stop) {
                ret = -ECANCELED;
                goto rollback;
        }
        if (r->kafka.fatal) {
                ret = -ENOTRECOVERABLE;
                goto rollback;
        }
        for (size_t i = 0; i < b.rows.n; i++) {
                struct slot *s = &b.slots[i];

                if (!s->produced)
                        continue;
                if (!s->d.reported) {
                        s->outcome = OUTCOME_TRANSIENT;
                        snprintf(s->reason, sizeof(s->reason), "no delivery report");
                        continue;
                }
                s->outcome = message_classify(s->d.err);
                if (s->outcome == OUTCOME_FATAL) {
                        ret = -ENOTRECOVERABLE;
                        goto rollback;
                }
                if (s->outcome != OUTCOME_OK)
                        snprintf(s->reason, sizeof(s->reason), "delivery failed: %s (%s)",
                                 rd_kafka_err2str(s->d.err), rd_kafka_err2name(s->d.err));
        }
        isolate_suspects(r, &b, publish_deadline);
        if (r->sig->hard_stop) {
                ret = -ECANCELED;
                goto rollback;
        }

        ret = settle(r, &b, &n_ok, &n_transient, &first_error);
        if (ret < 0)
                goto rollback;
        /* While stopping, the finish gets the drain timeout plus the grace announced to
         * systemd (EXTEND_TIMEOUT_USEC), not the whole batch deadline. */
        if (r->stop_at && r->stop_at + r->cfg->relay.drain_timeout + 5 * USEC_PER_SEC < deadline)
                deadline = r->stop_at + r->cfg->relay.drain_timeout + 5 * USEC_PER_SEC;
        ret = pg_finish(&r->pg, b.done, b.n_done, b.fails, b.n_fails, deadline, err, sizeof(err));
        if (ret < 0) {
                /* Nothing was marked: every row stays pending and is published again (the
                 * duplicates the design allows after a lost connection). */
                log_warning("finishing a batch of %zu rows failed, they stay pending: %s",
                            b.rows.n, err);
                if (r->pg.in_tx)
                        pg_rollback(&r->pg, now_usec() + 5 * USEC_PER_SEC);
                batch_free(&b);
                return ret;
        }

        r->stats.batches++;
        r->stats.published += b.n_done;
        for (size_t i = 0; i < b.n_fails; i++) {
                const struct pg_failure *f = &b.fails[i];

                if (f->dead) {
                        char id[48], reason[300];
                        const char *fields[] = {id, reason, NULL};

                        snprintf(id, sizeof(id), "OUTBOX_ROW_ID=%" PRId64, f->id);
                        snprintf(reason, sizeof(reason), "OUTBOX_REASON=%s", f->reason);
                        r->stats.dead_lettered++;
                        log_event(LOG_WARNING, LOG_EV_DEAD_LETTER, fields,
                                  "row %" PRId64 " dead-lettered: %s", f->id, f->reason);
                } else
                        r->stats.failed++;
        }
        ret = (int)b.rows.n;
        if (r->paused_topics.n || r->paused_keys.n)
                unpause_delivered(r, &b);
        if (n_ok == 0 && n_transient > 0) {
                log_warning("batch of %zu rows: nothing delivered (%s)", b.rows.n, first_error);
                ret = -EAGAIN;
        } else if (first_error)
                log_notice("batch of %zu rows: %zu delivered, some failed (%s)", b.rows.n, n_ok,
                           first_error);
        batch_free(&b);
        return ret;

rollback:
        pg_rollback(&r->pg, now_usec() + 5 * USEC_PER_SEC);
        batch_free(&b);
        return ret;
}

/* STATUS= every few seconds: totals, rate, lag (age of the oldest pending row), breaker and
 * database state. */
static void relay_status(struct relay *r, usec_t now) {
        char status[320], lagbuf[48] = "lag ?", err[256];
        const char *db = pg_connected(&r->pg) ? "database ok" : "database unavailable";
        double rate = 0;
        usec_t lag;

        if (now < r->next_status)
                return;
        if (r->status_at && now > r->status_at)
                rate = (double)(r->stats.published - r->status_published) * USEC_PER_SEC /
                       (double)(now - r->status_at);
        r->status_at = now;
        r->status_published = r->stats.published;
        r->next_status = now + 2 * USEC_PER_SEC;
        if (pg_connected(&r->pg) && !r->pg.in_tx &&
            pg_lag(&r->pg, &lag, now + r->cfg->postgres.statement_timeout, err, sizeof(err)) == 0)
                snprintf(lagbuf, sizeof(lagbuf), "lag %.2fs", (double)lag / USEC_PER_SEC);

        if (pg_connected(&r->pg) && r->cfg->relay.ordering == ORDERING_KEY && !r->leader) {
                snprintf(status, sizeof(status),
                         "standby (another relay publishes), published %" PRIu64 ", %s, database ok",
                         r->stats.published, lagbuf);
                notify_status(&r->notifier, status);
                return;
        }
        snprintf(status, sizeof(status),
                 "published %" PRIu64 " (%.0f/s), %s, dead-lettered %" PRIu64 ", %s, %s",
                 r->stats.published, rate, lagbuf, r->stats.dead_lettered, db,
                 r->breaker.state == BREAKER_OPEN        ? "kafka unavailable (breaker open)"
                 : r->breaker.state == BREAKER_HALF_OPEN ? "kafka probing (breaker half-open)"
                 : r->state == RELAY_BACKOFF             ? "kafka failing, retrying"
                                                         : "kafka ok");
        notify_status(&r->notifier, status);
        if (now >= r->next_summary) {
                if (r->stats.published != r->last_summary.published ||
                    r->stats.dead_lettered != r->last_summary.dead_lettered ||
                    r->stats.failed != r->last_summary.failed)
                        log_event(LOG_INFO, LOG_EV_SUMMARY, NULL, "summary: published %" PRIu64 " (+%" PRIu64 "), dead-lettered %" PRIu64
                                 ", failed deliveries %" PRIu64 ", batches %" PRIu64,
                                 r->stats.published, r->stats.published - r->last_summary.published,
                                 r->stats.dead_lettered, r->stats.failed, r->stats.batches);
                r->last_summary = r->stats;
                r->next_summary = now + r->cfg->relay.status_interval;
        }
}

/* While the breaker is open nothing is claimed, so no row burns attempts during an outage. */
static bool breaker_gate(struct relay *r, usec_t now) {
        enum breaker_event ev;
        bool allowed = breaker_allow(&r->breaker, now, &ev);

        if (ev == BREAKER_PROBING)
                log_notice("circuit breaker half-open: probing Kafka with one row");
        return allowed;
}

static void breaker_outcome(struct relay *r, int ret, usec_t now) {
        enum breaker_event ev;

        if (ret == 0) {
                breaker_cancel_probe(&r->breaker); /* nothing to probe with */
                return;
        }
        if (ret < 0 && ret != -EAGAIN) {
                breaker_cancel_probe(&r->breaker); /* database trouble says nothing about Kafka */
                return;
        }
        ev = breaker_record(&r->breaker, ret == -EAGAIN, now, &r->rng);
        switch (ev) {
        case BREAKER_OPENED:
                log_event(LOG_WARNING, LOG_EV_BREAKER_OPEN, NULL, "circuit breaker opened: Kafka deliveries keep failing; claiming nothing "
                            "until a probe in %.1fs", (double)(r->breaker.open_until - now) / USEC_PER_SEC);
                break;
        case BREAKER_REOPENED:
                log_event(LOG_WARNING, LOG_EV_BREAKER_OPEN, NULL, "circuit breaker probe failed: open again, next probe in %.1fs",
                            (double)(r->breaker.open_until - now) / USEC_PER_SEC);
                break;
        case BREAKER_CLOSED_AGAIN:
                log_event(LOG_NOTICE, LOG_EV_BREAKER_CLOSED, NULL,
                          "circuit breaker closed: Kafka deliveries succeed again");
                break;
        default:
                break;
        }
        r->next_status = 0; /* show the change at once */
}

static void schedule_retry(struct relay *r, struct backoff *bo, usec_t now, const char *what) {
        usec_t wait = backoff_next(bo, &r->rng);

        r->retry_at = now + wait;
        log_notice("%s, retrying in %.1fs", what, (double)wait / USEC_PER_SEC);
}

static void try_connect(struct relay *r, usec_t now) {
        char err[512];
        int ret = pg_connect(&r->pg, now + r->cfg->postgres.connect_timeout, err, sizeof(err));

        if (ret < 0) {
                char what[600];

                snprintf(what, sizeof(what), "cannot connect to PostgreSQL: %s", err);
                schedule_retry(r, &r->db_backoff, now_usec(), what);
                /* A slow start that is still trying: ask systemd for the time it needs. */
                if (!r->ready_sent)
                        notify_extend_timeout(&r->notifier, r->retry_at - now_usec() +
                                                                    r->cfg->postgres.connect_timeout +
                                                                    5 * USEC_PER_SEC);
                return;
        }
        if (r->ready_sent)
                log_event(LOG_NOTICE, LOG_EV_DB_BACK, NULL,
                          "connected to PostgreSQL again after %u failed attempts", r->db_backoff.attempt);
        else
                log_info("connected to PostgreSQL, listening on '%s'", r->cfg->postgres.channel);
        backoff_reset(&r->db_backoff);
        r->leader = false; /* a session lock dies with its connection */
        r->next_leader_try = 0;
        r->state = RELAY_IDLE;
        r->wake = true; /* anything may have been written while we were away */
}

/* finish = "mark": deletes marked rows past the retention in small batches, between claims
 * (also while busy), for at most a second at a time; comes back sooner while it has a backlog. */
static void run_retention(struct relay *r, usec_t now) {
        usec_t until = now + USEC_PER_SEC;
        char err[512];
        int n = 0;
        long total = 0;

        do {
                n = pg_retention(&r->pg, RETENTION_BATCH, now_usec() + r->cfg->postgres.statement_timeout,
                                 err, sizeof(err));
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

/* ordering = "key": one relay per table publishes; the others wait and take over when its
 * connection (and with it the lock) goes away. */
static void try_lead(struct relay *r, usec_t now) {
        char err[512];
        bool got;

        if (pg_try_leader(&r->pg, &got, now + r->cfg->postgres.statement_timeout, err, sizeof(err)) < 0) {
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
                          "publishing table '%s' (ordering = \"key\": one relay at a time)",
                          r->cfg->postgres.table);
                return;
        }
        if (!r->standby_said) {
                r->standby_said = true;
                r->next_status = 0;
                log_event(LOG_NOTICE, LOG_EV_STANDBY, NULL,
                          "standby: another relay publishes table '%s'; taking over when it goes away "
                          "(ordering = \"key\")",
                          r->cfg->postgres.table);
        }
        r->next_leader_try = now + r->cfg->relay.poll_interval;
}

/* Sleeps until the database socket is readable or `timeout` passes. */
static void wait_for_work(struct relay *r, usec_t timeout) {
        struct pollfd p = {.fd = pg_socket(&r->pg), .events = POLLIN};
        int n;

        if (timeout > LOOP_SLICE)
                timeout = LOOP_SLICE;
        /* A notification may already sit in libpq's buffer (read while another query ran):
         * poll() on the socket would not see it. */
        if (p.fd >= 0 && pg_consume_notifies(&r->pg) > 0) {
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
        if (poll(&p, 1, (int)(timeout / USEC_PER_MSEC)) > 0) {
                n = pg_consume_notifies(&r->pg);
                if (n > 0)
                        r->wake = true;
        }
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

        while (!r->sig->stop) {
                usec_t now = now_usec(), wait;

                notify_watchdog(&r->notifier, now);
                if (r->sig->reload) {
                        r->sig->reload = 0;
                        relay_reload(r);
                }
                kafka_poll(&r->kafka, 0);
                if (r->kafka.fatal) {
                        log_error("fatal Kafka producer error, exiting for a restart: %s",
                                  r->kafka.fatal_reason);
                        return -ENOTRECOVERABLE;
                }
                if (r->kafka.last_error_new) {
                        r->kafka.last_error_new = false;
                        log_event(LOG_WARNING, LOG_EV_KAFKA_ERROR, NULL, "kafka: %s", r->kafka.last_error);
                }

                if (!pg_connected(&r->pg)) {
                        if (r->state != RELAY_CONNECTING) {
                                log_event(LOG_WARNING, LOG_EV_DB_LOST, NULL,
                                          "lost the PostgreSQL connection, reconnecting");
                                r->state = RELAY_CONNECTING;
                                pg_disconnect(&r->pg);
                                r->retry_at = now;
                        }
                        if (now >= r->retry_at)
                                try_connect(r, now);
                        else
                                wait_for_work(r, r->retry_at - now);
                        if (pg_connected(&r->pg) && !r->ready_sent) {
                                notify_ready(&r->notifier);
                                r->ready_sent = true;
                                log_event(LOG_INFO, LOG_EV_READY, NULL, "ready");
                        }
                        continue;
                }

                if (r->cfg->relay.ordering == ORDERING_KEY && !r->leader) {
                        if (now >= r->next_leader_try)
                                try_lead(r, now);
                        if (!r->leader) {
                                relay_status(r, now);
                                wait_for_work(r, r->next_leader_try > now ? r->next_leader_try - now : 0);
                                continue;
                        }
                }
                if (r->state == RELAY_BACKOFF && now < r->retry_at) {
                        wait_for_work(r, r->retry_at - now);
                        continue;
                }
                if (r->cfg->relay.finish == FINISH_MARK && r->cfg->relay.retention &&
                    now >= r->next_retention) {
                        run_retention(r, now);
                        continue;
                }
                /* Nothing may come between the gate and the batch: in half-open state the gate
                 * hands out the one probe, and only the batch's outcome gives it back. */
                if ((r->wake || now >= r->next_poll) && !breaker_gate(r, now)) {
                        wait_for_work(r, r->breaker.open_until > now ? r->breaker.open_until - now : 0);
                        continue;
                }
                if (r->wake || now >= r->next_poll) {
                        bool probe = r->breaker.state == BREAKER_HALF_OPEN;

                        r->wake = false;
                        /* A probe risks one row, not a batch. */
                        ret = relay_batch(r, now, probe ? 1 : r->cfg->relay.batch_size);
                        now = now_usec();
                        breaker_outcome(r, ret, now);
                        if (ret == -ECANCELED)
                                return ret;
                        if (ret == -ENOTRECOVERABLE) {
                                log_error("fatal Kafka producer error, exiting for a restart: %s",
                                          r->kafka.fatal_reason);
                                return ret;
                        }
                        if (ret == -EAGAIN) {
                                r->state = RELAY_BACKOFF;
                                schedule_retry(r, &r->batch_backoff, now, "Kafka delivery failing");
                                r->wake = true;
                        } else if (ret < 0) {
                                /* Database trouble: a lost connection is re-made by the check
                                 * above; a failing statement (or anything else) backs off
                                 * rather than spin. */
                                if (pg_connected(&r->pg)) {
                                        r->state = RELAY_BACKOFF;
                                        schedule_retry(r, &r->db_backoff, now, "the batch failed in the database");
                                        r->wake = true;
                                }
                                continue;
                        } else {
                                if (r->state == RELAY_BACKOFF)
                                        log_notice("deliveries succeed again");
                                r->state = RELAY_IDLE;
                                backoff_reset(&r->batch_backoff);
                                backoff_reset(&r->db_backoff);
                                /* A full batch, or a successful probe with more waiting. */
                                if (ret >= r->cfg->relay.batch_size || (probe && ret > 0))
                                        r->wake = true;
                                else
                                        r->next_poll = now + r->cfg->relay.poll_interval;
                        }
                        relay_status(r, now);
                        /* Notifications that arrived during the batch are already buffered. */
                        if (pg_consume_notifies(&r->pg) > 0)
                                r->wake = true;
                        continue;
                }
                relay_status(r, now);
                wait = r->next_poll > now ? r->next_poll - now : 0;
                if (notify_watchdog_due(&r->notifier, now) < wait)
                        wait = notify_watchdog_due(&r->notifier, now);
                wait_for_work(r, wait);
        }
        relay_stopping(r);
        if (r->sig->hard_stop)
                return -ECANCELED;
        log_info("drained: published %" PRIu64 ", dead-lettered %" PRIu64, r->stats.published,
                 r->stats.dead_lettered);
        return 0;
}
