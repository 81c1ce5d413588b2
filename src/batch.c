/* batch.c -- One batch's decisions, from facts to a plan: what may be sent, what each delivery result means for its row, what the batch says about Kafka; pure, no I/O. */
#include "batch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "message.h"
#include "utf8.h"

/* What the facts about one row amount to. */
enum kind {
        K_LEFT, /* never handled */
        K_HELD, /* held back behind an earlier row of its (topic, key) */
        K_OK, /* acknowledged */
        K_DEAD, /* certainly the row's own permanent fault */
        K_SUSPECT, /* a permanent error that may belong to a neighbour in the same request */
        K_CONFIG, /* the topic is refused (authorization, unknown topic) */
        K_TRANSIENT, /* may work later */
        K_FATAL, /* the producer is broken */
};

int batch_init(struct batch *b, size_t n) {
        memset(b, 0, sizeof(*b));
        if (n == 0)
                return 0;
        b->rows = calloc(n, sizeof(*b->rows));
        if (!b->rows)
                return -ENOMEM;
        b->n = n;
        return 0;
}

void batch_free(struct batch *b) {
        free(b->rows);
        free(b->index);
        memset(b, 0, sizeof(*b));
}

/* FNV-1a over topic, a separator no topic or key holds (NUL), and key. */
static uint64_t hash_pair(const char *topic, const char *key) {
        uint64_t h = 1469598103934665603ULL;

        for (const char *c = topic; *c; c++)
                h = (h ^ (unsigned char)*c) * 1099511628211ULL;
        h = (h ^ 0xff) * 1099511628211ULL;
        for (const char *c = key; *c; c++)
                h = (h ^ (unsigned char)*c) * 1099511628211ULL;
        return h;
}

static bool same_sequence(const struct batch_row *a, const struct batch_row *b) {
        return a->key && b->key && strcmp(a->key, b->key) == 0 && strcmp(a->topic, b->topic) == 0;
}

int batch_prepare(struct batch *b) {
        size_t size = 16;
        int *last; /* per hash slot: the latest row seen of that (topic, key) */

        while (size < 2 * b->n)
                size *= 2;
        free(b->index);
        b->index = last = malloc(size * sizeof(*last));
        b->index_size = size;
        if (!last)
                return -ENOMEM;
        for (size_t i = 0; i < size; i++)
                last[i] = -1;
        for (size_t i = 0; i < b->n; i++) {
                struct batch_row *r = &b->rows[i];
                size_t slot;

                r->prev = r->next = -1;
                r->state = ROW_CLAIMED;
                r->partition = RD_KAFKA_PARTITION_UA;
                r->topic_error = message_topic_invalid(r->topic);
                if (!r->key)
                        continue;
                /* Open addressing; a slot holds the newest row of one (topic, key). */
                for (slot = hash_pair(r->topic, r->key) & (size - 1); last[slot] >= 0;
                     slot = (slot + 1) & (size - 1))
                        if (same_sequence(&b->rows[last[slot]], r))
                                break;
                if (last[slot] >= 0) {
                        r->prev = last[slot];
                        b->rows[last[slot]].next = (int)i;
                }
                last[slot] = (int)i;
        }
        return 0;
}

/* The last row of (topic, key) in b, or -1. */
static int last_of(const struct batch *b, const char *topic, const char *key) {
        if (!b->index || !key)
                return -1;
        for (size_t slot = hash_pair(topic, key) & (b->index_size - 1); b->index[slot] >= 0;
             slot = (slot + 1) & (b->index_size - 1)) {
                const struct batch_row *r = &b->rows[b->index[slot]];

                if (r->key && strcmp(r->key, key) == 0 && strcmp(r->topic, topic) == 0)
                        return b->index[slot];
        }
        return -1;
}

void batch_follow(struct batch *later, const struct batch *earlier) {
        for (size_t i = 0; i < later->n; i++) {
                struct batch_row *r = &later->rows[i];
                int j;

                if (!r->key || r->prev >= 0 || r->after || r->after_blocked)
                        continue;
                j = last_of(earlier, r->topic, r->key);
                if (j < 0)
                        continue;
                if (earlier->planned) {
                        /* Its fate is final: decided now, so nothing points into a batch that may
                         * be freed before this one sends. */
                        r->after_blocked = batch_key_state(earlier, (size_t)j) != KEY_CLEAR;
                        continue;
                }
                r->after = earlier;
                r->after_row = (size_t)j;
        }
}

