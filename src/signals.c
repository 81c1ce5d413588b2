/* signals.c -- Signal handlers that only set flags; the loop acts on them. */
#include "signals.h"

#include <string.h>

/* The only file-scope mutable state in the program: a handler has nowhere else to write. */
static struct signal_flags flags;

static void on_stop(int sig) {
        (void)sig;
        if (flags.stop)
                flags.hard_stop = 1;
        flags.stop = 1;
        atomic_store(&flags.stopping, true);
}

static void on_reload(int sig) {
        (void)sig;
        flags.reload = 1;
}

struct signal_flags *signals_install(void) {
        struct sigaction sa;

        memset(&sa, 0, sizeof(sa));
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART;
        sa.sa_handler = on_stop;
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        sa.sa_handler = on_reload;
        sigaction(SIGHUP, &sa, NULL);
        sa.sa_handler = SIG_IGN;
        sigaction(SIGPIPE, &sa, NULL);
        return &flags;
}
