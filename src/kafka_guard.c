/* kafka_guard.c -- The producer configuration: relay defaults, user properties, the guarantees. */
#include "kafka_guard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfgutil.h"

/* Properties the relay's promises depend on. Each user property is checked against them by
 * reading back what changed, so aliases (request.required.acks, delivery.timeout.ms, …) and
 * spellings ("0" for false) cannot slip past. */
enum guard {
        GUARD_IDEMPOTENCE,
        GUARD_ACKS,
        GUARD_PARTITIONER,
        GUARD_QUEUING,
        GUARD_DR_ONLY_ERROR,
        GUARD_TRANSACTIONAL_ID,
        GUARD_MESSAGE_TIMEOUT,
        GUARD_MAX_IN_FLIGHT,
        GUARD_RETRIES,
        GUARD_ENABLED_EVENTS,
        _GUARD_MAX,
};

static const char *const guard_props[_GUARD_MAX] = {
        [GUARD_IDEMPOTENCE] = "enable.idempotence",
        [GUARD_ACKS] = "acks",
        [GUARD_PARTITIONER] = "partitioner",
        [GUARD_QUEUING] = "queuing.strategy",
        [GUARD_DR_ONLY_ERROR] = "delivery.report.only.error",
        [GUARD_TRANSACTIONAL_ID] = "transactional.id",
        [GUARD_MESSAGE_TIMEOUT] = "message.timeout.ms",
        [GUARD_MAX_IN_FLIGHT] = "max.in.flight",
        [GUARD_RETRIES] = "retries",
        [GUARD_ENABLED_EVENTS] = "enabled_events",
};

struct guard_snapshot {
        char v[_GUARD_MAX][256];
};

static void guard_snapshot(rd_kafka_conf_t *conf, struct guard_snapshot *snap) {
        for (size_t i = 0; i < _GUARD_MAX; i++) {
                size_t sz = sizeof(snap->v[i]);

                if (rd_kafka_conf_get(conf, guard_props[i], snap->v[i], &sz) != RD_KAFKA_CONF_OK)
                        snap->v[i][0] = 0; /* unset (transactional.id) */
        }
}

/* Returns NULL when value v of guard g is acceptable, else the reason. */
static const char *guard_check(enum guard g, const char *v, const struct relay_config *c, char *buf,
                               size_t size) {
        long long batch_ms = (long long)(c->relay.batch_timeout / USEC_PER_MSEC), n;
        char bt[32];

        switch (g) {
        case GUARD_IDEMPOTENCE:
                return strcmp(v, "true") == 0 ? NULL
                                              : "refused: the relay needs the idempotent producer "
                                                "(enable.idempotence=true) for ordered, "
                                                "duplicate-free retries";
        case GUARD_ACKS:
                return strcmp(v, "-1") == 0 ? NULL
                                            : "refused: the relay needs acks=all so that an "
                                              "acknowledged message cannot be lost";
        case GUARD_PARTITIONER:
                return strcmp(v, "random") != 0 ? NULL
                                                : "refused: partitioner random breaks per-key order "
                                                  "(default murmur2_random)";
        case GUARD_QUEUING:
                return strcmp(v, "fifo") == 0 ? NULL : "refused: queuing.strategy must be fifo to keep order";
        case GUARD_DR_ONLY_ERROR:
                return strcmp(v, "false") == 0 ? NULL
                                               : "refused: the relay needs a delivery report for "
                                                 "every message";
        case GUARD_TRANSACTIONAL_ID:
                return v[0] == 0 ? NULL
                                 : "refused: the transactional producer is not supported (the "
                                   "database transaction is the unit of work)";
        case GUARD_MESSAGE_TIMEOUT: {
                /* The relay keeps min(batch_timeout / 4, 5 s) of each batch for the finish;
                 * deliveries must be decided before that, or the relay purges them itself. */
                long long reserve = batch_ms / 4 < 5000 ? batch_ms / 4 : 5000;

                n = strtoll(v, NULL, 10);
                if (n > 0 && n < batch_ms - reserve)
                        return NULL;
                snprintf(buf, size,
                         "must be 1..%lld, below relay.batch_timeout (%s) less the %lld ms kept for "
                         "the finish, so that every batch ends; 0 (infinite) is refused",
                         batch_ms - reserve - 1,
                         cfgutil_format_duration(c->relay.batch_timeout, bt, sizeof(bt)), reserve);
                return buf;
        }
        case GUARD_MAX_IN_FLIGHT:
                n = strtoll(v, NULL, 10);
                return n >= 1 && n <= 5 ? NULL : "refused: must be 1..5 with the idempotent producer";
        case GUARD_RETRIES:
                n = strtoll(v, NULL, 10);
                return n >= 1 ? NULL : "refused: must be at least 1 with the idempotent producer";
        case GUARD_ENABLED_EVENTS:
                return "refused: managed by the relay";
        case _GUARD_MAX:
                break;
        }
        return NULL;
}

/* Where the kafka group is, for errors about the properties together. */
static const char *group_file(const struct relay_config *c) {
        return c->kafka.file ? c->kafka.file : c->file ? c->file : "(defaults)";
}

