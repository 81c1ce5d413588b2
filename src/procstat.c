/* procstat.c -- What the process costs (CPU, memory, file descriptors), read from /proc/self. */
#include "procstat.h"

#include <dirent.h>
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

int procstat_parse(const char *stat, long ticks, long page, struct metrics_process *p) {
        const char *s = strrchr(stat, ')');
        unsigned long long utime, stime, vsize;
        long long rss;

        /* After the name: state (3) … utime (14), stime (15) … vsize (23), rss (24). */
        if (!s || ticks <= 0 || page <= 0 ||
            sscanf(s + 1,
                   " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d %*u %llu "
                   "%lld",
                   &utime, &stime, &vsize, &rss) != 4 ||
            rss < 0)
                return -EINVAL;
        p->cpu_seconds = (double)(utime + stime) / (double)ticks;
        p->virtual_bytes = vsize;
        p->resident_bytes = (uint64_t)rss * (uint64_t)page;
        return 0;
}

static int64_t count_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        struct dirent *e;
        int64_t n = 0;

        if (!d)
                return -1;
        while ((e = readdir(d)))
                n += e->d_name[0] != '.';
        closedir(d);
        return n - 1; /* the directory's own descriptor */
}

void procstat_read(struct metrics_process *p) {
        char buf[1024];
        FILE *f = fopen("/proc/self/stat", "re");
        struct rlimit rl;
        struct mallinfo2 mi;

        memset(p, 0, sizeof(*p));
        if (f) {
                if (fgets(buf, sizeof(buf), f))
                        procstat_parse(buf, sysconf(_SC_CLK_TCK), sysconf(_SC_PAGESIZE), p);
                fclose(f);
        }
        mi = mallinfo2();
        p->heap_bytes = (uint64_t)mi.uordblks + (uint64_t)mi.hblkhd;
        p->open_fds = count_fds();
        p->max_fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (int64_t)rl.rlim_cur
                                                                                        : -1;
}
