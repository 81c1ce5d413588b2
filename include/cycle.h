/* cycle.h -- One batch's life: claim -> produce -> await -> re-send suspects alone -> plan -> finish; the rules live in batch.c. */
#pragma once

#include <stdbool.h>

#include "batch.h"
#include "relay.h"
#include "util.h"

/* Runs one cycle. A probe (the breaker's half-open batch) claims a few rows and skips the keys
 * earlier probes failed on. Returns the number of rows claimed, or -errno: -ECONNRESET,
 * -ETIMEDOUT, -EIO (database), -ENOMEM, -ECANCELED (second signal), -ENOTRECOVERABLE (the
 * producer broke, or reports went missing: exit for a restart). *verdict says what the batch
 * told about Kafka (VERDICT_NONE when it was no test of it). */
int cycle_run(struct relay *r, usec_t now, bool probe, enum batch_verdict *verdict);
