/* kafka_guard.h -- The producer configuration: relay defaults, user properties, the guarantees. */
#pragma once

#include <stddef.h>

#include <librdkafka/rdkafka.h>

#include "config.h"

/* Builds the producer configuration into *ret: the relay's defaults (idempotence, acks=all,
 * murmur2_random, message.timeout.ms below relay.batch_timeout, …), then every property of
 * c->kafka on top, each checked against the properties the relay's promises depend on (read
 * back after setting it, so aliases and spellings cannot slip past). A property from an
 * included file is blamed on prop_files[i] when given. With `resolve` (c->kafka.props itself,
 * while loading) a property that librdkafka knows only by the name as written (log_level) gets
 * that name. Returns 0 (caller owns *ret: hand it to rd_kafka_new() or
 * rd_kafka_conf_destroy() it), -EINVAL with "FILE:LINE: kafka.setting: reason" in err, or
 * -ENOMEM; *ret is NULL on failure. */
int kafka_guard_conf(const struct relay_config *c, struct kafka_prop *resolve, const char *const *prop_files,
                     rd_kafka_conf_t **ret, char *err, size_t errsz);

/* Builds the producer configuration and creates and destroys a producer with it, so that a
 * combination of properties librdkafka refuses only in rd_kafka_new() is a configuration
 * error too (no connection is made: brokers are contacted by the producer's threads later).
 * Returns 0; -EINVAL when the configuration is refused, with "FILE:LINE: kafka: cannot
 * create the producer: librdkafka's reason" in err (the line of the kafka group); -ENOMEM or
 * -EIO when the producer could not be created for another reason (threads, memory: not the
 * file's fault), with a message in err too. Does not log. */
int kafka_guard_probe(const struct relay_config *c, char *err, size_t errsz);