static enum kind kind_of(const struct batch *b, const struct batch_row *r) {
        if (r->map_error || r->topic_error)
                return K_DEAD;
        switch (r->state) {
        case ROW_CLAIMED:
                return K_LEFT;
        case ROW_HELD:
        case ROW_WAITING: /* still waiting when the plan is made: it was not sent */
                return K_HELD;
        case ROW_IN_FLIGHT:
        case ROW_UNREPORTED:
                return K_TRANSIENT;
        case ROW_REFUSED:
                switch (message_classify(r->err)) {
                case OUTCOME_PERMANENT:
                        return K_DEAD; /* a local check of this message alone */
                case OUTCOME_CONFIG:
                        return K_CONFIG;
                case OUTCOME_FATAL:
                        return K_FATAL;
                default:
                        return K_TRANSIENT;
                }
        case ROW_REPORTED:
                switch (message_classify(r->err)) {
                case OUTCOME_OK:
                        return K_OK;
                case OUTCOME_PERMANENT:
                        if (message_error_scope(r->err) == SCOPE_REQUEST && !r->alone && b->sent_together > 1)
                                return K_SUSPECT;
                        return K_DEAD;
                case OUTCOME_CONFIG:
                        return K_CONFIG;
                case OUTCOME_FATAL:
                        return K_FATAL;
                default:
                        return K_TRANSIENT;
                }
        }
        return K_LEFT;
}

static bool resolved(enum kind k) {
        return k == K_OK || k == K_DEAD;
}

enum key_state batch_key_state(const struct batch *b, size_t i) {
        for (int j = (int)i; j >= 0; j = b->rows[j].prev) {
                const struct batch_row *e = &b->rows[j];
                enum kind k = kind_of(b, e);

                if (b->planned) {
                        /* Final: delivered, or dead (never to be sent, so never overtaken). */
                        if (e->action == ACT_FINISH || e->dead)
                                continue;
                        return KEY_BLOCKED;
                }
                if (k == K_OK || k == K_DEAD)
                        continue;
                if (e->state == ROW_IN_FLIGHT || e->state == ROW_WAITING || e->state == ROW_CLAIMED ||
                    k == K_SUSPECT)
                        return KEY_WAIT;
                return KEY_BLOCKED;
        }
        return KEY_CLEAR;
}

enum send_answer batch_send_answer(const struct batch *b, size_t i) {
        const struct batch_row *r = &b->rows[i];

        if (r->map_error || r->topic_error)
                return SEND_NEVER;
        /* The nearest earlier row of the sequence that is not dead decides: sent means its own
         * predecessors were fine; held back or refused means this one must wait too. */
        for (int j = r->prev; j >= 0; j = b->rows[j].prev) {
                const struct batch_row *e = &b->rows[j];

                if (kind_of(b, e) == K_DEAD)
                        continue;
                if (e->state == ROW_IN_FLIGHT || e->state == ROW_REPORTED)
                        return SEND_NOW;
                if (e->state == ROW_WAITING || e->state == ROW_CLAIMED)
                        return SEND_WAIT;
                return SEND_HOLD;
        }
        /* The first of its sequence here: an earlier batch's rows of it must all be in Kafka
         * first. Sent while they are only in flight, it could overtake one that then fails, and
         * that batch's plan could not know (within one batch the plan sees both). */
        if (r->after_blocked)
                return SEND_HOLD;
        if (r->after)
                switch (batch_key_state(r->after, r->after_row)) {
                case KEY_CLEAR:
                        return SEND_NOW;
                case KEY_WAIT:
                        return SEND_WAIT;
                case KEY_BLOCKED:
                        return SEND_HOLD;
                }
        return SEND_NOW;
}

bool batch_may_send(const struct batch *b, size_t i) {
        return batch_send_answer(b, i) == SEND_NOW;
}

void batch_held(struct batch *b, size_t i) {
        if (b->rows[i].state == ROW_WAITING)
                b->waiting--;
        b->rows[i].state = ROW_HELD;
}

void batch_waiting(struct batch *b, size_t i) {
        if (b->rows[i].state != ROW_WAITING)
                b->waiting++;
        b->rows[i].state = ROW_WAITING;
}

void batch_sent(struct batch *b, size_t i, bool alone) {
        struct batch_row *r = &b->rows[i];

        if (r->state == ROW_WAITING)
                b->waiting--;
        r->state = ROW_IN_FLIGHT;
        r->alone = alone;
        r->err = RD_KAFKA_RESP_ERR_NO_ERROR;
        r->partition = RD_KAFKA_PARTITION_UA;
        if (!alone)
                b->sent_together++;
}

void batch_refused(struct batch *b, size_t i, rd_kafka_resp_err_t err) {
        b->rows[i].state = ROW_REFUSED;
        b->rows[i].err = err;
}

