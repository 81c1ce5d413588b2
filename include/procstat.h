/* procstat.h -- What the process costs (CPU, memory, file descriptors), read from /proc/self. */
#pragma once

#include "metrics.h"

/* Reads the fields of a /proc/<pid>/stat line into p (cpu_seconds, resident_bytes,
 * virtual_bytes): the command name may hold spaces and parentheses, so fields count from the
 * last ')'. `ticks` is sysconf(_SC_CLK_TCK), `page` the page size. Pure. Returns 0 or -EINVAL. */
int procstat_parse(const char *stat, long ticks, long page, struct metrics_process *p);

/* Fills p for this process; what cannot be read is 0 (or -1 for the fd counts). */
void procstat_read(struct metrics_process *p);
