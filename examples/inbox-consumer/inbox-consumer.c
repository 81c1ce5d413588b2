/* inbox-consumer.c -- An example Kafka consumer that applies each relayed event exactly once per group, through sql/inbox.sql.
 *
 * The pattern, for every batch of messages:
 *
 *   BEGIN;
 *   SELECT outbox_inbox_accept(group, outbox-source, outbox-id);   -- per message: first time?
 *   ... the effect, only for the messages accepted ...               -- here: one row each
 *   COMMIT;
 *   then commit the Kafka offsets.
 *
 * A crash before COMMIT rolls back the entries with the effects: the messages come again and are
 * applied then. A crash after COMMIT and before the offset commit brings the messages again too,
 * and then outbox_inbox_accept() says false: they are skipped. Either way every event's effect is
 * applied once per consumer group. The effect is where your own writes go; this one inserts a row
 * into inbox_example_effect (effect.sql) so that a test can count them.
 *
 * Usage: inbox-consumer [-b BATCH] [-X PROPERTY=VALUE]... BOOTSTRAP GROUP CONNINFO TOPIC...
 *   -b  messages per transaction at most (default 500)
 *   -X  any librdkafka consumer property (e.g. -X session.timeout.ms=6000)
 * SIGTERM or SIGINT: the batch in hand is finished, the consumer leaves its group, exit 0.
 * A batch that fails for a reason that passes (connection, deadlock, serialization, failover) is
 * tried again; one that fails for a reason that stays (a constraint, a missing table) stops the
 * consumer with exit 1, its offsets uncommitted: never skipped in silence.
 * Put keepalives=1 keepalives_idle=10 tcp_user_timeout=30000 in CONNINFO so that a database that
 * stops answering is noticed.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

static volatile sig_atomic_t stopping;

static void on_signal(int sig) {
        (void)sig;
        stopping = 1;
}

/* One message of the batch, with its identity read from the relay's headers. */
struct event {
        rd_kafka_message_t *msg;
        const char *source; /* outbox-source, NUL-terminated copy */
        char id[24]; /* outbox-id, as text */
        bool first; /* outbox_inbox_accept() said true */
};

/* Copies header `name` of m into buf (NUL-terminated); false when m has no such header. */
static bool header(const rd_kafka_message_t *m, const char *name, char *buf, size_t size) {
        rd_kafka_headers_t *h;
        const void *v;
        size_t len;

        if (rd_kafka_message_headers(m, &h) != RD_KAFKA_RESP_ERR_NO_ERROR ||
            rd_kafka_header_get_last(h, name, &v, &len) != RD_KAFKA_RESP_ERR_NO_ERROR || !v || len >= size)
                return false;
        memcpy(buf, v, len);
        buf[len] = 0;
        return true;
}

/* outbox-id is a bigint in decimal: anything else is not the relay's. */
static bool is_id(const char *s) {
        char *end;

        errno = 0;
        (void)strtoll(s, &end, 10);
        return *s && !*end && errno == 0;
}

/* Ascending (source, id): the order the accepts take their locks in (sql/inbox.sql). */
static int by_identity(const void *a, const void *b) {
        const struct event *x = *(struct event *const *)a, *y = *(struct event *const *)b;
        int c = strcmp(x->source, y->source);
        int64_t i = strtoll(x->id, NULL, 10), j = strtoll(y->id, NULL, 10);

        if (c || i != j)
                return c ? c : (i > j) - (i < j);
        /* Two copies of one event in a batch: the earlier one is the first, so the effects keep
         * the order the messages came in. */
        if (x->msg->partition != y->msg->partition)
                return (x->msg->partition > y->msg->partition) - (x->msg->partition < y->msg->partition);
        return (x->msg->offset > y->msg->offset) - (x->msg->offset < y->msg->offset);
}

enum verdict {
        COMMITTED,
        RETRY, /* rolled back by something that passes (a lost connection, a deadlock, a failover):
                * the same batch again */
        BROKEN, /* rolled back by something that stays (a constraint the effect breaks, a missing
                 * table): retrying forever would stall the group in silence, so the consumer stops */
};

