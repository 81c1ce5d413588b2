/* config.h -- Load the libconfig file and validate it into a typed struct (DESIGN §7). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <librdkafka/rdkafka.h>

#include "util.h"

#define CONFIG_DEFAULT_PATH "/etc/outbox-relay/outbox-relay.conf"

enum finish_mode {
        FINISH_DELETE, /* delete published rows (default) */
        FINISH_MARK, /* set published_at; retention deletes old marked rows */
};

enum ordering_mode {
        ORDERING_KEY, /* every relay claims; per-(topic, key) bucket locks keep per-key order */
        ORDERING_SINGLE, /* one relay per table publishes at a time (leader lock), the others stand by */
        ORDERING_NONE, /* every relay claims with no order between relays */
};

/* One librdkafka property from the `kafka` group, already translated to librdkafka's name
 * (e.g. `linger_ms` -> "linger.ms") and value rendered as a string. */
struct kafka_prop {
        char *name; /* librdkafka property name */
        char *setting; /* name as written in the file, for messages */
        char *value;
        int line; /* line in `file` */
};

struct relay_config {
        char *file; /* path the configuration was read from */

        struct {
                char *conninfo; /* libpq conninfo string or URI; may hold a password */
                char *table; /* outbox table, optionally schema-qualified "s.t" */
                char *channel; /* LISTEN channel */
                usec_t connect_timeout; /* relay's own deadline for one connection attempt */
                usec_t statement_timeout; /* session statement_timeout */
                usec_t keepalives_idle; /* TCP keepalive idle time */
                usec_t tcp_user_timeout; /* TCP_USER_TIMEOUT */
        } postgres;

        struct {
                struct kafka_prop *props; /* in file order */
                size_t n_props;
                char *file; /* file holding the kafka group; NULL: `file` */
                int line; /* line of the kafka group; 0: no group */
        } kafka;

        struct {
                int batch_size; /* 1..10000, default 2000 */
                int pipelines; /* batches in flight at once, each on a connection of its own, 1..8, default 2 */
                usec_t poll_interval; /* wait for NOTIFY at most this long, default 5s */
                usec_t batch_timeout; /* deadline of one claim->publish->finish cycle, default 60s */
                usec_t drain_timeout; /* on SIGTERM finish the batch in flight within, default 30s */
                enum finish_mode finish; /* default FINISH_DELETE */
                enum ordering_mode ordering; /* default ORDERING_KEY */
                char *source; /* the outbox-source header; "" (default): derived (message_source()) */
                int max_attempts; /* dead-letter a row failing on its own after N tries, default 10 */
                usec_t retention; /* FINISH_MARK: delete marked rows older than this, 0 = keep, default 7d */
                usec_t status_interval; /* periodic summary line, default 60s */
        } relay;

        struct {
                int failure_threshold; /* consecutive transient batch failures that open it, default 5 */
                double failure_ratio; /* failure ratio over `window` batches that opens it, default 0.5 */
                int window; /* batches in the ratio window, default 20 */
                usec_t cooldown; /* first open period, default 5s */
                usec_t cooldown_max; /* cap of the growing open period, default 5min */
        } breaker;

        struct {
                usec_t base; /* backoff base, default 200ms */
                usec_t cap; /* backoff cap, default 30s */
        } retry;

        struct {
                int level; /* syslog priority, default LOG_INFO */
        } log;

        struct {
                char *listen; /* "ADDRESS:PORT" of /health, /ready, /metrics; "" = off */
                int connection_limit; /* connections served at once, default 16 */
                usec_t timeout; /* a connection idle this long is closed, default 10s */
        } http;
};

/* One key of the table, as outbox-relay.conf(5) describes it. */
struct config_key_doc {
        const char *group, *name;
        const char *type; /* "integer", "number", "duration", "string" */
        char def[96]; /* the default, written as in the file */
        char range[96]; /* what it may be */
        bool reloadable; /* SIGHUP applies it; otherwise it needs a restart */
        const char *doc; /* one paragraph */
};

/* The keys of the configuration table, for the manual page generated from it (tools/mkman.c),
 * in the table's order: i from 0 to config_key_count() - 1. -ENOENT past the end. */
size_t config_key_count(void);
int config_key_describe(size_t i, struct config_key_doc *d);

/* Fills `c` with the defaults. Strings are heap copies owned by `c`. */
int config_defaults(struct relay_config *c);

/* Reads and validates `path` into `c` (which must be zeroed or freed). On failure returns
 * -errno (-ENOENT/-EACCES/-EIO for the file, -EINVAL for its content) and writes one line
 * "FILE:LINE: setting: what is wrong (got X)" into err; `c` is then left empty. Does not log. */
int config_load(const char *path, struct relay_config *c, char *err, size_t errsz);

/* Frees everything `c` owns and zeroes it. Accepts an already freed struct. */
void config_free(struct relay_config *c);

/* Builds the producer configuration: the relay's defaults (idempotence, acks=all,
 * murmur2_random, bounded message.timeout.ms below relay.batch_timeout, …), then every
 * `kafka` property on top. Refuses properties that would break the guarantees. On failure
 * returns NULL and writes "FILE:LINE: kafka.setting: reason" into err. Caller owns the result
 * (hand it to rd_kafka_new() or rd_kafka_conf_destroy() it). kafka_guard_conf() and
 * kafka_guard_probe() (kafka_guard.h) say more. */
rd_kafka_conf_t *config_kafka_conf(const struct relay_config *c, char *err, size_t errsz);

/* SIGHUP: settings that only take effect after a restart (postgres.*, kafka.*, http.*,
 * relay.batch_timeout, relay.ordering) are copied from `running` into `next`, so `next`
 * describes what really runs. Their names, where they differ, go comma-separated into
 * `changed`. Returns how many differed, or -ENOMEM with `next` untouched and `changed` empty
 * (every copy is made before anything is replaced). */
int config_keep_restart_only(const struct relay_config *running, struct relay_config *next, char *changed,
                             size_t changedsz);

/* config_keep_restart_only() taking its string copies from dup (strdup()'s contract: a heap
 * copy, or NULL when out of memory), so that tests can fail any one of them. */
int config_keep_restart_only_with(const struct relay_config *running, struct relay_config *next,
                                  char *changed, size_t changedsz, char *(*dup)(const char *));

/* Copies conninfo into buf with any password value replaced by "***" (key=value and URI
 * forms). Returns buf. Same as conninfo_redact() (conninfo.h). */
const char *config_redact_conninfo(const char *conninfo, char *buf, size_t bufsz);
