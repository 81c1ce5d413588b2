/* log.c -- Leveled logging to stderr with syslog priority prefixes that journald understands. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The one piece of process-wide state outside the context struct: the log level is read by
 * every module that may log, and threading it through every call would buy nothing. */
static int log_level = LOG_INFO;

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

static void log_vmsg(int prio, const char *suffix, const char *fmt, va_list ap) {
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