/* What a failed statement means: SQLSTATE class 08 (connection), 40 (serialization failure,
 * deadlock), 57P01-03 (shutdown), 25006 (read-only: a standby, e.g. during a failover). */
static enum verdict classify(const PGresult *res) {
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

        if (!state || strncmp(state, "08", 2) == 0 || strncmp(state, "40", 2) == 0 ||
            strncmp(state, "57P0", 4) == 0 || strcmp(state, "25006") == 0)
                return RETRY;
        return BROKEN;
}

/* NULL when the statement did what `want` says (its result cleared), else its failed result. */
static PGresult *failed(PGconn *db, PGresult *res, ExecStatusType want) {
        if (PQresultStatus(res) == want) {
                PQclear(res);
                return NULL;
        }
        fprintf(stderr, "inbox-consumer: %s", res ? PQresultErrorMessage(res) : PQerrorMessage(db));
        return res ? res : PQmakeEmptyPGresult(db, PGRES_FATAL_ERROR);
}

/* One transaction: accept every event, apply the first ones, commit. */
static enum verdict apply_batch(PGconn *db, const char *group, struct event *ev, size_t n,
                                struct event **sorted, size_t *applied) {
        PGresult *res;
        enum verdict v;

        *applied = 0;
        if ((res = failed(db, PQexec(db, "BEGIN"), PGRES_COMMAND_OK)))
                goto rollback;
        for (size_t i = 0; i < n; i++)
                sorted[i] = &ev[i];
        qsort(sorted, n, sizeof(*sorted), by_identity);
        for (size_t i = 0; i < n; i++) {
                const char *params[3] = { group, sorted[i]->source, sorted[i]->id };

                res = PQexecParams(db, "SELECT outbox_inbox_accept($1, $2, $3)", 3, NULL, params, NULL, NULL,
                                   0);
                if (PQresultStatus(res) != PGRES_TUPLES_OK) {
                        res = failed(db, res, PGRES_TUPLES_OK);
                        goto rollback;
                }
                sorted[i]->first = PQgetvalue(res, 0, 0)[0] == 't';
                PQclear(res);
        }
        /* The effects, in the order the messages came (per partition: the relay's per-key order). */
        for (size_t i = 0; i < n; i++) {
                const rd_kafka_message_t *m = ev[i].msg;
                char partition[16], offset[24];
                const char *params[7] = { group,     ev[i].source, ev[i].id,  rd_kafka_topic_name(m->rkt),
                                          partition, offset,       m->payload };
                int lengths[7] = { 0, 0, 0, 0, 0, 0, (int)m->len };
                int formats[7] = { 0, 0, 0, 0, 0, 0, 1 };

                if (!ev[i].first)
                        continue; /* applied before: by us before a crash, or by another member */
                snprintf(partition, sizeof(partition), "%" PRId32, m->partition);
                snprintf(offset, sizeof(offset), "%" PRId64, m->offset);
                res = PQexecParams(
                        db,
                        "INSERT INTO inbox_example_effect"
                        " (consumer_group, source, outbox_id, topic, kafka_partition, kafka_offset, payload)"
                        " VALUES ($1, $2, $3, $4, $5, $6, $7)",
                        7, NULL, params, lengths, formats, 0);
                if ((res = failed(db, res, PGRES_COMMAND_OK)))
                        goto rollback;
                (*applied)++;
        }
        /* A COMMIT whose answer was lost may have committed: trying the batch again is still
         * right, its accepts then say false. */
        if (!(res = failed(db, PQexec(db, "COMMIT"), PGRES_COMMAND_OK)))
                return COMMITTED;

rollback:
        v = classify(res);
        PQclear(res);
        PQclear(PQexec(db, "ROLLBACK"));
        *applied = 0;
        return v;
}

