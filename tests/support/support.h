/* support.h -- Shared test support: the test bed's servers, the relay as a process, topic checks. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

/* ---- environment (written by scripts/testbed.sh); a missing variable aborts the test run ---- */
const char *ts_env(const char *name);
/* "host=… port=… dbname=… user=…" for the test bed's PostgreSQL. */
const char *ts_conninfo(void);
/* A topic name unique to this run: "<prefix>-<pid>-<counter>". Returns a static buffer copy. */
char *ts_topic(const char *prefix);
/* Monotonic milliseconds. */
int64_t ts_now_ms(void);

/* ---- PostgreSQL ---- */
PGconn *ts_pg_connect(void);
/* Runs SQL (printf-style) and fails the test on error. */
void ts_pg_exec(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* First column of the first row as int64 (fails the test on error or NULL). */
int64_t ts_pg_int(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Waits until the query's first value is true, re-running it every 20 ms; fails the test with
 * the query and its last value when timeout_ms passes first. */
void ts_pg_wait(PGconn *c, int timeout_ms, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Installs (idempotently) outbox_test_copy: a row trigger copying what the writer wrote of every
 * committed outbox row (id, topic, key, payload, headers, created_at), so tests can compare what
 * arrived with what was written even after the relay deleted it. */
void ts_pg_install_copy(PGconn *c);

/* Runs scripts/testbed.sh CMD on the running test bed (kafka-stop, kafka-start, pg-restart …). */
void ts_testbed(const char *cmd);

/* ---- the relay as a process ---- */
struct ts_relay {
        pid_t pid;
        char dir[256];
        char conf[300];
        char log[300];
        char http[80]; /* ts_relay_http() */
};
/* The http group of every relay a test starts: any free port (the relay logs which one), so
 * relays never meet on one port. A config a test writes itself for a reload adds it too, or the
 * reload reads http.listen as changed. */
#define TS_HTTP_GROUP "http = { listen = \"127.0.0.1:0\"; };\n"
/* Writes a config (postgres and kafka groups filled in, and TS_HTTP_GROUP unless extra_groups has an http group; `relay_group` is the body of the relay
 * group, e.g. "finish = \"mark\"; poll_interval = \"1s\";") and starts the daemon. */
void ts_relay_start(struct ts_relay *r, const char *relay_group, const char *extra_groups);
/* The same with `kafka_extra` added to the kafka group (e.g. "message_timeout_ms = 3000;"). */
void ts_relay_start_ex(struct ts_relay *r, const char *relay_group, const char *kafka_extra,
                       const char *extra_groups);

/* Everything a test may vary; NULL fields take the defaults of ts_relay_start(). */
struct ts_relay_opts {
        const char *relay_group; /* body of the relay group */
        const char *kafka_extra; /* added to the kafka group */
        const char *extra_groups; /* further groups (breaker, retry, …) */
        const char *bootstrap; /* instead of $KAFKA_BOOTSTRAP (e.g. a mock-kafka cluster) */
        const char *log_level; /* default "info" */
        const char *notify_socket; /* NOTIFY_SOCKET for the child */
        const char *watchdog_usec; /* WATCHDOG_USEC for the child (WATCHDOG_PID is set to it) */
        const char *conninfo; /* instead of the test bed's */
        const char *postgres_extra; /* added to the postgres group */
};
void ts_relay_start_opts(struct ts_relay *r, const struct ts_relay_opts *o);
/* Sends sig and waits up to timeout_ms; returns the exit status (or 128+signal). */
int ts_relay_stop(struct ts_relay *r, int sig, int timeout_ms);
/* True once the relay's log contains `needle` (waits up to timeout_ms). */
bool ts_relay_log_wait(struct ts_relay *r, const char *needle, int timeout_ms);
/* Lines of the relay's log containing `needle`. */
int ts_relay_log_count(const struct ts_relay *r, const char *needle);
/* Waits until at least `n` lines of the relay's log contain `needle`; fails the test (and shows
 * the log) when timeout_ms passes first. */
void ts_relay_log_wait_n(struct ts_relay *r, const char *needle, int n, int timeout_ms);
/* What the relay's log says about its batches, its breaker and its database connection. */
struct ts_relay_log_stats {
        long long published; /* "drained: published N, …" (the last one), -1 if absent */
        long long dead_lettered; /* "…, dead-lettered M", -1 if absent */
        int failed_batches; /* "batch of N rows: nothing delivered" */
        long long failed_batch_rows; /* their N, summed */
        int partial_batches; /* "batch of N rows: D delivered, some failed" */
        long long partial_failed_rows; /* their N - D, summed */
        int rolled_back_batches; /* "finishing a batch of N rows failed" */
        long long rolled_back_rows; /* their N, summed */
        int breaker_opened; /* "circuit breaker opened" */
        int breaker_reopened; /* "circuit breaker probe failed" */
        int breaker_closed; /* "circuit breaker closed" */
        int db_lost; /* "lost the PostgreSQL connection" */
        int db_back; /* "connected to PostgreSQL again" */
};
void ts_relay_log_stats(const struct ts_relay *r, struct ts_relay_log_stats *out);
/* Rows a relay may have published more than once without a crash (DESIGN §1.2): only a row whose
 * delivery it saw fail (the ack may have been lost) or whose batch it rolled back after Kafka took
 * it can come again. */
long long ts_relay_log_resendable(const struct ts_relay_log_stats *s);
void ts_relay_dump_log(const struct ts_relay *r);
/* cmocka teardown: kills (and shows the log of) any relay a failed test left running. */
int ts_teardown(void **state);

/* ---- HTTP (libcurl) ---- */
/* The relay's "ADDRESS:PORT" from its "serving HTTP on …" line (waits up to timeout_ms; fails the
 * test without one). Kept in r->http. */
const char *ts_relay_http(struct ts_relay *r, int timeout_ms);
/* One request (method "GET", "HEAD", "POST", …) to http://addr/path; returns the status, or 0 when
 * no answer came within 5 s. *body (may be NULL) gets the heap body. */
long ts_http(const char *addr, const char *method, const char *path, char **body);
/* Waits until `path` answers `status` (and, with `needle`, a body holding it); fails the test,
 * showing the last answer, when timeout_ms passes first. */
void ts_http_wait(const char *addr, const char *path, long status, const char *needle, int timeout_ms);
/* The value of the sample `series` (e.g. "outbox_relay_batches_total" or
 * "outbox_relay_events_published_total{topic=\"t\"}") in a /metrics text; -1 when absent. */
double ts_metric(const char *text, const char *series);

/* ---- the systemd notify protocol, without systemd ---- */
struct ts_notify {
        int fd;
        char path[108];
        char *log; /* every datagram received so far, "\n"-separated, in order */
        size_t len;
};
/* Binds an AF_UNIX datagram socket at a fresh path (pass n->path as NOTIFY_SOCKET). */
void ts_notify_open(struct ts_notify *n);
void ts_notify_close(struct ts_notify *n);
/* Reads datagrams until one holds the line `want` (e.g. "READY=1") or timeout_ms passes. */
bool ts_notify_wait(struct ts_notify *n, const char *want, int timeout_ms);
/* Reads whatever arrives for `ms`. */
void ts_notify_drain(struct ts_notify *n, int ms);
/* How many received lines start with `prefix`. */
int ts_notify_count(const struct ts_notify *n, const char *prefix);

/* ---- mock-kafka ($MOCK_KAFKA_BIN), driven over its stdin ---- */
struct ts_mock {
        pid_t pid;
        int in, out;
        char bootstrap[320];
};
void ts_mock_start(struct ts_mock *m, const char *topic, int partitions);
/* The same with `brokers` brokers (ids 1..brokers). */
void ts_mock_start_n(struct ts_mock *m, const char *topic, int partitions, int brokers);
/* Sends one command; fails the test unless the reply is OK. */
void ts_mock_cmd(struct ts_mock *m, const char *cmd);
void ts_mock_stop(struct ts_mock *m);

/* ---- a steady writer ---- */

/* A thread inserting `rows` rows at `per_second`, 50 per transaction (one writer, so commit
 * order is id order), keys key-0 … key-(keys-1), payload "event N", header n=N. Heap-allocated
 * and tracked: ts_teardown stops and frees one that a failed test left running. */
struct ts_load;
struct ts_load *ts_load_start(const char *topic, int rows, int per_second, int keys);
/* Rows written so far. */
int ts_load_written(const struct ts_load *l);
/* Waits until at least `rows` rows are written (or all of them); fails the test when the writer
 * failed or timeout_ms passed first. */
void ts_load_wait(const struct ts_load *l, int rows, int timeout_ms);
/* Joins the writer, fails the test if it hit an error, frees it; returns the rows written. */
int ts_load_finish(struct ts_load *l);

/* ---- Kafka ---- */
struct ts_header {
        char *name;
        char *value;
        size_t value_len;
};
struct ts_msg {
        char *topic;
        int32_t partition;
        int64_t offset;
        char *key; /* NULL = no key */
        size_t key_len;
        char *value; /* NULL = tombstone */
        size_t value_len;
        int64_t timestamp;
        rd_kafka_timestamp_type_t tstype;
        struct ts_header *headers;
        size_t n_headers;
        int64_t outbox_id; /* from the outbox-id header, -1 if absent */
};
struct ts_msgs {
        struct ts_msg *v;
        size_t n;
};
/* Reads every partition of each topic (NULL-terminated list) from the beginning until `expect`
 * messages arrived and nothing more came for settle_ms, or timeout_ms passed. */
void ts_consume(const char *const *topics, size_t expect, int timeout_ms, int settle_ms, struct ts_msgs *out);
/* The same from another cluster (e.g. a mock-kafka cluster). */
void ts_consume_from(const char *bootstrap, const char *const *topics, size_t expect, int timeout_ms,
                     int settle_ms, struct ts_msgs *out);
void ts_msgs_free(struct ts_msgs *m);
/* Creates a topic on the real broker ($KAFKA_BOOTSTRAP) through the Admin API, with one
 * topic-level config when `name` is not NULL. Fails the test on error. */
void ts_create_topic(const char *topic, int partitions, const char *name, const char *value);
/* Sets one topic-level config (AlterConfigs: the topic's other dynamic configs go back to their
 * defaults). Fails the test on error. */
void ts_alter_topic(const char *topic, const char *name, const char *value);
/* Messages the topic holds (high minus low watermark, every partition). Fails the test when the
 * broker does not say. */
int64_t ts_topic_messages(const char *topic);
/* Produces one message and waits for its delivery report; returns the error code. */
rd_kafka_resp_err_t ts_produce(const char *topic, const char *key, const void *value, size_t len);

/* ---- verification ---- */
struct ts_verify {
        size_t expected; /* rows in outbox_test_copy for the topics */
        size_t consumed; /* messages read */
        size_t missing; /* expected rows with no message */
        size_t duplicates; /* consumed - distinct outbox ids */
        size_t mismatched; /* messages whose topic/key/payload/headers/timestamp differ from what was
                             * written: headers as jsonb_each_text lists the object (plus one
                             * outbox-id with the row's id and one outbox-source, derived from
                             * the database and the table outbox unless ts_verify_source() set
                             * it), timestamp = created_at in UTC
                             * truncated to ms, CreateTime */
        size_t order_violations; /* first deliveries of a key out of id order */
        size_t unexpected; /* messages with an outbox-id not in the copy */
};
/* Compares the copy table's rows for `topics` (NULL-terminated) with the consumed messages and
 * prints the first few differences. `exclude_dead`: rows dead-lettered are not expected. */
void ts_verify(PGconn *c, const char *const *topics, const struct ts_msgs *m, bool exclude_dead,
               struct ts_verify *out);
/* The outbox-source later ts_verify() calls expect (the relays' relay.source); NULL: derived. */
void ts_verify_source(const char *source);
/* Waits until no pending (not published, not dead) row of the topics is left; on a timeout says
 * how many are left and returns false. */
bool ts_wait_drained(PGconn *c, const char *const *topics, int timeout_ms);
/* What a user checks of a ts_verify: `expected` rows committed, each arrived as written (none
 * missing, mismatched or unexpected), first deliveries in key order, at most `max_dup` twice.
 * Fails the test otherwise. */
void ts_verify_assert(const struct ts_verify *v, size_t expected, size_t max_dup);

/* ---- seeded choices ---- */
/* xorshift64*: the next number from *state (never 0), for tests that print their seed so a run
 * can be replayed. */
uint64_t ts_rand(uint64_t *state);
