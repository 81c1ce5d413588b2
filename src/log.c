/* log.c -- Leveled logging to stderr with syslog priority prefixes that journald understands. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#ifdef HAVE_SYSTEMD
#include <systemd/sd-journal.h>
#endif

/* The one piece of process-wide state outside the context struct: the log level is read by
 * every module that may log, and threading it through every call would buy nothing. */
static int log_level = LOG_INFO;
/* Set once by log_open(): stderr is a journal stream, so events can carry fields. */
static bool log_to_journal;

static const struct {
        const char *name;
        const char *id;
} events[_LOG_EV_MAX] = {
        [LOG_EV_STARTED] = { "started", "889fd886b460483ca313c667e966a6dc" },
        [LOG_EV_READY] = { "ready", "6c4a6e6ea42e4303abb914f1ce5b08a6" },
        [LOG_EV_SUMMARY] = { "summary", "7c66e008dd1041989935798ac2044162" },
        [LOG_EV_BREAKER_OPEN] = { "breaker_open", "f7baf0c754d7480fb56aa125330d1af4" },
        [LOG_EV_BREAKER_CLOSED] = { "breaker_closed", "21ec1d39ff97402f82fba60c8e540ce3" },
        [LOG_EV_DB_LOST] = { "database_lost", "a2dbe43c5c364f37b17a517cd913e21e" },
        [LOG_EV_DB_BACK] = { "database_back", "8c518785fb254eb7ab1ae7a905e4df03" },
        [LOG_EV_DEAD_LETTER] = { "dead_letter", "ae0e40a5ea4e45998e4671e3aac24f58" },
        [LOG_EV_RELOAD] = { "reload", "f811116ecf8b489bb50813baaa06eaeb" },
        [LOG_EV_STOPPING] = { "stopping", "9ac8e23043364ddebd5126910c3cbc0f" },
        [LOG_EV_STOPPED] = { "stopped", "b5e63d76dc0b4cd9964062cdf642702d" },
        [LOG_EV_KAFKA_ERROR] = { "kafka_error", "bff283e4b3bd45f5b6a12f31d326bbb0" },
        [LOG_EV_LEADER] = { "leader", "5e8386100b70467293dd11ae05598cd2" },
        [LOG_EV_STANDBY] = { "standby", "c0e632ad6fc844df95ea2311430515da" },
        [LOG_EV_SHARING] = { "sharing", "6e71abb407f247bf9f673532a680be38" },
};

const char *log_event_name(enum log_event ev) {
        return ev < _LOG_EV_MAX ? events[ev].name : "?";
}

const char *log_event_message_id(enum log_event ev) {
        return ev < _LOG_EV_MAX ? events[ev].id : "";
}

void log_open(void) {
        const char *js = getenv("JOURNAL_STREAM");
        unsigned long long dev, ino;
        struct stat st;

        log_to_journal = false;
#ifdef HAVE_SYSTEMD
        /* systemd's documented test: stderr is the journal iff its device and inode match. */
        if (js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) == 0 &&
            (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino)
                log_to_journal = true;
#else
        (void)js;
        (void)dev;
        (void)ino;
        (void)st;
#endif
}

int log_event_fields(char *buf, size_t bufsz, int prio, enum log_event ev, const char *const *fields,
                     const char *message) {
        size_t used = 0;
        int count = 0;
        char fixed[5][600];

        snprintf(fixed[0], sizeof(fixed[0]), "MESSAGE=%s", message);
        snprintf(fixed[1], sizeof(fixed[1]), "PRIORITY=%d", prio);
        snprintf(fixed[2], sizeof(fixed[2]), "MESSAGE_ID=%s", log_event_message_id(ev));
        snprintf(fixed[3], sizeof(fixed[3]), "OUTBOX_EVENT=%s", log_event_name(ev));
        snprintf(fixed[4], sizeof(fixed[4]), "SYSLOG_IDENTIFIER=outbox-relay");
        for (size_t i = 0; i < 5 + (fields ? 64 : 0); i++) {
                const char *f = i < 5 ? fixed[i] : fields[i - 5];
                size_t len;

                if (!f)
                        break;
                len = strlen(f) + 1;
                if (used + len > bufsz)
                        return -ENOBUFS;
                memcpy(buf + used, f, len);
                used += len;
                count++;
        }
        return count;
}

static const char *const level_names[] = {
        [LOG_ERR] = "error", [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
        [LOG_INFO] = "info", [LOG_DEBUG] = "debug",
};

void log_set_level(int level) {
        log_level = level;
}

int log_get_level(void) {
        return log_level;
}

int log_level_from_string(const char *s) {
        for (size_t i = 0; i < ELEMENTSOF(level_names); i++)
                if (level_names[i] && strcmp(level_names[i], s) == 0)
                        return (int)i;
        return -EINVAL;
}

const char *log_level_to_string(int level) {
        if (level < 0 || (size_t)level >= ELEMENTSOF(level_names) || !level_names[level])
                return "?";
        return level_names[level];
}

static _printf_(3, 0) void log_vmsg(int prio, const char *suffix, const char *fmt, va_list ap) {
        char buf[2048];
        int n;

        if (prio > log_level)
                return;
        n = vsnprintf(buf, sizeof(buf), fmt, ap);
        if (n < 0)
                return;
        /* One write per line so lines from several threads or processes do not interleave. */
        fprintf(stderr, "<%d>%s%s\n", prio, buf, suffix ? suffix : "");
}

void log_msg(int prio, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        log_vmsg(prio, NULL, fmt, ap);
        va_end(ap);
}

int log_errno(int prio, int r, const char *fmt, ...) {
        char suffix[128];
        va_list ap;

        snprintf(suffix, sizeof(suffix), ": %s", strerror(r < 0 ? -r : r));
        va_start(ap, fmt);
        log_vmsg(prio, suffix, fmt, ap);
        va_end(ap);
        return r;
}

void log_event(int prio, enum log_event ev, const char *const *fields, const char *fmt, ...) {
        char message[2048];
        va_list ap;

        if (prio > log_level)
                return;
        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        (void)ev;
        (void)fields;
#ifdef HAVE_SYSTEMD
        if (log_to_journal) {
                char buf[8192];
                struct iovec iov[80];
                int n = log_event_fields(buf, sizeof(buf), prio, ev, fields, message);

                if (n > 0 && n <= (int)ELEMENTSOF(iov)) {
                        char *p = buf;

                        for (int i = 0; i < n; i++) {
                                iov[i].iov_base = p;
                                iov[i].iov_len = strlen(p);
                                p += iov[i].iov_len + 1;
                        }
                        /* sd_journal_sendv() drops the entry silently without journald; that
                         * only happens when stderr was the journal, so falling back is moot. */
                        if (sd_journal_sendv(iov, n) >= 0)
                                return;
                }
        }
#endif
        fprintf(stderr, "<%d>%s\n", prio, message);
}