int kafka_guard_conf(const struct relay_config *c, struct kafka_prop *resolve, const char *const *prop_files,
                     rd_kafka_conf_t **ret, char *err, size_t errsz) {
        const char *file = c->file ? c->file : "(defaults)";
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        long long batch_ms = (long long)(c->relay.batch_timeout / USEC_PER_MSEC);
        char errstr[512], mto[32], buf[512];
        struct guard_snapshot before, after;
        int r = -EINVAL;
        size_t sz;
        const char *defaults[][2] = {
                { "enable.idempotence", "true" },
                { "acks", "all" },
                { "partitioner", "murmur2_random" },
                { "linger.ms", "5" },
                { "compression.codec", "lz4" },
                { "socket.keepalive.enable", "true" },
                /* librdkafka's default (10 s) delays even the report that a broker is gone. */
                { "reconnect.backoff.max.ms", "1000" },
                { "message.timeout.ms", mto },
                { "statistics.interval.ms", "0" },
        };

        *ret = NULL;
        if (!conf) {
                cfgutil_errorf(err, errsz, file, 0, "kafka: out of memory");
                return -ENOMEM;
        }
        /* Below the batch deadline, so a batch ends even when Kafka never answers. */
        snprintf(mto, sizeof(mto), "%lld", batch_ms / 2 < 30000 ? batch_ms / 2 : 30000);
        for (size_t i = 0; i < ELEMENTSOF(defaults); i++)
                if (rd_kafka_conf_set(conf, defaults[i][0], defaults[i][1], errstr, sizeof(errstr)) !=
                    RD_KAFKA_CONF_OK) {
                        cfgutil_errorf(err, errsz, file, 0, "kafka: cannot set the relay's default %s=%s: %s",
                                       defaults[i][0], defaults[i][1], errstr);
                        goto fail;
                }

        for (size_t i = 0; i < c->kafka.n_props; i++) {
                const struct kafka_prop *p = &c->kafka.props[i];
                const char *pfile = prop_files && prop_files[i] ? prop_files[i] : file;
                rd_kafka_conf_res_t res;
                char errstr2[512];

                guard_snapshot(conf, &before);
                res = rd_kafka_conf_set(conf, p->name, p->value, errstr, sizeof(errstr));
                /* One settable property really has underscores in its name: log_level. */
                if (res == RD_KAFKA_CONF_UNKNOWN && strcmp(p->name, p->setting) != 0) {
                        res = rd_kafka_conf_set(conf, p->setting, p->value, errstr2, sizeof(errstr2));
                        if (res == RD_KAFKA_CONF_OK && resolve) {
                                char *lit = strdup(p->setting);

                                if (!lit) {
                                        cfgutil_errorf(err, errsz, pfile, p->line, "kafka.%s: out of memory",
                                                       p->setting);
                                        r = -ENOMEM;
                                        goto fail;
                                }
                                free(resolve[i].name);
                                resolve[i].name = lit;
                        }
                        if (res == RD_KAFKA_CONF_INVALID)
                                memcpy(errstr, errstr2, sizeof(errstr));
                }
                if (res != RD_KAFKA_CONF_OK) {
                        errstr[strcspn(errstr, "\n")] = 0; /* some of its messages end in one */
                        cfgutil_errorf(err, errsz, pfile, p->line, "kafka.%s: %s", p->setting, errstr);
                        goto fail;
                }
                guard_snapshot(conf, &after);
                for (size_t g = 0; g < _GUARD_MAX; g++) {
                        const char *why;
                        char q[128];

                        if (strcmp(before.v[g], after.v[g]) == 0)
                                continue;
                        why = guard_check((enum guard)g, after.v[g], c, buf, sizeof(buf));
                        if (why) {
                                cfgutil_errorf(err, errsz, pfile, p->line, "kafka.%s: %s (got %s)",
                                               p->setting, why, cfgutil_quote(p->value, q, sizeof(q)));
                                goto fail;
                        }
                }
        }

        /* The relay has no default broker: a sample-like file must not silently talk to
         * localhost in production. test.mock.num.brokers brings its own cluster. */
        sz = sizeof(buf);
        if (rd_kafka_conf_get(conf, "bootstrap.servers", buf, &sz) != RD_KAFKA_CONF_OK || !buf[0]) {
                sz = sizeof(buf);
                if (rd_kafka_conf_get(conf, "test.mock.num.brokers", buf, &sz) != RD_KAFKA_CONF_OK ||
                    strtol(buf, NULL, 10) <= 0) {
                        cfgutil_errorf(err, errsz, group_file(c), c->kafka.line,
                                       "kafka.bootstrap_servers: required");
                        goto fail;
                }
        }
        *ret = conf;
        return 0;

fail:
        rd_kafka_conf_destroy(conf);
        return r;
}

/* The probe's producer has nothing to say that concerns the check. */
static void quiet_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
        (void)rk;
        (void)level;
        (void)fac;
        (void)buf;
}

int kafka_guard_probe(const struct relay_config *c, char *err, size_t errsz) {
        rd_kafka_conf_t *conf;
        rd_kafka_t *rk;
        char errstr[512];
        int r;

        r = kafka_guard_conf(c, NULL, NULL, &conf, err, errsz);
        if (r < 0)
                return r;
        rd_kafka_conf_set_log_cb(conf, quiet_log);
        rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
        if (!rk) {
                /* librdkafka says _INVALID_ARG for what it refuses in the configuration (its
                 * final checks, SASL, the SSL context); anything else (threads, memory) is no
                 * fault of the file and must not stop systemd from restarting the relay. */
                r = rd_kafka_last_error() == RD_KAFKA_RESP_ERR__INVALID_ARG ? -EINVAL : -EIO;
                rd_kafka_conf_destroy(conf);
                errstr[strcspn(errstr, "\n")] = 0;
                cfgutil_errorf(err, errsz, group_file(c), c->kafka.line,
                               "kafka: cannot create the producer: %s", errstr);
                return r;
        }
        rd_kafka_destroy(rk);
        return 0;
}