/* The next offset of every partition in the batch, committed synchronously. */
static void commit_offsets(rd_kafka_t *rk, struct event *ev, size_t n) {
        rd_kafka_topic_partition_list_t *offsets = rd_kafka_topic_partition_list_new((int)n);
        rd_kafka_resp_err_t err;

        for (size_t i = 0; i < n; i++) {
                const rd_kafka_message_t *m = ev[i].msg;
                rd_kafka_topic_partition_t *p = rd_kafka_topic_partition_list_find(
                        offsets, rd_kafka_topic_name(m->rkt), m->partition);

                if (!p)
                        p = rd_kafka_topic_partition_list_add(offsets, rd_kafka_topic_name(m->rkt),
                                                              m->partition);
                if (m->offset + 1 > p->offset)
                        p->offset = m->offset + 1;
        }
        err = rd_kafka_commit(rk, offsets, 0);
        /* After a rebalance the partitions may be another member's now: it reads them again from
         * the last committed offset, and the inbox skips what was applied here. */
        if (err)
                fprintf(stderr, "inbox-consumer: offset commit: %s (the messages will come again)\n",
                        rd_kafka_err2str(err));
        rd_kafka_topic_partition_list_destroy(offsets);
}

/* Up to `max` messages: waits for the first, then takes what follows within 100 ms. */
static size_t collect(rd_kafka_t *rk, struct event *ev, size_t max, size_t *skipped) {
        size_t n = 0;

        while (n < max && !stopping) {
                rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, n ? 100 : 500);
                char id[24], source[256];

                if (!m) {
                        if (n)
                                break;
                        continue;
                }
                if (m->err) {
                        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                                fprintf(stderr, "inbox-consumer: %s\n", rd_kafka_message_errstr(m));
                        rd_kafka_message_destroy(m);
                        continue;
                }
                if (!header(m, "outbox-source", source, sizeof(source)) ||
                    !header(m, "outbox-id", id, sizeof(id)) || !is_id(id)) {
                        /* Not from outbox-relay: nothing to deduplicate on. Said, and passed over. */
                        fprintf(stderr,
                                "inbox-consumer: %s [%" PRId32 "] @%" PRId64
                                ": no outbox-source or no integer outbox-id header, skipped\n",
                                rd_kafka_topic_name(m->rkt), m->partition, m->offset);
                        (*skipped)++;
                        ev[n].msg = m; /* still committed with the batch */
                        ev[n].source = NULL;
                        n++;
                        continue;
                }
                ev[n].msg = m;
                ev[n].source = strdup(source);
                snprintf(ev[n].id, sizeof(ev[n].id), "%s", id);
                if (!ev[n].source) {
                        fprintf(stderr, "inbox-consumer: out of memory\n");
                        exit(1);
                }
                n++;
        }
        return n;
}

static PGconn *connect_db(const char *conninfo) {
        for (unsigned wait_ms = 100;; wait_ms = wait_ms < 5000 ? wait_ms * 2 : 5000) {
                PGconn *db = PQconnectdb(conninfo);

                if (PQstatus(db) == CONNECTION_OK)
                        return db;
                fprintf(stderr, "inbox-consumer: PostgreSQL: %s", PQerrorMessage(db));
                PQfinish(db);
                if (stopping)
                        return NULL;
                nanosleep(&(struct timespec){ .tv_sec = wait_ms / 1000,
                                              .tv_nsec = (wait_ms % 1000) * 1000000L },
                          NULL);
        }
}

