/* log.h -- Leveled logging to stderr with syslog priority prefixes that journald understands. */
#pragma once

#include <syslog.h>

#include "util.h"

/* Levels are syslog priorities: LOG_ERR (3) .. LOG_DEBUG (7). */
void log_set_level(int level);
int log_get_level(void);

/* Parses "error", "warning", "notice", "info", "debug"; returns the priority or -EINVAL. */
int log_level_from_string(const char *s);
const char *log_level_to_string(int level);

/* Writes "<prio>message\n" to stderr when prio <= level. Structured fields (journald) come
 * through log_struct() later; this is the seam. */
void log_msg(int prio, const char *fmt, ...) _printf_(2, 3);

/* Logs and returns r (a -errno), so call sites can `return log_error_errno(r, ...)`. */
int log_errno(int prio, int r, const char *fmt, ...) _printf_(3, 4);

/* Events operators filter on (`journalctl OUTBOX_EVENT=dead_letter`), each with a stable
 * MESSAGE_ID. */
enum log_event {
        LOG_EV_STARTED,
        LOG_EV_READY,
        LOG_EV_SUMMARY,
        LOG_EV_BREAKER_OPEN,
        LOG_EV_BREAKER_CLOSED,
        LOG_EV_DB_LOST,
        LOG_EV_DB_BACK,
        LOG_EV_DEAD_LETTER,
        LOG_EV_RELOAD,
        LOG_EV_STOPPING,
        LOG_EV_STOPPED,
        LOG_EV_KAFKA_ERROR,
        LOG_EV_LEADER,
        LOG_EV_STANDBY,
        LOG_EV_SHARING,
        _LOG_EV_MAX,
};

const char *log_event_name(enum log_event ev); /* "dead_letter" */
const char *log_event_message_id(enum log_event ev); /* 32 lowercase hex digits */

/* Decides once whether stderr is connected to the journal ($JOURNAL_STREAM names it): then
 * events go to journald with their fields; otherwise everything is a plain stderr line. */
void log_open(void);

/* Builds the journal fields of an event into `buf` as NUL-separated "KEY=value" strings:
 * MESSAGE, PRIORITY, MESSAGE_ID, OUTBOX_EVENT, SYSLOG_IDENTIFIER, then `fields` (a
 * NULL-terminated list of "OUTBOX_…=value"). Returns the number of strings, or -ENOBUFS. */
int log_event_fields(char *buf, size_t bufsz, int prio, enum log_event ev, const char *const *fields,
                     const char *message);

/* Logs an event: to journald with its fields when stderr is the journal, else like log_msg(). */
void log_event(int prio, enum log_event ev, const char *const *fields, const char *fmt, ...) _printf_(4, 5);

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_notice(...) log_msg(LOG_NOTICE, __VA_ARGS__)
#define log_warning(...) log_msg(LOG_WARNING, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_error_errno(r, ...) log_errno(LOG_ERR, r, __VA_ARGS__)
