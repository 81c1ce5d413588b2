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

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_notice(...) log_msg(LOG_NOTICE, __VA_ARGS__)
#define log_warning(...) log_msg(LOG_WARNING, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_error_errno(r, ...) log_errno(LOG_ERR, r, __VA_ARGS__)