int main(int argc, char **argv) {
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        rd_kafka_topic_partition_list_t *topics;
        struct event *ev, **sorted;
        size_t batch = 500, total = 0, repeats = 0, skipped = 0;
        bool broken = false;
        char errstr[512];
        rd_kafka_t *rk;
        PGconn *db;
        int opt;

        while ((opt = getopt(argc, argv, "b:X:")) != -1) {
                char *eq;

                switch (opt) {
                case 'b':
                        batch = strtoul(optarg, NULL, 10);
                        break;
                case 'X':
                        eq = strchr(optarg, '=');
                        if (!eq) {
                                fprintf(stderr, "inbox-consumer: -X wants PROPERTY=VALUE\n");
                                return 2;
                        }
                        *eq = 0;
                        if (rd_kafka_conf_set(conf, optarg, eq + 1, errstr, sizeof(errstr)) !=
                            RD_KAFKA_CONF_OK) {
                                fprintf(stderr, "inbox-consumer: %s\n", errstr);
                                return 2;
                        }
                        break;
                default:
                        return 2;
                }
        }
        if (argc - optind < 4 || batch < 1) {
                fprintf(stderr,
                        "usage: inbox-consumer [-b BATCH] [-X PROPERTY=VALUE]... BOOTSTRAP GROUP CONNINFO "
                        "TOPIC...\n");
                return 2;
        }
        const char *bootstrap = argv[optind], *group = argv[optind + 1], *conninfo = argv[optind + 2];

        signal(SIGTERM, on_signal);
        signal(SIGINT, on_signal);
        /* Offsets are committed by hand, after the database commit: never before the effect. */
        if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, errstr, sizeof(errstr)) ||
            rd_kafka_conf_set(conf, "group.id", group, errstr, sizeof(errstr)) ||
            rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr, sizeof(errstr)) ||
            rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", errstr, sizeof(errstr))) {
                fprintf(stderr, "inbox-consumer: %s\n", errstr);
                return 2;
        }
        rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
        if (!rk) {
                fprintf(stderr, "inbox-consumer: %s\n", errstr);
                return 1;
        }
        rd_kafka_poll_set_consumer(rk);
        topics = rd_kafka_topic_partition_list_new(argc - optind - 3);
        for (int i = optind + 3; i < argc; i++)
                rd_kafka_topic_partition_list_add(topics, argv[i], RD_KAFKA_PARTITION_UA);
        if (rd_kafka_subscribe(rk, topics)) {
                fprintf(stderr, "inbox-consumer: cannot subscribe\n");
                rd_kafka_topic_partition_list_destroy(topics);
                rd_kafka_destroy(rk);
                return 1;
        }
        rd_kafka_topic_partition_list_destroy(topics);
        db = connect_db(conninfo);
        ev = calloc(batch, sizeof(*ev));
        sorted = calloc(batch, sizeof(*sorted));
        if (!ev || !sorted) {
                fprintf(stderr, "inbox-consumer: out of memory\n");
                return 1;
        }

        while (db && !stopping) {
                size_t n = collect(rk, ev, batch, &skipped), m = 0, applied = 0;
                bool done = true;

                /* Messages without an identity are only committed; the others go to the inbox. */
                for (size_t i = 0; i < n; i++)
                        if (ev[i].source) {
                                struct event e = ev[m];

                                ev[m++] = ev[i];
                                ev[i] = e;
                        }
                /* The same batch until it commits: a lost connection or a deadlock rolled it back.
                 * Stopping meanwhile gives it up uncommitted: it comes again to whoever reads next. */
                for (enum verdict v;
                     m && (v = apply_batch(db, group, ev, m, sorted, &applied)) != COMMITTED;) {
                        const char *standby = PQparameterStatus(db, "in_hot_standby");

                        if (v == BROKEN) {
                                fprintf(stderr,
                                        "inbox-consumer: the batch cannot be applied; stopping without "
                                        "committing its offsets (it comes again once that is fixed)\n");
                                broken = true;
                                done = false;
                                break;
                        }
                        /* Lost, or a standby now (read-only after a failover): connect anew. */
                        if (PQstatus(db) != CONNECTION_OK || (standby && strcmp(standby, "on") == 0)) {
                                PQfinish(db);
                                db = connect_db(conninfo);
                        } else if (!stopping)
                                sleep(1);
                        if (!db || stopping) {
                                done = false;
                                break;
                        }
                }
                if (done && n)
                        commit_offsets(rk, ev, n);
                if (done) {
                        total += applied;
                        repeats += m - applied;
                }
                for (size_t i = 0; i < n; i++) {
                        free((char *)ev[i].source);
                        rd_kafka_message_destroy(ev[i].msg);
                }
                if (!done)
                        break;
        }
        printf("inbox-consumer: group %s: %zu applied, %zu repeats skipped, %zu messages without identity\n",
               group, total, repeats, skipped);
        rd_kafka_consumer_close(rk);
        rd_kafka_destroy(rk);
        PQfinish(db);
        free(ev);
        free(sorted);
        return db && !broken ? 0 : 1;
}
