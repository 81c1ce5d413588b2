/* test_check_config.c -- Runs `outbox-relay --check-config` on the sample and on every bad config. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

/* Each bad file starts with
 *   # expect: LINE: FRAGMENT
 * and may add
 *   # never: TEXT
 * for text that must not appear in the output (a password). */
struct bad_case {
        char *path;
        int line;
        char *fragment;
        char *never;
};

extern char **environ;

static const char *relay_bin(void) {
        const char *bin = getenv("OUTBOX_RELAY_BIN");

        if (!bin || !*bin)
                skip(); /* not run by meson */
        return bin;
}

/* Runs bin --check-config -c path without a shell; returns the wait status and the child's
 * stderr (malloc'd). */
static int run_check_config(const char *path, char **err_out) {
        const char *argv[] = { relay_bin(), "--check-config", "-c", path, NULL };
        posix_spawn_file_actions_t fa;
        char *buf = NULL;
        size_t len = 0, cap = 0;
        int pipefd[2], status;
        pid_t pid;

        assert_int_equal(pipe2(pipefd, O_CLOEXEC), 0);
        assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
        assert_int_equal(posix_spawn_file_actions_adddup2(&fa, pipefd[1], STDERR_FILENO), 0);
        assert_int_equal(posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0), 0);
        assert_int_equal(posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0), 0);
        assert_int_equal(posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ), 0);
        posix_spawn_file_actions_destroy(&fa);
        close(pipefd[1]);

        for (;;) {
                ssize_t n;

                if (cap - len < 1024) {
                        cap += 4096;
                        buf = realloc(buf, cap);
                        assert_non_null(buf);
                }
                n = read(pipefd[0], buf + len, cap - len - 1);
                if (n < 0 && errno == EINTR)
                        continue;
                assert_true(n >= 0);
                if (n == 0)
                        break;
                len += (size_t)n;
        }
        buf[len] = 0;
        close(pipefd[0]);
        while (waitpid(pid, &status, 0) < 0)
                assert_int_equal(errno, EINTR);
        *err_out = buf;
        return status;
}

static void test_sample_is_valid(void **state) {
        const char *srcdir = getenv("OUTBOX_RELAY_SRCDIR");
        char path[4096], *err = NULL;
        int status;

        (void)state;
        if (!srcdir)
                skip();
        snprintf(path, sizeof(path), "%s/etc/outbox-relay.conf", srcdir);
        status = run_check_config(path, &err);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                fail_msg("%s: status 0x%x, stderr: %s", path, status, err);
        free(err);
}

static void test_missing_file(void **state) {
        const char *path = "/nonexistent/outbox-relay.conf";
        char *err = NULL;
        int status;

        (void)state;
        status = run_check_config(path, &err);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 78);
        if (!strstr(err, "/nonexistent/outbox-relay.conf: cannot open: No such file or directory"))
                fail_msg("stderr: %s", err);
        free(err);
}

/* --print-sql into a full disk: exit 1 and a line saying so, never a cut script taken as whole. */
static void test_print_sql_cannot_write(void **state) {
        char cmd[4096], line[512] = "";
        FILE *p;
        int status;

        (void)state;
        snprintf(cmd, sizeof(cmd), "'%s' --print-sql 2>&1 >/dev/full", relay_bin());
        p = popen(cmd, "r");
        assert_non_null(p);
        if (!fgets(line, sizeof(line), p))
                line[0] = 0;
        status = pclose(p);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 1);
        assert_non_null(strstr(line, "outbox-relay: --print-sql: cannot write: No space left on device"));
}

