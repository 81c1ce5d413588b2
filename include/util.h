/* util.h -- Small shared helpers: time units, cleanup attributes, string helpers. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

typedef uint64_t usec_t;

#define USEC_PER_MSEC ((usec_t)1000)
#define USEC_PER_SEC ((usec_t)1000000)
#define USEC_INFINITY UINT64_MAX

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))
#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))

/* Monotonic clock in microseconds. The loop reads it once per turn and passes it down. */
static inline usec_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (usec_t)ts.tv_sec * USEC_PER_SEC + (usec_t)ts.tv_nsec / 1000;
}

/* Wall clock in microseconds since the epoch. */
static inline usec_t wall_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (usec_t)ts.tv_sec * USEC_PER_SEC + (usec_t)ts.tv_nsec / 1000;
}

static inline void freep(void *p) {
        free(*(void **)p);
}
#define _cleanup_free_ _cleanup_(freep)

/* Takes ownership out of a _cleanup_ variable. */
#define TAKE_PTR(p)                      \
        __extension__({                  \
                __typeof__(p) _tp = (p); \
                (p) = NULL;              \
                _tp;                     \
        })