void batch_reported(struct batch *b, size_t i, rd_kafka_resp_err_t err, int32_t partition) {
        b->rows[i].state = ROW_REPORTED;
        b->rows[i].err = err;
        b->rows[i].partition = partition;
}

void batch_unreported(struct batch *b, size_t i) {
        b->rows[i].state = ROW_UNREPORTED;
}

/* Is a later row of row i's (topic, key) already acknowledged? */
static bool later_delivered(const struct batch *b, const struct batch_row *r) {
        for (int j = r->next; j >= 0; j = b->rows[j].next)
                if (kind_of(b, &b->rows[j]) == K_OK)
                        return true;
        return false;
}

static bool earlier_unresolved(const struct batch *b, const struct batch_row *r) {
        for (int j = r->prev; j >= 0; j = b->rows[j].prev)
                if (!resolved(kind_of(b, &b->rows[j])))
                        return true;
        return false;
}

ssize_t batch_next_resend(const struct batch *b) {
        for (size_t i = 0; i < b->n; i++) {
                const struct batch_row *r = &b->rows[i];

                if (kind_of(b, r) == K_SUSPECT && !earlier_unresolved(b, r) && !later_delivered(b, r))
                        return (ssize_t)i;
        }
        return -1;
}

/* Where deliveries succeeded in this batch: (topic, partition) pairs, few in practice. */
struct landing {
        const char *topic;
        int32_t partition;
};

/* partition RD_KAFKA_PARTITION_UA: anywhere in the topic. */
static bool landed(const struct landing *l, size_t n, const char *topic, int32_t partition) {
        for (size_t i = 0; i < n; i++)
                if ((partition == RD_KAFKA_PARTITION_UA || l[i].partition == partition) &&
                    strcmp(l[i].topic, topic) == 0)
                        return true;
        return false;
}

static void describe(struct batch_row *r, const char *fmt_suffix) {
        const char *what = r->state == ROW_REFUSED ? "Kafka refused the message" : "delivery failed";

        if (r->map_error)
                snprintf(r->reason, sizeof(r->reason), "%s", r->map_error);
        else if (r->topic_error)
                snprintf(r->reason, sizeof(r->reason), "topic '%.*s%s' can never exist in Kafka: %s",
                         (int)utf8_fit(r->topic, 100), r->topic, strlen(r->topic) > 100 ? "…" : "",
                         r->topic_error);
        else if (r->state == ROW_UNREPORTED || r->state == ROW_IN_FLIGHT)
                snprintf(r->reason, sizeof(r->reason), "no delivery report");
        else
                snprintf(r->reason, sizeof(r->reason), "%s: %s (%s)", what, rd_kafka_err2str(r->err),
                         rd_kafka_err2name(r->err));
        if (fmt_suffix)
                snprintf(r->reason + strlen(r->reason), sizeof(r->reason) - strlen(r->reason), "%s",
                         fmt_suffix);
        /* Every cut above counts bytes: one that lands inside a character would make PostgreSQL
         * refuse the whole finish ("invalid byte sequence for encoding UTF8"), again and again,
         * and nothing of the table would move any more. */
        utf8_repair(r->reason);
}

#define ORDER_SUFFIX                                                                                       \
        "; not sent again: a later row of its key is already in Kafka, so sending it would break per-key " \
        "order"