static void test_bad_file(void **state) {
        const struct bad_case *bc = *state;
        char want[4200], *err = NULL;
        int status;

        status = run_check_config(bc->path, &err);
        snprintf(want, sizeof(want), "%s:%d: ", bc->path, bc->line);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 78)
                fail_msg("%s: want exit 78, got status 0x%x, stderr: %s", bc->path, status, err);
        if (!strstr(err, want))
                fail_msg("%s: stderr lacks '%s': %s", bc->path, want, err);
        if (!strstr(err, bc->fragment))
                fail_msg("%s: stderr lacks '%s': %s", bc->path, bc->fragment, err);
        /* the fragment belongs to the FILE:LINE: message, not to some other line */
        assert_true(strstr(err, bc->fragment) > strstr(err, want));
        if (bc->never && strstr(err, bc->never))
                fail_msg("%s: stderr contains '%s': %s", bc->path, bc->never, err);
        free(err);
}

/* Reads the header of one bad file; fails the whole run when it is malformed. */
static int read_case(const char *path, struct bad_case *bc) {
        char line[1024], *colon, *end;
        FILE *f = fopen(path, "re");

        memset(bc, 0, sizeof(*bc));
        if (!f || !fgets(line, sizeof(line), f) || strncmp(line, "# expect: ", 10) != 0) {
                fprintf(stderr, "%s: first line must be '# expect: LINE: FRAGMENT'\n", path);
                if (f)
                        fclose(f);
                return -1;
        }
        line[strcspn(line, "\n")] = 0;
        bc->line = (int)strtol(line + 10, &end, 10);
        colon = end;
        if (bc->line <= 0 || strncmp(colon, ": ", 2) != 0 || !colon[2]) {
                fprintf(stderr, "%s: malformed expect line\n", path);
                fclose(f);
                return -1;
        }
        bc->fragment = strdup(colon + 2);
        bc->path = strdup(path);
        if (fgets(line, sizeof(line), f) && strncmp(line, "# never: ", 9) == 0) {
                line[strcspn(line, "\n")] = 0;
                bc->never = strdup(line + 9);
        }
        fclose(f);
        return bc->fragment && bc->path ? 0 : -1;
}

int main(void) {
        const char *srcdir = getenv("OUTBOX_RELAY_SRCDIR");
        struct CMUnitTest *tests;
        struct bad_case *cases;
        char pattern[4096];
        glob_t g = { 0 };
        size_t n = 0;
        int r;

        if (!srcdir)
                srcdir = ".";
        snprintf(pattern, sizeof(pattern), "%s/tests/configs/bad/*.conf", srcdir);
        r = glob(pattern, 0, NULL, &g);
        if (r != 0 && r != GLOB_NOMATCH)
                return 1;
        /* The brief promises at least 14 distinct malformed files; fewer means a lost fixture. */
        if (g.gl_pathc < 14) {
                fprintf(stderr, "%s: only %zu files, want at least 14\n", pattern, g.gl_pathc);
                return 1;
        }
        cases = calloc(g.gl_pathc, sizeof(*cases));
        tests = calloc(g.gl_pathc + 3, sizeof(*tests));
        if (!cases || !tests)
                return 1;
        tests[n++] = (struct CMUnitTest){ "sample etc/outbox-relay.conf is valid", test_sample_is_valid, NULL,
                                          NULL, NULL };
        tests[n++] = (struct CMUnitTest){ "missing file", test_missing_file, NULL, NULL, NULL };
        tests[n++] = (struct CMUnitTest){ "--print-sql cannot write", test_print_sql_cannot_write, NULL, NULL,
                                          NULL };
        for (size_t i = 0; i < g.gl_pathc; i++) {
                const char *base = strrchr(g.gl_pathv[i], '/');

                if (read_case(g.gl_pathv[i], &cases[i]) < 0)
                        return 1;
                tests[n++] = (struct CMUnitTest){ base ? base + 1 : g.gl_pathv[i], test_bad_file, NULL, NULL,
                                                  &cases[i] };
        }
        r = _cmocka_run_group_tests("check_config", tests, n, NULL, NULL);
        for (size_t i = 0; i < g.gl_pathc; i++) {
                free(cases[i].path);
                free(cases[i].fragment);
                free(cases[i].never);
        }
        free(cases);
        free(tests);
        globfree(&g);
        return r;
}
