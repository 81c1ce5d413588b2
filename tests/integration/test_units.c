/* test_units.c -- The shipped systemd units: generated correctly, with the settings README promises,
 * accepted by systemd-analyze verify, and hardened to README's exposure level of 1.1 ("OK") by
 * systemd-analyze security --offline. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

extern char **environ;

/* README: "systemd-analyze security --offline=true outbox-relay.service   # overall exposure level
 * 1.1 OK". Assert what is claimed: a unit that slips to 1.2 fails here. */
#define MAX_EXPOSURE 1.1
#define ANALYZE_TIMEOUT_MS 60000

struct unit {
        const char *file; /* as generated in <build>/systemd/ */
        const char *name; /* the unit checked: the file itself, or an instance of the template */
        const char *exec_end; /* what ExecStart= must end with */
};

static const struct unit MAIN_UNIT = { "outbox-relay.service", "outbox-relay.service",
                                       "/outbox-relay -c /etc/outbox-relay/outbox-relay.conf" };
static const struct unit TEMPLATE_UNIT = { "outbox-relay@.service", "outbox-relay@test.service",
                                           "/outbox-relay -c /etc/outbox-relay/%i.conf" };

static const char *env_or_fail(const char *name) {
        const char *v = getenv(name);

        if (!v || !*v)
                fail_msg("%s is not set (run the test through meson test)", name);
        return v;
}

static char *read_file(const char *path) {
        FILE *f = fopen(path, "r");
        char *buf = NULL;
        size_t cap = 0;
        ssize_t n;

        if (!f)
                fail_msg("cannot open %s: %s", path, strerror(errno));
        n = getdelim(&buf, &cap, '\0', f);
        fclose(f);
        if (n < 0)
                fail_msg("cannot read %s", path);
        return buf;
}

static void write_file(const char *path, const char *text) {
        FILE *f = fopen(path, "w");

        if (!f)
                fail_msg("cannot create %s: %s", path, strerror(errno));
        assert_true(fputs(text, f) >= 0);
        assert_int_equal(fclose(f), 0);
}

static char *generated_unit(const struct unit *u) {
        char path[4096];

        snprintf(path, sizeof(path), "%s/systemd/%s", env_or_fail("OUTBOX_RELAY_BUILD_DIR"), u->file);
        return read_file(path);
}

/* The ExecStart= line of `text` (without the key), as a new string. */
static char *exec_start(const char *text) {
        const char *p = strstr(text, "\nExecStart=");
        size_t len;

        if (!p)
                fail_msg("no ExecStart= line");
        p += strlen("\nExecStart=");
        len = strcspn(p, "\n");
        return strndup(p, len);
}

/* `text` with the program of ExecStart= replaced by `bin` (quoted and %-escaped for systemd). */
static char *point_exec_at(const char *text, const char *bin) {
        const char *p = strstr(text, "\nExecStart="), *args;
        size_t cap = strlen(text) + 2 * strlen(bin) + 16, o;
        char *out = malloc(cap);

        assert_non_null(p);
        assert_non_null(out);
        p += strlen("\nExecStart=");
        args = p + strcspn(p, " \t\n");
        o = (size_t)(p - text);
        memcpy(out, text, o);
        out[o++] = '"';
        for (const char *b = bin; *b; b++) {
                if (*b == '%')
                        out[o++] = '%';
                if (*b == '"' || *b == '\\')
                        out[o++] = '\\';
                out[o++] = *b;
        }
        out[o++] = '"';
        strcpy(out + o, args);
        return out;
}

/* The [Service] section without its ExecStart= line. */
static char *service_section_sans_exec(const char *text) {
        const char *s = strstr(text, "\n[Service]\n"), *e;
        char *out, *x;

        if (!s)
                fail_msg("no [Service] section");
        e = strstr(s + 1, "\n[");
        out = strndup(s, e ? (size_t)(e - s) : strlen(s));
        assert_non_null(out);
        x = strstr(out, "\nExecStart=");
        assert_non_null(x);
        memmove(x, x + 1 + strcspn(x + 1, "\n"), strlen(x + 1 + strcspn(x + 1, "\n")) + 1);
        return out;
}

