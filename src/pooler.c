/* pooler.c -- Signs that a connection's server session is not its own (a connection pooler in transaction mode): pure rules over what PostgreSQL answered. */
#include "pooler.h"

#include <string.h>

const char pooler_hint[] =
        "the server session is shared with other clients: is the relay behind a connection pooler "
        "in transaction mode? It needs a session of its own: connect directly or through "
        "session pooling";

bool pooler_sign(enum pooler_step step, const char *state) {
        if (!state)
                return false;
        switch (step) {
        case POOLER_PREPARE:
                return strcmp(state, "42P05") == 0;
        case POOLER_EXECUTE:
                return strcmp(state, "26000") == 0;
        case POOLER_OTHER:
                break;
        }
        return false;
}

bool pooler_lock_elsewhere(const int *slots, const int *pids, size_t n, const int *own_slots,
                           const int *own_pids, size_t n_own) {
        for (size_t p = 0; p < n_own; p++) {
                if (own_slots[p] < 0)
                        continue;
                for (size_t i = 0; i < n; i++)
                        if (slots[i] == own_slots[p] && pids[i] != own_pids[p])
                                return true;
        }
        return false;
}
