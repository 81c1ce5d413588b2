/* conninfo.h -- libpq connection strings: passwords redacted for messages, checked before use. */
#pragma once

#include <stddef.h>

/* Copies conninfo into buf with every password value replaced by "***": key = value and URI
 * forms, and a dbname that is itself a connection string. Truncates to bufsz, always
 * NUL-terminated (bufsz > 0). Returns buf. */
const char *conninfo_redact(const char *conninfo, char *buf, size_t bufsz);

/* Checks conninfo as libpq will when connecting, so a string that can never connect is a
 * configuration error instead of an endless retry: PQconninfoParse() accepts it; every port
 * is empty or 1..65535, one for all hosts or one per host; host and hostaddr list as many
 * values; the integer options (connect_timeout, keepalives*, tcp_user_timeout) are integers.
 * Returns 0, or -EINVAL with one line in msg such as `invalid connection string: port must
 * be 1..65535 (got "…")` (no "FILE:LINE: setting: " prefix). msg never holds a password:
 * it quotes the string redacted. */
int conninfo_check(const char *conninfo, char *msg, size_t msgsz);
