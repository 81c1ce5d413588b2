/* batch.h -- One batch's decisions, from facts to a plan: what may be sent, what each delivery result means for its row, what the batch says about Kafka; pure, no I/O. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <librdkafka/rdkafka.h>

#include "pause.h"

/* Where a claimed row stands with Kafka. The loop reports each step; the rules below read it. */
enum row_state {
        ROW_CLAIMED, /* not handled (yet): left pending, untouched */
        ROW_HELD, /* not sent: an earlier row of its (topic, key) did not go through */
        ROW_WAITING, /* not sent yet: an earlier batch still in flight has rows of its (topic, key)
                      * whose fate is not known yet (batch_follow) */
        ROW_REFUSED, /* produce() refused it at once (err) */
        ROW_IN_FLIGHT, /* handed to librdkafka, its report is still to come */
        ROW_REPORTED, /* its delivery report came (err, partition) */
        ROW_UNREPORTED, /* it was in flight and no report came (the relay purged and gave up) */
};

/* What the plan does with the row in the finishing transaction. */
enum row_action {
        ACT_LEAVE, /* nothing: the row stays pending exactly as it was */
        ACT_FINISH, /* delivered: delete or mark it */
        ACT_FAIL, /* record the failure: attempts += attempts_inc, last_error = reason, dead */
};

struct batch_row {
        /* From the claim; borrowed. */
        int64_t id;
        const char *topic;
        const char *key; /* NULL: no key, so no order to keep */
        int attempts; /* attempts spent before this batch */
        const char *map_error; /* why the row cannot become a message (bad headers), or NULL */
        const char *topic_error; /* why Kafka can never accept its topic (batch_prepare), or NULL */

        /* From Kafka, set through batch_sent() and friends. */
        enum row_state state;
        rd_kafka_resp_err_t err;
        int32_t partition; /* where it went, RD_KAFKA_PARTITION_UA if it never got one */
        bool alone; /* its latest send was the only message in flight (a re-send) */

        /* The plan, written by batch_plan(). */
        enum row_action action;
        int attempts_inc; /* 1 when the failure was the row's own, 0 for an outage */
        bool dead; /* park it in the dead-letter state */
        bool pause_topic; /* Kafka refuses the row's topic while it takes others: pause it */
        bool pause_key; /* the row's partition takes nothing: hold its (topic, key) back */
        bool probe_failed; /* a probe that delivered nothing: try other keys next time */
        bool overtaken; /* a later row of its (topic, key) is already in Kafka */
        char reason[320]; /* for ACT_FAIL: last_error */

        /* The neighbours in the batch with the same (topic, key), -1 = none (batch_prepare). */
        int prev, next;
        /* The first row of its (topic, key) in this batch only: the last row of the same
         * (topic, key) in the newest earlier batch still in flight, which must be delivered
         * before this one is sent (batch_follow); NULL = none. */
        const struct batch *after;
        size_t after_row;
        bool after_blocked; /* that batch was planned already and did not deliver them all */
};

/* What a batch says about Kafka's availability, for the circuit breaker. */
enum batch_verdict {
        VERDICT_NONE, /* not a test of Kafka: nothing was sent, or only refused locally */
        VERDICT_SUCCESS, /* Kafka took messages, or answered about them (a row's own fault) */
        VERDICT_FAILURE, /* messages were sent and none went through: Kafka is the problem */
        VERDICT_FATAL, /* the producer is broken: stop and let systemd restart the relay */
};

struct batch {
        struct batch_row *rows;
        size_t n;
        size_t sent_together; /* rows sent in the first round (each re-send goes alone) */
        size_t waiting; /* rows in ROW_WAITING */
        bool planned; /* batch_plan() ran: every row's fate is final */
        /* (topic, key) -> its last row, for batch_follow() (open addressing, -1 = empty). */
        int *index;
        size_t index_size;

        /* batch_plan() fills these. */
        enum batch_verdict verdict;
        size_t delivered, dead, failed, left, overtaken;
        const char *first_error; /* reason of the first failed row not dead-lettered, or NULL */
};

/* Rules that come from the configuration. */
struct batch_rules {
        int max_attempts; /* a row failing on its own that often is dead-lettered */
        bool probe; /* the batch is the circuit breaker's half-open probe */
};

/* Allocates n zeroed rows (b->rows) for the caller to fill with the claim's facts. -ENOMEM. */
int batch_init(struct batch *b, size_t n);
void batch_free(struct batch *b);

/* After the claim's facts are in: links the rows of each (topic, key) and checks what can be
 * checked before sending (topic names Kafka can never accept). -ENOMEM. */
int batch_prepare(struct batch *b);

/* May row i be produced now? Not when it cannot become a message, and not while an earlier row
 * of its (topic, key) was held back or refused: sending it would overtake that row. */
bool batch_may_send(const struct batch *b, size_t i);

/* The same question, with the answers a batch that follows others needs. */
enum send_answer {
        SEND_NOW,
        SEND_WAIT, /* an earlier row of its (topic, key) is not resolved yet (in another batch, or
                    * waiting itself): ask again when reports came */
        SEND_HOLD, /* an earlier row of its (topic, key) was not delivered: never in this batch */
        SEND_NEVER, /* it cannot become a message (the plan dead-letters it) */
};
enum send_answer batch_send_answer(const struct batch *b, size_t i);

/* Links `later`'s first row of every (topic, key) to the last row of the same (topic, key) in
 * `earlier`, unless it already follows a batch: called for every batch still in flight, newest
 * first, so each row follows the newest. Rows without a key follow nothing. An earlier batch
 * already planned is not linked to: its verdict on the (topic, key) is taken at once (delivered:
 * nothing to wait for; not delivered: the row is held back). */
void batch_follow(struct batch *later, const struct batch *earlier);

/* Where the rows of row i's (topic, key) stand in batch b, up to and including row i (its last
 * one, as batch_follow links): CLEAR when every one was delivered or is dead on its own (never
 * to be sent, so it cannot be overtaken), BLOCKED when one was not delivered (held, refused,
 * failed; or anything unresolved once the batch is planned), WAIT otherwise. */
enum key_state { KEY_CLEAR, KEY_WAIT, KEY_BLOCKED };
enum key_state batch_key_state(const struct batch *b, size_t i);

/* What happened to row i. */
void batch_held(struct batch *b, size_t i);
void batch_waiting(struct batch *b, size_t i);
void batch_sent(struct batch *b, size_t i, bool alone);
void batch_refused(struct batch *b, size_t i, rd_kafka_resp_err_t err);
void batch_reported(struct batch *b, size_t i, rd_kafka_resp_err_t err, int32_t partition);
void batch_unreported(struct batch *b, size_t i);

/* A broker-side rejection fails a whole produce request, innocent neighbours included: such a
 * row is only a suspect until it fails alone. The next suspect to re-send alone, or -1: the
 * oldest one with no earlier row of its (topic, key) unresolved and no later one already
 * acknowledged (sending it then would overtake that row). */
ssize_t batch_next_resend(const struct batch *b);

/* Decides every row's action, the pauses and the verdict from the facts. `paused_keys` (may be
 * NULL) tells which (topic, key) pairs were held back before. Can be called again. */
void batch_plan(struct batch *b, const struct batch_rules *rules, const struct pause_set *paused_keys);
