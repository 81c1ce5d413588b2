/* notify.h -- The systemd notify protocol (READY, STATUS, STOPPING, WATCHDOG); no-ops without systemd. */
#pragma once

#include <stdbool.h>

#include "util.h"

struct notifier {
        usec_t watchdog_interval; /* 0 = no watchdog; else half of WATCHDOG_USEC */
        usec_t watchdog_last;
};

void notify_init(struct notifier *n);
void notify_ready(struct notifier *n);
void notify_reloading(struct notifier *n);
void notify_stopping(struct notifier *n);
void notify_status(struct notifier *n, const char *status);
/* EXTEND_TIMEOUT_USEC: the start or stop is still making progress; allow `usec` more. */
void notify_extend_timeout(struct notifier *n, usec_t usec);
/* Pings the watchdog when half its interval has passed since the last ping. */
void notify_watchdog(struct notifier *n, usec_t now);
/* Upper bound for the loop's sleep so the watchdog is served in time. */
usec_t notify_watchdog_due(const struct notifier *n, usec_t now);