struct run {
        int status; /* exit status, or 128 + signal */
        char *out;
        char *err;
};

static void run_free(struct run *r) {
        free(r->out);
        free(r->err);
}

static void append(char **buf, size_t *len, const char *data, size_t n) {
        char *b = realloc(*buf, *len + n + 1);

        assert_non_null(b);
        memcpy(b + *len, data, n);
        *len += n;
        b[*len] = '\0';
        *buf = b;
}

static int64_t now_ms(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Runs argv (looked up in PATH, no shell) and collects its stdout and stderr. */
static struct run run_cmd(char *const argv[]) {
        struct run r = { .status = -1 };
        size_t out_len = 0, err_len = 0;
        int out_pipe[2], err_pipe[2], open_fds = 2, st, rc;
        posix_spawn_file_actions_t fa;
        int64_t deadline = now_ms() + ANALYZE_TIMEOUT_MS;
        pid_t pid;

        append(&r.out, &out_len, "", 0);
        append(&r.err, &err_len, "", 0);
        assert_int_equal(pipe2(out_pipe, O_CLOEXEC), 0);
        assert_int_equal(pipe2(err_pipe, O_CLOEXEC), 0);
        assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
        posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
        rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        close(out_pipe[1]);
        close(err_pipe[1]);
        if (rc != 0)
                fail_msg("cannot run %s: %s (is the systemd package installed?)", argv[0], strerror(rc));

        while (open_fds > 0) {
                struct pollfd p[2] = { { out_pipe[0], POLLIN, 0 }, { err_pipe[0], POLLIN, 0 } };
                int64_t left = deadline - now_ms();
                char buf[4096];

                if (left <= 0) {
                        kill(pid, SIGKILL);
                        waitpid(pid, NULL, 0);
                        fail_msg("%s did not finish within %d ms", argv[0], ANALYZE_TIMEOUT_MS);
                }
                if (poll(p, 2, (int)left) < 0 && errno != EINTR)
                        fail_msg("poll: %s", strerror(errno));
                for (int i = 0; i < 2; i++) {
                        ssize_t n;

                        if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                                continue;
                        n = read(p[i].fd, buf, sizeof(buf));
                        if (n > 0) {
                                if (i == 0)
                                        append(&r.out, &out_len, buf, (size_t)n);
                                else
                                        append(&r.err, &err_len, buf, (size_t)n);
                        } else if (n == 0 || errno != EINTR) {
                                close(p[i].fd);
                                if (i == 0)
                                        out_pipe[0] = -1;
                                else
                                        err_pipe[0] = -1;
                                open_fds--;
                        }
                }
        }
        while (waitpid(pid, &st, 0) < 0)
                assert_int_equal(errno, EINTR);
        r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return r;
}

/* A private directory holding a copy of the generated unit whose ExecStart= runs the built binary
 * (systemd-analyze verify insists the program exists). Optionally mangled by `edit`. */
struct unit_copy {
        char dir[64];
        char file[4096]; /* the copied file */
        char arg[4096]; /* what to hand to systemd-analyze: the file, or the instance next to the template */
};

static void unit_copy_make(struct unit_copy *c, const struct unit *u, char *(*edit)(char *text)) {
        char *text = generated_unit(u), *copy;

        strcpy(c->dir, "/tmp/outbox-relay-units-XXXXXX");
        assert_non_null(mkdtemp(c->dir));
        copy = point_exec_at(text, env_or_fail("OUTBOX_RELAY_BIN"));
        if (edit)
                copy = edit(copy);
        snprintf(c->file, sizeof(c->file), "%s/%s", c->dir, u->file);
        snprintf(c->arg, sizeof(c->arg), "%s/%s", c->dir, u->name);
        write_file(c->file, copy);
        free(copy);
        free(text);
}

static void unit_copy_remove(struct unit_copy *c) {
        if (!c->dir[0])
                return;
        unlink(c->file);
        rmdir(c->dir);
        c->dir[0] = '\0';
}

/* Each test gets one unit_copy as its state, so a failed assertion leaves nothing in /tmp. */
static int copy_setup(void **state) {
        *state = calloc(1, sizeof(struct unit_copy));
        return *state ? 0 : -1;
}

static int copy_teardown(void **state) {
        unit_copy_remove(*state);
        free(*state);
        return 0;
}

/* A stderr line about our unit: it names the unit, the template or the copy's directory, all of
 * which contain "outbox-relay". Other lines are noise about the host's units (postgresql.service,
 * targets), which --recursive-errors=no keeps out of the exit status too. */
static bool mentions_unit(const char *err, char *first, size_t size) {
        for (const char *line = err; *line;) {
                size_t len = strcspn(line, "\n");
                char *l = strndup(line, len);
                bool hit;

                assert_non_null(l);
                hit = strstr(l, "outbox-relay") != NULL;
                if (hit) {
                        snprintf(first, size, "%s", l);
                        free(l);
                        return true;
                }
                free(l);
                line += len + (line[len] == '\n');
        }
        return false;
}

static struct run analyze_verify(const struct unit_copy *c) {
        char *argv[] = { "systemd-analyze",       "verify",       "--man=no", "--generators=no",
                         "--recursive-errors=no", (char *)c->arg, NULL };

        return run_cmd(argv);
}

/* The number in "Overall exposure level for NAME: 1.1 OK", or a failed test; `rating` gets the word
 * after it ("OK", "MEDIUM", …). */
static double analyze_security_rated(const struct unit_copy *c, const struct unit *u, char *rating,
                                     size_t rsz) {
        char *argv[] = { "systemd-analyze", "security", "--offline=true", (char *)c->arg, NULL };
        struct run r = run_cmd(argv);
        const char *p = strstr(r.out, "Overall exposure level for ");
        char expect[256], *end;
        double score;

        if (r.status != 0 || !p)
                fail_msg("systemd-analyze security %s: status %d\n%s%s", c->arg, r.status, r.out, r.err);
        p += strlen("Overall exposure level for ");
        snprintf(expect, sizeof(expect), "%s: ", u->name);
        if (strncmp(p, expect, strlen(expect)) != 0)
                fail_msg("exposure reported for another unit: %.*s", (int)strcspn(p, "\n"), p);
        p += strlen(expect);
        errno = 0;
        score = strtod(p, &end);
        if (end == p || errno != 0 || score < 0.0 || score > 10.0)
                fail_msg("cannot parse the exposure level: %.*s", (int)strcspn(p, "\n"), p);
        end += strspn(end, " ");
        snprintf(rating, rsz, "%.*s", (int)strcspn(end, " \n"), end);
        run_free(&r);
        return score;
}

static double analyze_security(const struct unit_copy *c, const struct unit *u) {
        char rating[32];

        return analyze_security_rated(c, u, rating, sizeof(rating));
}

/* meson substituted the paths: no @var@ left, ExecStart= is an absolute path to the relay. */
static void check_generated(const struct unit *u) {
        char *text = generated_unit(u), *exec = exec_start(text);
        size_t el = strlen(exec), tl = strlen(u->exec_end);

        assert_null(strstr(text, "@sbindir@"));
        assert_null(strstr(text, "@docdir@"));
        if (exec[0] != '/' || el <= tl || strcmp(exec + el - tl, u->exec_end) != 0)
                fail_msg("%s: unexpected ExecStart=%s", u->file, exec);
        assert_non_null(strstr(text, "\nType=notify\n"));
        assert_non_null(strstr(text, "\nRestartPreventExitStatus=78"));
        free(exec);
        free(text);
}

/* The value of the last `key=` line of the [Service] section (a later assignment wins in systemd),
 * as a new string; NULL when the key is not set. */
static char *service_value(const char *text, const char *key) {
        const char *s = strstr(text, "\n[Service]\n"), *e, *last = NULL;
        size_t kl = strlen(key);

        if (!s) {
                fail_msg("no [Service] section");
                return NULL;
        }
        s += strlen("\n[Service]");
        e = strstr(s, "\n[");
        for (const char *p = s + 1; p && (!e || p < e); p = strchr(p, '\n'), p = p ? p + 1 : NULL)
                if (strncmp(p, key, kl) == 0 && p[kl] == '=')
                        last = p + kl + 1;
        return last ? strndup(last, strcspn(last, "\n")) : NULL;
}

static void expect_service_value(const struct unit *u, const char *text, const char *key, const char *want) {
        char *v = service_value(text, key);

        if (!v || strcmp(v, want) != 0)
                fail_msg("%s: %s=%s, README promises %s=%s", u->file, key, v ? v : "(unset)", key, want);
        free(v);
}

/* relay.drain_timeout's default, from the commented sample (etc/outbox-relay.conf), in seconds. */
static long sample_drain_timeout_s(void) {
        char path[4096], *text, *p;
        long s;

        snprintf(path, sizeof(path), "%s/etc/outbox-relay.conf", env_or_fail("OUTBOX_RELAY_SRCDIR"));
        text = read_file(path);
        p = strstr(text, "drain_timeout = \"");
        if (!p || sscanf(p, "drain_timeout = \"%lds\"", &s) != 1)
                fail_msg("no drain_timeout = \"Ns\" in %s", path);
        free(text);
        return s;
}

/* README, "Under systemd": WatchdogSec=30s, ExecReload= sends SIGHUP, TimeoutStopSec=45s above
 * the 30 s drain_timeout, Restart=on-failure, RestartPreventExitStatus=78, DynamicUser=. */
static void units_promised_settings(void **state) {
        const struct unit *units[] = { &MAIN_UNIT, &TEMPLATE_UNIT };
        long drain = sample_drain_timeout_s();

        (void)state;
        for (size_t i = 0; i < 2; i++) {
                char *text = generated_unit(units[i]), *stop, *prevent;
                bool found78 = false;
                long stop_s;

                expect_service_value(units[i], text, "Type", "notify");
                expect_service_value(units[i], text, "WatchdogSec", "30s");
                expect_service_value(units[i], text, "Restart", "on-failure");
                expect_service_value(units[i], text, "DynamicUser", "yes");
                expect_service_value(units[i], text, "ExecReload", "/bin/kill -HUP $MAINPID");
                expect_service_value(units[i], text, "TimeoutStopSec", "45s");
                stop = service_value(text, "TimeoutStopSec");
                assert_int_equal(sscanf(stop, "%lds", &stop_s), 1);
                fprintf(stderr, "# %s: TimeoutStopSec=%lds, drain_timeout default %lds\n", units[i]->file,
                        stop_s, drain);
                assert_true(stop_s > drain);
                /* 78 among the statuses that prevent a restart. */
                prevent = service_value(text, "RestartPreventExitStatus");
                assert_non_null(prevent);
                for (char *save = NULL, *tok = strtok_r(prevent, " ", &save); tok;
                     tok = strtok_r(NULL, " ", &save))
                        found78 |= strcmp(tok, "78") == 0;
                if (!found78)
                        fail_msg("%s: RestartPreventExitStatus= does not hold 78", units[i]->file);
                free(prevent);
                free(stop);
                free(text);
        }
}

static void units_generated(void **state) {
        (void)state;
        check_generated(&MAIN_UNIT);
        check_generated(&TEMPLATE_UNIT);
}

/* The template cannot drift from the plain unit: same [Service] section but for ExecStart=. */
static void template_matches_unit(void **state) {
        char *a = generated_unit(&MAIN_UNIT), *b = generated_unit(&TEMPLATE_UNIT);
        char *sa = service_section_sans_exec(a), *sb = service_section_sans_exec(b);

        (void)state;
        assert_string_equal(sa, sb);
        free(sa);
        free(sb);
        free(a);
        free(b);
}

static void verify_clean(struct unit_copy *c, const struct unit *u) {
        struct run r;
        char line[1024] = "";

        unit_copy_make(c, u, NULL);
        r = analyze_verify(c);
        if (r.status != 0 || mentions_unit(r.err, line, sizeof(line)))
                fail_msg("systemd-analyze verify %s: status %d, about the unit: '%s'\n%s%s", c->arg, r.status,
                         line, r.out, r.err);
        run_free(&r);
}

static void verify_unit(void **state) {
        verify_clean(*state, &MAIN_UNIT);
}

static void verify_template_instance(void **state) {
        verify_clean(*state, &TEMPLATE_UNIT);
}

static void security_check(struct unit_copy *c, const struct unit *u) {
        char rating[32];
        double score;

        unit_copy_make(c, u, NULL);
        score = analyze_security_rated(c, u, rating, sizeof(rating));
        fprintf(stderr, "# %s: overall exposure level %.1f %s (limit %.1f OK)\n", u->name, score, rating,
                MAX_EXPOSURE);
        /* systemd-analyze prints one decimal: compare what it printed, not a rounding of it. */
        assert_true(score <= MAX_EXPOSURE + 1e-9);
        assert_string_equal(rating, "OK");
}

static void security_unit(void **state) {
        security_check(*state, &MAIN_UNIT);
}

static void security_template_instance(void **state) {
        security_check(*state, &TEMPLATE_UNIT);
}

/* Mangling helpers for the checks below: an unknown key, and the hardening cut away. */
static char *add_unknown_key(char *text) {
        char *s = strstr(text, "\n[Service]\n"), *out;

        assert_non_null(s);
        assert_true(asprintf(&out, "%.*s\n[Service]\nFrobnicate=yes\n%s", (int)(s - text), text,
                             s + strlen("\n[Service]\n")) > 0);
        free(text);
        return out;
}

static char *drop_hardening(char *text) {
        char *h = strstr(text, "\n# Hardening."), *i = strstr(text, "\n[Install]");
        char *out;

        assert_non_null(h);
        assert_non_null(i);
        assert_true(asprintf(&out, "%.*s%s", (int)(h - text), text, i) > 0);
        free(text);
        return out;
}

/* The checks bite: a broken unit fails verify, an unhardened one scores far above the limit. */
static void checks_detect_bad_units(void **state) {
        struct unit_copy *c = *state;
        struct run r;
        char line[1024];
        double score;

        unit_copy_make(c, &MAIN_UNIT, add_unknown_key);
        r = analyze_verify(c);
        assert_int_not_equal(r.status, 0);
        assert_true(mentions_unit(r.err, line, sizeof(line)));
        assert_non_null(strstr(r.err, "Frobnicate"));
        run_free(&r);
        unit_copy_remove(c);

        unit_copy_make(c, &TEMPLATE_UNIT, drop_hardening);
        score = analyze_security(c, &TEMPLATE_UNIT);
        fprintf(stderr, "# %s without its hardening: overall exposure level %.1f\n", TEMPLATE_UNIT.name,
                score);
        assert_true(score > 5.0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(units_generated),
                cmocka_unit_test(template_matches_unit),
                cmocka_unit_test(units_promised_settings),
                cmocka_unit_test_setup_teardown(verify_unit, copy_setup, copy_teardown),
                cmocka_unit_test_setup_teardown(verify_template_instance, copy_setup, copy_teardown),
                cmocka_unit_test_setup_teardown(security_unit, copy_setup, copy_teardown),
                cmocka_unit_test_setup_teardown(security_template_instance, copy_setup, copy_teardown),
                cmocka_unit_test_setup_teardown(checks_detect_bad_units, copy_setup, copy_teardown),
        };
        const char *bin = getenv("OUTBOX_RELAY_BIN");

        if (!bin || !getenv("OUTBOX_RELAY_BUILD_DIR")) {
                fprintf(stderr,
                        "OUTBOX_RELAY_BIN and OUTBOX_RELAY_BUILD_DIR must be set"
                        " (meson test sets them)\n");
                return 1;
        }
        if (access(bin, X_OK) != 0) {
                fprintf(stderr, "OUTBOX_RELAY_BIN=%s is not executable: %s\n", bin, strerror(errno));
                return 1;
        }
        /* Plain output: no colours, no pager, whatever the caller's terminal settings. */
        setenv("SYSTEMD_COLORS", "0", 1);
        setenv("SYSTEMD_PAGER", "cat", 1);
        unsetenv("SYSTEMD_LESS");
        return cmocka_run_group_tests(tests, NULL, NULL);
}
