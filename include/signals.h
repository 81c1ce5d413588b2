/* signals.h -- Signal handlers that only set flags; the loop acts on them. */
#pragma once

#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>

struct signal_flags {
        volatile sig_atomic_t stop; /* SIGTERM/SIGINT: drain and exit */
        volatile sig_atomic_t hard_stop; /* second SIGTERM/SIGINT: roll back, exit at once */
        volatile sig_atomic_t reload; /* SIGHUP */
        atomic_bool stopping; /* `stop` for other threads (the HTTP listener); lock-free, so a
                               * handler may store it */
};

/* Installs the handlers; the returned flags are the process's only mutable globals. */
struct signal_flags *signals_install(void);
