/* notify.c -- The systemd notify protocol (READY, STATUS, STOPPING, WATCHDOG); no-ops without systemd. */
#include "notify.h"

#include <stdio.h>

#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#else
static int sd_notify(int unset, const char *s) {
        (void)unset;
        (void)s;
        return 0;
}
static int sd_watchdog_enabled(int unset, uint64_t *usec) {
        (void)unset;
        (void)usec;
        return 0;
}
#endif

void notify_init(struct notifier *n) {
        uint64_t usec = 0;

        n->watchdog_interval = 0;
        n->watchdog_last = 0;
        if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0)
                n->watchdog_interval = usec / 2;
}

void notify_ready(struct notifier *n) {
        (void)n;
        sd_notify(0, "READY=1");
}

void notify_reloading(struct notifier *n) {
        (void)n;
        sd_notify(0, "RELOADING=1");
}

void notify_stopping(struct notifier *n) {
        (void)n;
        sd_notify(0, "STOPPING=1");
}

void notify_status(struct notifier *n, const char *status) {
        char buf[512];

        (void)n;
        snprintf(buf, sizeof(buf), "STATUS=%s", status);
        sd_notify(0, buf);
}

void notify_extend_timeout(struct notifier *n, usec_t usec) {
        char buf[64];

        (void)n;
        snprintf(buf, sizeof(buf), "EXTEND_TIMEOUT_USEC=%llu", (unsigned long long)usec);
        sd_notify(0, buf);
}

void notify_watchdog(struct notifier *n, usec_t now) {
        if (!n->watchdog_interval || now - n->watchdog_last < n->watchdog_interval)
                return;
        sd_notify(0, "WATCHDOG=1");
        n->watchdog_last = now;
}

usec_t notify_watchdog_due(const struct notifier *n, usec_t now) {
        if (!n->watchdog_interval)
                return USEC_INFINITY;
        return n->watchdog_last + n->watchdog_interval > now ? n->watchdog_last + n->watchdog_interval - now
                                                             : 0;
}