void batch_plan(struct batch *b, const struct batch_rules *rules, const struct pause_set *paused_keys) {
        struct landing *at = calloc(b->n + 1, sizeof(*at));
        size_t n_at = 0;
        bool any_ok = false, answered = false, transient = false, fatal = false;

        b->planned = false; /* the rows' actions are rewritten below */
        b->delivered = b->dead = b->failed = b->left = b->overtaken = 0;
        b->first_error = NULL;
        for (size_t i = 0; i < b->n; i++) {
                const struct batch_row *r = &b->rows[i];

                if (kind_of(b, r) != K_OK)
                        continue;
                any_ok = true;
                /* Without memory every row reads as landed nowhere: attempts are then spent
                 * only by the other rules' caution, never wrongly. */
                if (at && !landed(at, n_at, r->topic, r->partition))
                        at[n_at++] = (struct landing){ r->topic, r->partition };
        }
        for (size_t i = 0; i < b->n; i++) {
                struct batch_row *r = &b->rows[i];
                enum kind k = kind_of(b, r);

                r->action = ACT_LEAVE;
                r->attempts_inc = 0;
                r->dead = r->pause_topic = r->pause_key = r->probe_failed = r->overtaken = false;
                r->reason[0] = 0;
                /* A broker's own verdict on a row (too large, refused topic) shows Kafka is
                 * there; a transient one (not enough replicas) shows it cannot take writes. */
                if (r->state == ROW_REPORTED && r->err > 0 &&
                    (k == K_DEAD || k == K_SUSPECT || k == K_CONFIG))
                        answered = true;
                switch (k) {
                case K_LEFT:
                case K_HELD:
                        b->left++;
                        continue;
                case K_FATAL:
                        fatal = true;
                        b->left++;
                        continue;
                case K_OK:
                        r->action = ACT_FINISH;
                        b->delivered++;
                        continue;
                case K_DEAD:
                        r->action = ACT_FAIL;
                        r->attempts_inc = 1;
                        r->dead = true;
                        describe(r, NULL);
                        break;
                case K_SUSPECT:
                case K_CONFIG:
                case K_TRANSIENT:
                        r->action = ACT_FAIL;
                        if (later_delivered(b, r)) {
                                /* Kafka holds a later row of its (topic, key): sent now it
                                 * would arrive out of order. */
                                r->overtaken = r->dead = true;
                                r->attempts_inc = 1;
                                describe(r, ORDER_SUFFIX);
                                break;
                        }
                        describe(r, NULL);
                        if (k == K_SUSPECT) {
                                /* Not sent alone yet (an earlier row of its key is pending, or
                                 * time ran out): it comes again, first of its key. */
                                describe(r, "; not yet sent alone to tell whose fault it is");
                                break;
                        }
                        if (k == K_CONFIG) {
                                /* Refused while other rows of the topic went through (one
                                 * partition in reassignment): hold the key, not the topic. */
                                if (any_ok && at && landed(at, n_at, r->topic, RD_KAFKA_PARTITION_UA))
                                        r->pause_key = r->key != NULL;
                                else
                                        r->pause_topic = true;
                                break;
                        }
                        if (any_ok && at && !landed(at, n_at, r->topic, RD_KAFKA_PARTITION_UA)) {
                                /* Nothing of its topic went through while other topics did:
                                 * the topic is refused as a whole. */
                                r->pause_topic = true;
                                break;
                        }
                        if ((any_ok && at && r->state == ROW_REPORTED &&
                             r->partition != RD_KAFKA_PARTITION_UA &&
                             !landed(at, n_at, r->topic, r->partition)) ||
                            (!any_ok && r->key && paused_keys &&
                             pause_set_known(paused_keys, r->topic, r->key))) {
                                /* Its partition took nothing while the topic's others did: a
                                 * partition outage. Hold the key back so the oldest rows (all of
                                 * that partition, soon) do not block the rest. A key held back
                                 * before that fails again is the same outage. */
                                r->pause_key = r->key != NULL;
                                break;
                        }
                        /* Neither its topic nor its partition is to blame: Kafka may be.
                         * Its own failure only when its partition took other messages; the
                         * relay's own purges (deadline, drain) are never the row's fault. */
                        transient = true;
                        r->attempts_inc = any_ok && at && r->state == ROW_REPORTED &&
                                        r->err != RD_KAFKA_RESP_ERR__PURGE_QUEUE &&
                                        r->err != RD_KAFKA_RESP_ERR__PURGE_INFLIGHT &&
                                        landed(at, n_at, r->topic, r->partition)
                                ? 1
                                : 0;
                        if (r->attempts_inc && r->attempts + 1 >= rules->max_attempts) {
                                char suffix[48];

                                r->dead = true;
                                snprintf(suffix, sizeof(suffix), "; failed %d times on its own",
                                         r->attempts + 1);
                                describe(r, suffix);
                        }
                        break;
                }
                if (r->dead) {
                        b->dead++;
                        b->overtaken += r->overtaken;
                } else {
                        b->failed++;
                        if (!b->first_error)
                                b->first_error = r->reason;
                }
        }
        free(at);
        if (fatal)
                b->verdict = VERDICT_FATAL;
        else if (any_ok || answered)
                b->verdict = VERDICT_SUCCESS;
        else if (transient)
                b->verdict = VERDICT_FAILURE;
        else
                b->verdict = VERDICT_NONE;
        /* A probe that delivered nothing may have hit the one broken partition: the keys it
         * tried wait, so the next probe tests others instead of the same oldest rows. */
        if (rules->probe && b->verdict == VERDICT_FAILURE)
                for (size_t i = 0; i < b->n; i++)
                        b->rows[i].probe_failed = b->rows[i].key && kind_of(b, &b->rows[i]) == K_TRANSIENT;
        b->planned = true;
}
