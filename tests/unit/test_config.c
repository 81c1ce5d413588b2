/* test_config.c -- Unit tests of the configuration modules (src/config.c, conninfo.c, kafka_guard.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "conninfo.h"
#include "kafka_guard.h"
#include "log.h"

#define KAFKA_OK "kafka = { bootstrap_servers = \"127.0.0.1:9092\"; };\n"

/* ---- helpers ------------------------------------------------------------------------------ */

/* Writes text to a fresh temporary file; returns its malloc'd path. */
static char *write_tmp(const char *text) {
        const char *dir = getenv("TMPDIR");
        char *path;
        FILE *f;
        int fd;

        if (asprintf(&path, "%s/test_config_XXXXXX", dir && *dir ? dir : "/tmp") < 0 || !path)
                abort();
        fd = mkstemp(path);
        assert_true(fd >= 0);
        f = fdopen(fd, "w");
        assert_non_null(f);
        assert_int_equal(fputs(text, f) >= 0, 1);
        assert_int_equal(fclose(f), 0);
        return path;
}

static bool is_zeroed(const struct relay_config *c) {
        static const struct relay_config zero;

        return memcmp(c, &zero, sizeof(zero)) == 0;
}

/* Loads text and asserts it fails with -EINVAL and "PATH:LINE: " + a message containing frag.
 * Line 0 means a file-level error: "PATH: ". */
static void expect_error_r(const char *text, int line, const char *frag, int expect_r) {
        struct relay_config c;
        char err[1024], prefix[512];
        char *path = write_tmp(text);
        int r;

        memset(&c, 0, sizeof(c));
        r = config_load(path, &c, err, sizeof(err));
        if (r != expect_r || !strstr(err, frag))
                print_message("config:\n%s\nerror: %s\n", text, err);
        assert_int_equal(r, expect_r);
        if (line > 0)
                snprintf(prefix, sizeof(prefix), "%s:%d: ", path, line);
        else
                snprintf(prefix, sizeof(prefix), "%s: ", path);
        assert_memory_equal(err, prefix, strlen(prefix));
        assert_non_null(strstr(err, frag));
        assert_null(strchr(err, '\n'));
        assert_true(is_zeroed(&c));
        unlink(path);
        free(path);
}

static void expect_error(const char *text, int line, const char *frag) {
        expect_error_r(text, line, frag, -EINVAL);
}

/* Loads text and asserts success; the caller frees c. */
static void load_ok(const char *text, struct relay_config *c) {
        char err[1024] = "";
        char *path = write_tmp(text);
        int r;

        memset(c, 0, sizeof(*c));
        r = config_load(path, c, err, sizeof(err));
        if (r != 0)
                print_message("config:\n%s\nerror: %s\n", text, err);
        assert_int_equal(r, 0);
        assert_string_equal(c->file, path);
        unlink(path);
        free(path);
}

static void assert_kafka_get(rd_kafka_conf_t *conf, const char *name, const char *want) {
        char buf[512];
        size_t sz = sizeof(buf);

        assert_int_equal(rd_kafka_conf_get(conf, name, buf, &sz), RD_KAFKA_CONF_OK);
        assert_string_equal(buf, want);
}

static void assert_same_settings(const struct relay_config *a, const struct relay_config *b) {
        assert_string_equal(a->postgres.conninfo, b->postgres.conninfo);
        assert_string_equal(a->postgres.table, b->postgres.table);
        assert_string_equal(a->postgres.channel, b->postgres.channel);
        assert_int_equal(a->postgres.connect_timeout, b->postgres.connect_timeout);
        assert_int_equal(a->postgres.statement_timeout, b->postgres.statement_timeout);
        assert_int_equal(a->postgres.keepalives_idle, b->postgres.keepalives_idle);
        assert_int_equal(a->postgres.tcp_user_timeout, b->postgres.tcp_user_timeout);
        assert_int_equal(a->relay.batch_size, b->relay.batch_size);
        assert_int_equal(a->relay.pipelines, b->relay.pipelines);
        assert_int_equal(a->relay.ordering, b->relay.ordering);
        assert_int_equal(a->relay.poll_interval, b->relay.poll_interval);
        assert_int_equal(a->relay.batch_timeout, b->relay.batch_timeout);
        assert_int_equal(a->relay.drain_timeout, b->relay.drain_timeout);
        assert_int_equal(a->relay.finish, b->relay.finish);
        assert_int_equal(a->relay.max_attempts, b->relay.max_attempts);
        assert_int_equal(a->relay.retention, b->relay.retention);
        assert_int_equal(a->relay.status_interval, b->relay.status_interval);
        assert_int_equal(a->breaker.failure_threshold, b->breaker.failure_threshold);
        assert_true(a->breaker.failure_ratio == b->breaker.failure_ratio);
        assert_int_equal(a->breaker.window, b->breaker.window);
        assert_int_equal(a->breaker.cooldown, b->breaker.cooldown);
        assert_int_equal(a->breaker.cooldown_max, b->breaker.cooldown_max);
        assert_int_equal(a->retry.base, b->retry.base);
        assert_int_equal(a->retry.cap, b->retry.cap);
        assert_int_equal(a->log.level, b->log.level);
}

/* ---- defaults ----------------------------------------------------------------------------- */

static void test_defaults(void **state) {
        struct relay_config c;

        (void)state;
        assert_int_equal(config_defaults(&c), 0);
        assert_null(c.file);
        assert_string_equal(c.postgres.conninfo, "");
        assert_string_equal(c.postgres.table, "outbox");
        assert_string_equal(c.postgres.channel, "outbox");
        assert_int_equal(c.postgres.connect_timeout, 10 * USEC_PER_SEC);
        assert_int_equal(c.postgres.statement_timeout, 30 * USEC_PER_SEC);
        assert_int_equal(c.postgres.keepalives_idle, 30 * USEC_PER_SEC);
        assert_int_equal(c.postgres.tcp_user_timeout, 30 * USEC_PER_SEC);
        assert_int_equal(c.kafka.n_props, 0);
        assert_null(c.kafka.props);
        assert_int_equal(c.relay.batch_size, 2000);
        assert_int_equal(c.relay.pipelines, 2);
        assert_int_equal(c.relay.poll_interval, 5 * USEC_PER_SEC);
        assert_int_equal(c.relay.batch_timeout, 60 * USEC_PER_SEC);
        assert_int_equal(c.relay.drain_timeout, 30 * USEC_PER_SEC);
        assert_int_equal(c.relay.finish, FINISH_DELETE);
        assert_int_equal(c.relay.ordering, ORDERING_KEY); /* README: "key" (the default) */
        assert_int_equal(c.relay.max_attempts, 10);
        assert_int_equal(c.relay.retention, 7 * 24 * 3600 * USEC_PER_SEC);
        assert_int_equal(c.relay.status_interval, 60 * USEC_PER_SEC);
        assert_int_equal(c.breaker.failure_threshold, 5);
        assert_true(c.breaker.failure_ratio == 0.5);
        assert_int_equal(c.breaker.window, 20);
        assert_int_equal(c.breaker.cooldown, 5 * USEC_PER_SEC);
        assert_int_equal(c.breaker.cooldown_max, 300 * USEC_PER_SEC);
        assert_int_equal(c.retry.base, 200 * USEC_PER_MSEC);
        assert_int_equal(c.retry.cap, 30 * USEC_PER_SEC);
        assert_int_equal(c.log.level, LOG_INFO);
        config_free(&c);
        assert_true(is_zeroed(&c));
        config_free(&c); /* a freed struct may be freed again */
        assert_true(is_zeroed(&c));
}

static void test_minimal_file_gives_defaults(void **state) {
        struct relay_config c, d;

        (void)state;
        load_ok("# nothing but the broker\n" KAFKA_OK, &c);
        assert_int_equal(config_defaults(&d), 0);
        assert_same_settings(&c, &d);
        assert_int_equal(c.kafka.n_props, 1);
        assert_string_equal(c.kafka.props[0].name, "bootstrap.servers");
        assert_string_equal(c.kafka.props[0].setting, "bootstrap_servers");
        assert_string_equal(c.kafka.props[0].value, "127.0.0.1:9092");
        assert_int_equal(c.kafka.props[0].line, 2);
        config_free(&c);
        config_free(&d);
}

/* The shipped sample documents the defaults: loading it must give exactly them. */
static void test_sample_is_valid_and_documents_defaults(void **state) {
        const char *srcdir = getenv("OUTBOX_RELAY_SRCDIR");
        struct relay_config c, d;
        char path[4096], err[1024] = "";
        rd_kafka_conf_t *conf;

        (void)state;
        if (!srcdir)
                skip();
        snprintf(path, sizeof(path), "%s/etc/outbox-relay.conf", srcdir);
        memset(&c, 0, sizeof(c));
        if (config_load(path, &c, err, sizeof(err)) != 0)
                fail_msg("%s", err);
        assert_int_equal(config_defaults(&d), 0);
        assert_same_settings(&c, &d);
        assert_int_equal(c.kafka.n_props, 1);
        assert_string_equal(c.kafka.props[0].name, "bootstrap.servers");
        conf = config_kafka_conf(&c, err, sizeof(err));
        assert_non_null(conf);
        rd_kafka_conf_destroy(conf);
        config_free(&c);
        config_free(&d);
}

/* The sample, the manual page (tools/mkman.c) and --check-config say the same: every key of the
 * table is in the sample, in its group, set to the default the table gives. */
static void test_sample_lists_every_key(void **state) {
        const char *srcdir = getenv("OUTBOX_RELAY_SRCDIR");
        char path[4096], *text = NULL;
        size_t cap = 0;
        struct config_key_doc d;
        FILE *f;

        (void)state;
        if (!srcdir)
                skip();
        snprintf(path, sizeof(path), "%s/etc/outbox-relay.conf", srcdir);
        f = fopen(path, "r");
        assert_non_null(f);
        assert_true(getdelim(&text, &cap, 0, f) > 0);
        fclose(f);
        assert_true(config_key_count() > 20);
        for (size_t i = 0; config_key_describe(i, &d) == 0; i++) {
                char group[64], line[256];
                const char *g, *end, *at;

                assert_non_null(d.doc);
                assert_true(strlen(d.doc) > 10);
                snprintf(group, sizeof(group), "\n%s:\n{\n", d.group);
                g = strstr(text, group);
                if (!g)
                        fail_msg("the sample has no group %s", d.group);
                end = strstr(g, "\n};");
                snprintf(line, sizeof(line), "\n        %s = %s;", d.name, d.def);
                at = strstr(g, line);
                if (!at || at > end)
                        fail_msg("the sample's group %s does not set '%s = %s;'", d.group, d.name, d.def);
        }
        assert_int_equal(config_key_describe(config_key_count(), &d), -ENOENT);
        free(text);
}

static void test_every_key_set(void **state) {
        struct relay_config c;

        (void)state;
        load_ok("postgres = {\n"
                "  conninfo = \"host=db1 dbname=app user=relay\";\n"
                "  table = \"events.outbox_v2\";\n"
                "  channel = \"_relay2\";\n"
                "  connect_timeout = \"3s\";\n"
                "  statement_timeout = \"1.5s\";\n"
                "  keepalives_idle = \"1m\";\n"
                "  tcp_user_timeout = \"20s\";\n"
                "};\n"
                "relay = {\n"
                "  batch_size = 1000L;\n"
                "  poll_interval = \"250ms\";\n"
                "  batch_timeout = \"2m\";\n"
                "  drain_timeout = \"10s\";\n"
                "  finish = \"mark\";\n"
                "  ordering = \"none\";\n"
                "  max_attempts = 3;\n"
                "  retention = \"0\";\n"
                "  status_interval = \"1h\";\n"
                "};\n"
                "breaker = {\n"
                "  failure_threshold = 7;\n"
                "  failure_ratio = 0.25;\n"
                "  window = 40;\n"
                "  cooldown = \"2s\";\n"
                "  cooldown_max = \"2h\";\n"
                "};\n"
                "retry = { base = \"50ms\"; cap = \"10s\"; };\n"
                "log = { level = \"debug\"; };\n" KAFKA_OK,
                &c);
        assert_string_equal(c.postgres.conninfo, "host=db1 dbname=app user=relay");
        assert_string_equal(c.postgres.table, "events.outbox_v2");
        assert_string_equal(c.postgres.channel, "_relay2");
        assert_int_equal(c.postgres.connect_timeout, 3 * USEC_PER_SEC);
        assert_int_equal(c.postgres.statement_timeout, 1500 * USEC_PER_MSEC);
        assert_int_equal(c.postgres.keepalives_idle, 60 * USEC_PER_SEC);
        assert_int_equal(c.postgres.tcp_user_timeout, 20 * USEC_PER_SEC);
        assert_int_equal(c.relay.batch_size, 1000);
        assert_int_equal(c.relay.poll_interval, 250 * USEC_PER_MSEC);
        assert_int_equal(c.relay.batch_timeout, 120 * USEC_PER_SEC);
        assert_int_equal(c.relay.drain_timeout, 10 * USEC_PER_SEC);
        assert_int_equal(c.relay.finish, FINISH_MARK);
        assert_int_equal(c.relay.ordering, ORDERING_NONE);
        assert_int_equal(c.relay.max_attempts, 3);
        assert_int_equal(c.relay.retention, 0);
        assert_int_equal(c.relay.status_interval, 3600 * USEC_PER_SEC);
        assert_int_equal(c.breaker.failure_threshold, 7);
        assert_true(c.breaker.failure_ratio == 0.25);
        assert_int_equal(c.breaker.window, 40);
        assert_int_equal(c.breaker.cooldown, 2 * USEC_PER_SEC);
        assert_int_equal(c.breaker.cooldown_max, 2 * 3600 * USEC_PER_SEC);
        assert_int_equal(c.retry.base, 50 * USEC_PER_MSEC);
        assert_int_equal(c.retry.cap, 10 * USEC_PER_SEC);
        assert_int_equal(c.log.level, LOG_DEBUG);
        config_free(&c);
}

/* ---- durations (table-driven) ------------------------------------------------------------- */

static void test_durations(void **state) {
        static const struct {
                const char *key; /* relay.<key> */
                const char *value; /* as written in the file, quotes included */
                usec_t want; /* when frag is NULL */
                const char *frag; /* expected error fragment */
        } cases[] = {
                { "poll_interval", "\"250ms\"", 250 * USEC_PER_MSEC, NULL },
                { "poll_interval", "\"30s\"", 30 * USEC_PER_SEC, NULL },
                { "poll_interval", "\"1.5s\"", 1500 * USEC_PER_MSEC, NULL },
                { "poll_interval", "\"0.25s\"", 250 * USEC_PER_MSEC, NULL },
                { "poll_interval", "\"5m\"", 300 * USEC_PER_SEC, NULL },
                { "poll_interval", "\"2min\"", 120 * USEC_PER_SEC, NULL },
                { "poll_interval", "\"10ms\"", 10 * USEC_PER_MSEC, NULL },
                { "poll_interval", "\"20000us\"", 20 * USEC_PER_MSEC, NULL },
                { "batch_timeout", "\"1h\"", 3600 * USEC_PER_SEC, NULL },
                { "batch_timeout", "\"0.5h\"", 1800 * USEC_PER_SEC, NULL },
                { "retention", "\"7d\"", 7 * 86400 * USEC_PER_SEC, NULL },
                { "retention", "\"2h\"", 7200 * USEC_PER_SEC, NULL },
                { "retention", "\"1.5d\"", 36 * 3600 * USEC_PER_SEC, NULL },
                { "retention", "\"0\"", 0, NULL },
                { "retention", "\"0s\"", 0, NULL },
                /* errors */
                { "poll_interval", "5", 0,
                  "relay.poll_interval: must be a duration string such as \"5s\" (got integer 5)" },
                { "poll_interval", "5L", 0, "must be a duration string such as \"5s\" (got integer 5)" },
                { "poll_interval", "1.5", 0, "must be a duration string such as \"5s\" (got float 1.5)" },
                { "poll_interval", "true", 0, "must be a duration string such as \"5s\" (got boolean true)" },
                { "poll_interval", "\"5\"", 0,
                  "must be a duration such as \"250ms\", \"30s\", \"5m\", \"2h\" or \"7d\" (got \"5\")" },
                { "poll_interval", "\"5x\"", 0, "(got \"5x\")" },
                { "poll_interval", "\"5 s\"", 0, "(got \"5 s\")" },
                { "poll_interval", "\"s\"", 0, "(got \"s\")" },
                { "poll_interval", "\"\"", 0, "(got \"\")" },
                { "poll_interval", "\"1.s\"", 0, "(got \"1.s\")" },
                { "poll_interval", "\"5S\"", 0, "(got \"5S\")" },
                { "poll_interval", "\"-5s\"", 0, "relay.poll_interval: must not be negative (got \"-5s\")" },
                { "poll_interval", "\"5ms\"", 0, "relay.poll_interval: must be 10ms..10m (got \"5ms\")" },
                { "poll_interval", "\"11m\"", 0, "relay.poll_interval: must be 10ms..10m (got \"11m\")" },
                { "poll_interval", "\"0\"", 0, "relay.poll_interval: must be 10ms..10m (got \"0\")" },
                { "drain_timeout", "\"0\"", 0, "relay.drain_timeout: must be 1s..1h (got \"0\")" },
                { "retention", "\"30s\"", 0, "relay.retention: must be \"0\" or 1m..3650d (got \"30s\")" },
                { "retention", "\"3651d\"", 0,
                  "relay.retention: must be \"0\" or 1m..3650d (got \"3651d\")" },
                { "retention", "\"99999999999999999999d\"", 0, "relay.retention: is too large" },
                { "retention", "\"999999999999d\"", 0, "relay.retention: is too large" },
        };

        (void)state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char text[512];

                snprintf(text, sizeof(text), "relay = {\n  %s = %s;\n};\n" KAFKA_OK, cases[i].key,
                         cases[i].value);
                if (cases[i].frag)
                        expect_error(text, 2, cases[i].frag);
                else {
                        struct relay_config c;
                        usec_t got;

                        load_ok(text, &c);
                        got = strcmp(cases[i].key, "poll_interval") == 0     ? c.relay.poll_interval
                                : strcmp(cases[i].key, "batch_timeout") == 0 ? c.relay.batch_timeout
                                                                             : c.relay.retention;
                        if (got != cases[i].want)
                                fail_msg("%s = %s: got %llu us, want %llu us", cases[i].key, cases[i].value,
                                         (unsigned long long)got, (unsigned long long)cases[i].want);
                        config_free(&c);
                }
        }
}

/* ---- file-level errors -------------------------------------------------------------------- */

static void test_missing_file(void **state) {
        struct relay_config c;
        char err[512], want[512];
        const char *path = "/nonexistent/outbox-relay-test.conf";

        (void)state;
        memset(&c, 0, sizeof(c));
        assert_int_equal(config_load(path, &c, err, sizeof(err)), -ENOENT);
        snprintf(want, sizeof(want), "%s: cannot open: No such file or directory", path);
        assert_string_equal(err, want);
        assert_true(is_zeroed(&c));
}

static void test_directory_as_file(void **state) {
        struct relay_config c;
        char err[512], want[512];
        char dir[] = "/tmp/test_config_dir_XXXXXX";

        (void)state;
        assert_non_null(mkdtemp(dir));
        memset(&c, 0, sizeof(c));
        assert_int_equal(config_load(dir, &c, err, sizeof(err)), -EISDIR);
        snprintf(want, sizeof(want), "%s: cannot open: Is a directory", dir);
        assert_string_equal(err, want);
        assert_true(is_zeroed(&c));
        rmdir(dir);
}

static void test_unreadable_file(void **state) {
        struct relay_config c;
        char err[512], want[512];
        char *path;
        pid_t pid;
        int r, status;

        (void)state;
        path = write_tmp(KAFKA_OK);
        snprintf(want, sizeof(want), "%s: cannot open: Permission denied", path);
        assert_int_equal(chmod(path, 0), 0);
        /* root reads anything: check as nobody in a child */
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                if (geteuid() == 0 &&
                    (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
                     setresuid(65534, 65534, 65534) < 0))
                        _exit(77);
                memset(&c, 0, sizeof(c));
                r = config_load(path, &c, err, sizeof(err));
                free(path); /* the child's copy: valgrind checks the child's exit too */
                if (r != -EACCES || strcmp(err, want) != 0) {
                        fprintf(stderr, "r=%d err=%s\n", r, err);
                        _exit(1);
                }
                _exit(is_zeroed(&c) ? 0 : 2);
        }
        assert_int_equal(waitpid(pid, &status, 0), pid);
        unlink(path);
        free(path);
        assert_true(WIFEXITED(status));
        if (WEXITSTATUS(status) == 77)
                skip();
        assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_syntax_errors(void **state) {
        (void)state;
        expect_error("relay = {\n  batch_size = 5;\n  finish = ;\n};\n" KAFKA_OK, 3, "syntax error");
        expect_error("relay {\n};\n", 1, "syntax error"); /* a group needs '=' or ':' */
        expect_error("relay = { batch_size = 5; };\n\nrelay = { };\n" KAFKA_OK, 3, "duplicate setting name");
        expect_error(KAFKA_OK "log = { level = \"info\" \n", 3, "syntax error");
}

static void test_include(void **state) {
        char dir[] = "/tmp/test_config_inc_XXXXXX", main_path[256], inc_path[256], err[1024];
        struct relay_config c;
        FILE *f;

        (void)state;
        assert_non_null(mkdtemp(dir));
        snprintf(main_path, sizeof(main_path), "%s/main.conf", dir);
        snprintf(inc_path, sizeof(inc_path), "%s/relay.inc", dir);
        f = fopen(main_path, "w");
        assert_non_null(f);
        fputs(KAFKA_OK "@include \"relay.inc\"\n", f); /* relative to main.conf, not to the cwd */
        fclose(f);
        f = fopen(inc_path, "w");
        assert_non_null(f);
        fputs("# included\nrelay = {\n  batch_size = 42;\n};\n", f);
        fclose(f);

        memset(&c, 0, sizeof(c));
        assert_int_equal(config_load(main_path, &c, err, sizeof(err)), 0);
        assert_int_equal(c.relay.batch_size, 42);
        config_free(&c);

        /* An error inside the included file names that file and its line. */
        f = fopen(inc_path, "w");
        assert_non_null(f);
        fputs("# included\nrelay = {\n  batch_size = 0;\n};\n", f);
        fclose(f);
        assert_int_equal(config_load(main_path, &c, err, sizeof(err)), -EINVAL);
        {
                char want[512];

                snprintf(want, sizeof(want), "%s:3: relay.batch_size: must be 1..10000 (got 0)", inc_path);
                assert_string_equal(err, want);
        }
        /* and so does a syntax error there */
        f = fopen(inc_path, "w");
        assert_non_null(f);
        fputs("# included\n\nrelay = {\n  batch_size = ;\n};\n", f);
        fclose(f);
        assert_int_equal(config_load(main_path, &c, err, sizeof(err)), -EINVAL);
        {
                char want[512];

                snprintf(want, sizeof(want), "%s:4: syntax error", inc_path);
                assert_string_equal(err, want);
        }
        unlink(inc_path);
        unlink(main_path);
        rmdir(dir);
}

/* ---- structure, types, ranges, enums ------------------------------------------------------ */

/* libconfig 1.5 exits the process (status 2, "input in flex scanner failed") on an @include of
 * a directory and blocks on a FIFO: the loader refuses both first, naming the line (found by
 * tests/fuzz/fuzz_config). */
static void test_include_not_a_file(void **state) {
        char dir[] = "/tmp/test_config_inc_XXXXXX", main_path[256], inc_path[256], sub[256], fifo[256];
        char err[1024], want[700];
        struct relay_config c;
        FILE *f;

        (void)state;
        assert_non_null(mkdtemp(dir));
        snprintf(main_path, sizeof(main_path), "%s/main.conf", dir);
        snprintf(inc_path, sizeof(inc_path), "%s/relay.inc", dir);
        snprintf(sub, sizeof(sub), "%s/sub", dir);
        snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
        assert_int_equal(mkdir(sub, 0700), 0);
        assert_int_equal(mkfifo(fifo, 0600), 0);

        f = fopen(main_path, "w");
        assert_non_null(f);
        fputs(KAFKA_OK "\n  @include   \"sub\"\n", f);
        fclose(f);
        memset(&c, 0, sizeof(c));
        assert_int_equal(config_load(main_path, &c, err, sizeof(err)), -EINVAL);
        snprintf(want, sizeof(want), "%s:3: @include \"sub\": not a regular file (a directory)", main_path);
        assert_string_equal(err, want);

        /* nested: the including file and its line */
        f = fopen(main_path, "w");
        assert_non_null(f);
        fputs(KAFKA_OK "@include \"relay.inc\"\n", f);
        fclose(f);
        f = fopen(inc_path, "w");
        assert_non_null(f);
        fputs("# included\n@include \"fifo\"\n", f);
        fclose(f);
        assert_int_equal(config_load(main_path, &c, err, sizeof(err)), -EINVAL);
        snprintf(want, sizeof(want), "%s:2: @include \"fifo\": not a regular file (a FIFO)", inc_path);
        assert_string_equal(err, want);

        /* a missing file stays libconfig's to report, with its line */
        f = fopen(inc_path, "w");
        assert_non_null(f);
        fputs("# included\n@include \"missing.inc\"\n", f);
        fclose(f);
        assert_int_equal(config_load(main_path, &c, err, sizeof(err)), -EINVAL);
        snprintf(want, sizeof(want), "%s:2: cannot open include file", inc_path);
        assert_string_equal(err, want);

        unlink(inc_path);
        unlink(main_path);
        unlink(fifo);
        rmdir(sub);
        rmdir(dir);
}

static void test_unknown_settings(void **state) {
        (void)state;
        expect_error(KAFKA_OK "\nfoo = { a = 1; };\n", 3,
                     "foo: unknown setting (groups: postgres, kafka, relay, breaker, retry, log, http)");
        expect_error("batch_size = 5;\n" KAFKA_OK, 1, "batch_size: unknown setting");
        expect_error("relay = {\n  batch_size = 5;\n  batch_sise = 5;\n};\n" KAFKA_OK, 3,
                     "relay.batch_sise: unknown setting");
        expect_error("postgres = {\n  password = \"x\";\n};\n" KAFKA_OK, 2,
                     "postgres.password: unknown setting");
        expect_error("breaker = { threshold = 1; };\n" KAFKA_OK, 1, "breaker.threshold: unknown setting");
        expect_error("retry = { max = \"1s\"; };\n" KAFKA_OK, 1, "retry.max: unknown setting");
        expect_error("log = { file = \"/x\"; };\n" KAFKA_OK, 1, "log.file: unknown setting");
}

static void test_group_as_scalar(void **state) {
        (void)state;
        expect_error(KAFKA_OK "relay = 5;\n", 2, "relay: must be a group { ... } (got integer 5)");
        expect_error("retry = \"fast\";\n" KAFKA_OK, 1,
                     "retry: must be a group { ... } (got string \"fast\")");
        expect_error("kafka = [ \"a\" ];\n", 1, "kafka: must be a group { ... } (got array)");
        expect_error("log = ( 1, \"a\" );\n" KAFKA_OK, 1, "log: must be a group { ... } (got list)");
}

static void test_wrong_types(void **state) {
        (void)state;
        expect_error("relay = { batch_size = \"500\"; };\n" KAFKA_OK, 1,
                     "relay.batch_size: must be an integer (got string \"500\")");
        expect_error("relay = { batch_size = 5.0; };\n" KAFKA_OK, 1,
                     "relay.batch_size: must be an integer (got float 5)");
        expect_error("relay = { max_attempts = true; };\n" KAFKA_OK, 1,
                     "relay.max_attempts: must be an integer (got boolean true)");
        expect_error("relay = { batch_size = { a = 1; }; };\n" KAFKA_OK, 1,
                     "relay.batch_size: must be an integer (got group)");
        expect_error("postgres = { table = 5; };\n" KAFKA_OK, 1,
                     "postgres.table: must be a string (got integer 5)");
        expect_error("postgres = { conninfo = [ \"a\" ]; };\n" KAFKA_OK, 1,
                     "postgres.conninfo: must be a string (got array)");
        expect_error("relay = { finish = 1; };\n" KAFKA_OK, 1,
                     "relay.finish: must be a string (got integer 1)");
        expect_error("log = { level = 7; };\n" KAFKA_OK, 1, "log.level: must be a string (got integer 7)");
        expect_error("breaker = { failure_ratio = \"0.5\"; };\n" KAFKA_OK, 1,
                     "breaker.failure_ratio: must be a number (got string \"0.5\")");
        /* control characters in user text are escaped, long text cut */
        expect_error("postgres = { table = 5; channel = \"a\\nb\"; };\n" KAFKA_OK, 1,
                     "must be a string (got integer 5)");
        expect_error("postgres = { channel = \"a\\nb\"; };\n" KAFKA_OK, 1, "(got \"a\\x0ab\")");
}

static void test_int_ranges(void **state) {
        static const struct {
                const char *text;
                const char *frag; /* NULL: valid */
        } cases[] = {
                { "relay = {\n batch_size = 0;\n};\n", "relay.batch_size: must be 1..10000 (got 0)" },
                { "relay = {\n batch_size = 10001;\n};\n", "relay.batch_size: must be 1..10000 (got 10001)" },
                { "relay = {\n batch_size = -1;\n};\n", "relay.batch_size: must be 1..10000 (got -1)" },
                { "relay = {\n batch_size = 1;\n};\n", NULL },
                { "relay = {\n batch_size = 10000;\n};\n", NULL },
                { "relay = {\n batch_size = 0x10;\n};\n", NULL },
                { "relay = {\n batch_size = 5000000000L;\n};\n",
                  "relay.batch_size: must be 1..10000 (got 5000000000)" },
                /* libconfig 1.5 silently cuts these to 32 bits (to 1 and 705032704) */
                { "relay = {\n batch_size = 4294967297;\n};\n",
                  "relay.batch_size: must be 1..10000 (got 4294967297)" },
                { "relay = {\n batch_size = 0x100000001;\n};\n",
                  "relay.batch_size: must be 1..10000 (got 4294967297)" },
                { "relay = {\n batch_size = -4294967295;\n};\n",
                  "relay.batch_size: must be 1..10000 (got -4294967295)" },
                { "relay = {\n batch_size =\n 4294967297;\n};\n",
                  "relay.batch_size: must be 1..10000 (got 4294967297)" },
                { "relay = {\n batch_size = 99999999999999999999;\n};\n",
                  "relay.batch_size: must be 1..10000 (got an integer beyond 64 bits)" },
                { "relay = {\n max_attempts = 0;\n};\n", "relay.max_attempts: must be 1..1000 (got 0)" },
                { "relay = {\n max_attempts = 1001;\n};\n",
                  "relay.max_attempts: must be 1..1000 (got 1001)" },
                { "breaker = {\n failure_threshold = 0;\n};\n",
                  "breaker.failure_threshold: must be 1..1000 (got 0)" },
                { "breaker = {\n window = 10001;\n};\n", "breaker.window: must be 1..10000 (got 10001)" },
                { "breaker = {\n failure_ratio = 0;\n};\n",
                  "breaker.failure_ratio: must be greater than 0 and at most 1 (got 0)" },
                { "breaker = {\n failure_ratio = 0.0;\n};\n",
                  "breaker.failure_ratio: must be greater than 0 and at most 1 (got 0)" },
                { "breaker = {\n failure_ratio = 1.5;\n};\n",
                  "breaker.failure_ratio: must be greater than 0 and at most 1 (got 1.5)" },
                { "breaker = {\n failure_ratio = -0.5;\n};\n", "(got -0.5)" },
                { "breaker = {\n failure_ratio = 1;\n};\n", NULL },
                { "breaker = {\n failure_ratio = 0.01;\n};\n", NULL },
        };

        (void)state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char text[512];

                snprintf(text, sizeof(text), "%s" KAFKA_OK, cases[i].text);
                if (cases[i].frag)
                        expect_error(text, 2, cases[i].frag);
                else {
                        struct relay_config c;

                        load_ok(text, &c);
                        config_free(&c);
                }
        }
}

static void test_int64_accepted(void **state) {
        struct relay_config c;

        (void)state;
        load_ok("relay = { batch_size = 2000L; max_attempts = 0x20; };\nbreaker = { window = 30L; "
                "};\n" KAFKA_OK,
                &c);
        assert_int_equal(c.relay.batch_size, 2000);
        assert_int_equal(c.relay.max_attempts, 32);
        assert_int_equal(c.breaker.window, 30);
        config_free(&c);
        /* Same-named settings on one line: each is matched with its own literal. */
        load_ok("relay = { batch_size = 7; }; kafka = { bootstrap_servers = \"k:1\"; batch_size = 9; };\n",
                &c);
        assert_int_equal(c.relay.batch_size, 7);
        assert_string_equal(c.kafka.props[1].value, "9");
        config_free(&c);
        expect_error("relay = { batch_size = 7; }; kafka = { bootstrap_servers = \"k:1\"; batch_size = "
                     "4294967297; };\n",
                     1, "kafka.batch_size: must be -2147483648..2147483647 (got 4294967297)");
        expect_error("kafka = { bootstrap_servers = \"k:1\"; batch_size = 1; }; relay = { batch_size = "
                     "4294967297; };\n",
                     1, "relay.batch_size: must be 1..10000 (got 4294967297)");
        /* a name inside another name or a string is not the setting */
        load_ok("postgres = { conninfo = \"application_name='max_attempts = 99999999999'\"; }; relay = { "
                "max_attempts = 3; };\n" KAFKA_OK,
                &c);
        assert_int_equal(c.relay.max_attempts, 3);
        config_free(&c);
}

static void test_enums(void **state) {
        static const struct {
                const char *level;
                int want;
        } levels[] = {
                { "error", LOG_ERR }, { "warning", LOG_WARNING }, { "notice", LOG_NOTICE },
                { "info", LOG_INFO }, { "debug", LOG_DEBUG },
        };
        struct relay_config c;

        (void)state;
        expect_error("relay = {\n  finish = \"erase\";\n};\n" KAFKA_OK, 2,
                     "relay.finish: must be \"delete\" or \"mark\" (got \"erase\")");
        expect_error("relay = { finish = \"Delete\"; };\n" KAFKA_OK, 1, "(got \"Delete\")");
        load_ok("relay = { finish = \"delete\"; };\n" KAFKA_OK, &c);
        assert_int_equal(c.relay.finish, FINISH_DELETE);
        config_free(&c);
        load_ok("relay = { finish = \"mark\"; };\n" KAFKA_OK, &c);
        assert_int_equal(c.relay.finish, FINISH_MARK);
        config_free(&c);

        expect_error("log = { level = \"verbose\"; };\n" KAFKA_OK, 1,
                     "log.level: must be \"error\", \"warning\", \"notice\", \"info\" or \"debug\" "
                     "(got \"verbose\")");
        expect_error("log = { level = \"warn\"; };\n" KAFKA_OK, 1, "(got \"warn\")");
        for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
                char text[256];

                snprintf(text, sizeof(text), "log = { level = \"%s\"; };\n" KAFKA_OK, levels[i].level);
                load_ok(text, &c);
                assert_int_equal(c.log.level, levels[i].want);
                config_free(&c);
        }
}

static void test_identifiers(void **state) {
        static const struct {
                const char *key;
                const char *value;
                bool ok;
        } cases[] = {
                { "table", "outbox", true },
                { "table", "public.outbox", true },
                { "table", "_a1._b2", true },
                { "table", "Outbox", true },
                { "table", "a23456789012345678901234567890123456789012345678901234567890123", true },
                { "table", "a234567890123456789012345678901234567890123456789012345678901234", false },
                { "table", "", false },
                { "table", "1abc", false },
                { "table", "a-b", false },
                { "table", "a b", false },
                { "table", "a.b.c", false },
                { "table", "a.", false },
                { "table", ".a", false },
                { "table", "a.1b", false },
                { "table", "\\\"a\\\"", false },
                { "table", "o;drop", false },
                { "table", "t\\u00e9", false },
                { "channel", "outbox_relay", true },
                { "channel", "a.b", false },
                { "channel", "", false },
                { "channel", "9", false },
        };

        (void)state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char text[512];

                snprintf(text, sizeof(text), "postgres = {\n  %s = \"%s\";\n};\n" KAFKA_OK, cases[i].key,
                         cases[i].value);
                if (cases[i].ok) {
                        struct relay_config c;

                        load_ok(text, &c);
                        assert_string_equal(strcmp(cases[i].key, "table") == 0 ? c.postgres.table
                                                                               : c.postgres.channel,
                                            cases[i].value);
                        config_free(&c);
                } else
                        expect_error(text, 2,
                                     strcmp(cases[i].key, "table") == 0
                                             ? "postgres.table: must be name or schema.name"
                                             : "postgres.channel: must be a name of letters");
        }
}

static void test_cross_field(void **state) {
        (void)state;
        expect_error(KAFKA_OK "retry = {\n  base = \"1m\";\n  cap = \"10s\";\n};\n", 3,
                     "retry.base: must not exceed retry.cap (10s) (got 1m)");
        expect_error(KAFKA_OK "retry = {\n  base = \"31s\";\n};\n", 3,
                     "retry.base: must not exceed retry.cap (30s) (got 31s)");
        /* only the cap was written: the cap is the line to fix */
        expect_error(KAFKA_OK "retry = {\n\n  cap = \"100ms\";\n};\n", 4,
                     "retry.cap: must not be below retry.base (200ms) (got 100ms)");
        expect_error(KAFKA_OK "breaker = {\n  cooldown = \"10m\";\n};\n", 3,
                     "breaker.cooldown: must not exceed breaker.cooldown_max (5m) (got 10m)");
        expect_error(KAFKA_OK "breaker = {\n  cooldown_max = \"1s\";\n};\n", 3,
                     "breaker.cooldown_max: must not be below breaker.cooldown (5s) (got 1s)");

        {
                struct relay_config c;

                load_ok(KAFKA_OK "retry = { base = \"30s\"; cap = \"30s\"; };\n"
                                 "breaker = { cooldown = \"1m\"; cooldown_max = \"1m\"; };\n"
                                 "relay = { drain_timeout = \"1h\"; batch_timeout = \"1s\"; };\n",
                        &c);
                assert_int_equal(c.retry.base, c.retry.cap);
                assert_int_equal(c.relay.drain_timeout, 3600 * USEC_PER_SEC);
                config_free(&c);
        }
}

/* ---- kafka -------------------------------------------------------------------------------- */

static void test_kafka_pass_through(void **state) {
        struct relay_config c;
        rd_kafka_conf_t *conf;
        char err[1024] = "";

        (void)state;
        load_ok("kafka = {\n"
                "  bootstrap_servers = \"k1:9092,k2:9092\";\n"
                "  linger_ms = 20;\n"
                "  log_level = 3;\n"
                "  socket_keepalive_enable = false;\n"
                "  batch_num_messages = 5000L;\n"
                "  retry_backoff_ms = 250;\n"
                "  client_id = \"relay-7\";\n"
                "  acks = \"all\";\n"
                "  message_timeout_ms = 54999;\n"
                "};\n",
                &c);
        assert_int_equal(c.kafka.n_props, 9);
        assert_string_equal(c.kafka.props[1].name, "linger.ms");
        assert_string_equal(c.kafka.props[1].setting, "linger_ms");
        assert_string_equal(c.kafka.props[1].value, "20");
        assert_int_equal(c.kafka.props[1].line, 3);
        /* the one librdkafka property with a real underscore keeps it */
        assert_string_equal(c.kafka.props[2].name, "log_level");
        assert_string_equal(c.kafka.props[2].value, "3");
        assert_string_equal(c.kafka.props[3].value, "false");
        assert_string_equal(c.kafka.props[4].value, "5000");
        assert_string_equal(c.kafka.props[5].value, "250");
        assert_int_equal(c.kafka.props[8].line, 10);

        conf = config_kafka_conf(&c, err, sizeof(err));
        if (!conf)
                fail_msg("%s", err);
        assert_kafka_get(conf, "bootstrap.servers", "k1:9092,k2:9092");
        assert_kafka_get(conf, "linger.ms", "20");
        assert_kafka_get(conf, "log_level", "3");
        assert_kafka_get(conf, "socket.keepalive.enable", "false");
        assert_kafka_get(conf, "batch.num.messages", "5000");
        assert_kafka_get(conf, "retry.backoff.ms", "250");
        assert_kafka_get(conf, "client.id", "relay-7");
        assert_kafka_get(conf, "message.timeout.ms", "54999");
        /* the relay's defaults that were not overridden */
        assert_kafka_get(conf, "enable.idempotence", "true");
        assert_kafka_get(conf, "acks", "-1");
        assert_kafka_get(conf, "partitioner", "murmur2_random");
        assert_kafka_get(conf, "compression.codec", "lz4");
        rd_kafka_conf_destroy(conf);
        config_free(&c);
}

static void test_kafka_relay_defaults(void **state) {
        struct relay_config c;
        rd_kafka_conf_t *conf;
        char err[1024] = "";

        (void)state;
        load_ok(KAFKA_OK, &c);
        conf = config_kafka_conf(&c, err, sizeof(err));
        assert_non_null(conf);
        assert_kafka_get(conf, "enable.idempotence", "true");
        assert_kafka_get(conf, "acks", "-1");
        assert_kafka_get(conf, "partitioner", "murmur2_random");
        assert_kafka_get(conf, "linger.ms", "5");
        assert_kafka_get(conf, "compression.codec", "lz4");
        assert_kafka_get(conf, "socket.keepalive.enable", "true");
        assert_kafka_get(conf, "statistics.interval.ms", "0");
        assert_kafka_get(conf, "message.timeout.ms", "30000"); /* min(30s, 60s / 2) */
        rd_kafka_conf_destroy(conf);
        config_free(&c);

        /* a short batch deadline pulls message.timeout.ms below it */
        load_ok("relay = { batch_timeout = \"20s\"; };\n" KAFKA_OK, &c);
        conf = config_kafka_conf(&c, err, sizeof(err));
        assert_non_null(conf);
        assert_kafka_get(conf, "message.timeout.ms", "10000");
        rd_kafka_conf_destroy(conf);
        config_free(&c);

        /* aliases count as the broker list; the mock cluster brings its own */
        load_ok("kafka = { metadata_broker_list = \"k:1\"; };\n", &c);
        config_free(&c);
        load_ok("kafka = { test_mock_num_brokers = 1; };\n", &c);
        config_free(&c);

        /* floats are rendered so librdkafka reads the same number back */
        load_ok("kafka = { bootstrap_servers = \"k:1\"; linger_ms = 2.5; };\n", &c);
        assert_string_equal(c.kafka.props[1].value, "2.5");
        conf = config_kafka_conf(&c, err, sizeof(err));
        assert_non_null(conf);
        assert_kafka_get(conf, "linger.ms", "2.5");
        rd_kafka_conf_destroy(conf);
        config_free(&c);
}

static void test_kafka_librdkafka_errors(void **state) {
        (void)state;
        expect_error("kafka = {\n  bootstrap_servers = \"k:1\";\n  linger_mss = 5;\n};\n", 3,
                     "kafka.linger_mss: No such configuration property: \"linger.mss\"");
        expect_error("kafka = {\n  bootstrap_servers = \"k:1\";\n\n  compression_codec = \"brotli\";\n};\n",
                     4,
                     "kafka.compression_codec: Invalid value \"brotli\" for configuration property "
                     "\"compression.codec\"");
        expect_error("kafka = {\n  bootstrap_servers = \"k:1\";\n  linger_ms = \"soon\";\n};\n", 3,
                     "kafka.linger_ms: Invalid value for configuration property \"queue.buffering.max.ms\"");
        expect_error("kafka = {\n  bootstrap_servers = \"k:1\";\n  batch_num_messages = 2000000;\n};\n", 3,
                     "kafka.batch_num_messages: Configuration property \"batch.num.messages\" value "
                     "2000000 is outside allowed range 1..1000000");
        expect_error("kafka = {\n  bootstrap_servers = \"k:1\";\n  enable_idempotence = \"maybe\";\n};\n", 3,
                     "kafka.enable_idempotence: Expected bool value for \"enable.idempotence\"");
        expect_error("kafka = {\n  bootstrap_servers = \"k:1\";\n  dr_msg_cb = \"f\";\n};\n", 3,
                     "kafka.dr_msg_cb: Property \"dr_msg_cb\" must be set through dedicated");
        /* wider than librdkafka's int: refused rather than cut */
        expect_error("kafka = {\n  bootstrap_servers = \"k:1\";\n  batch_size = 5000000000L;\n};\n", 3,
                     "kafka.batch_size: must be -2147483648..2147483647 (got 5000000000)");
        expect_error("kafka = {\n  bootstrap_servers = \"k:1\";\n  batch_size = 5000000000;\n};\n", 3,
                     "kafka.batch_size: must be -2147483648..2147483647 (got 5000000000)");
        expect_error("kafka = {\n  bootstrap_servers = \"k:1\";\n  sub = { a = 1; };\n};\n", 3,
                     "kafka.sub: must be a string, number or boolean (got group)");
        expect_error("kafka = {\n  bootstrap_servers = \"k:1\";\n  brokers = [ \"a\", \"b\" ];\n};\n", 3,
                     "kafka.brokers: must be a string, number or boolean (got array)");
        expect_error("kafka = {\n  bootstrap_servers = \"k:1\";\n  linger_ms = ( 1 );\n};\n", 3,
                     "kafka.linger_ms: must be a string, number or boolean (got list)");
}

static void test_kafka_guarantees(void **state) {
        static const struct {
                const char *setting;
                const char *frag; /* NULL: accepted */
        } cases[] = {
                { "enable_idempotence = false",
                  "kafka.enable_idempotence: refused: the relay needs the idempotent producer" },
                { "enable_idempotence = \"0\"", "kafka.enable_idempotence: refused" },
                { "enable_idempotence = true", NULL },
                { "acks = 1", "kafka.acks: refused: the relay needs acks=all" },
                { "acks = 0", "(got \"0\")" },
                { "request_required_acks = 1",
                  "kafka.request_required_acks: refused: the relay needs acks=all" },
                { "acks = \"all\"", NULL },
                { "acks = -1", NULL },
                { "partitioner = \"random\"",
                  "kafka.partitioner: refused: partitioner random breaks per-key order" },
                { "partitioner = \"consistent_random\"", NULL },
                { "partitioner = \"murmur2\"", NULL },
                { "queuing_strategy = \"lifo\"",
                  "kafka.queuing_strategy: refused: queuing.strategy must be fifo" },
                { "delivery_report_only_error = true",
                  "kafka.delivery_report_only_error: refused: the relay needs a delivery report" },
                { "transactional_id = \"relay-1\"",
                  "kafka.transactional_id: refused: the transactional producer is not supported" },
                { "message_timeout_ms = 0",
                  "kafka.message_timeout_ms: must be 1..54999, below relay.batch_timeout (1m)" },
                { "message_timeout_ms = 60000", "kafka.message_timeout_ms: must be 1..54999" },
                { "message_timeout_ms = 55000", "less the 5000 ms kept for the finish" },
                { "message_timeout_ms = 90000", "(got \"90000\")" },
                { "delivery_timeout_ms = 0", "kafka.delivery_timeout_ms: must be 1..54999" },
                { "message_timeout_ms = 54999", NULL },
                { "message_timeout_ms = 1", NULL },
                { "max_in_flight = 6",
                  "kafka.max_in_flight: refused: must be 1..5 with the idempotent producer" },
                { "max_in_flight_requests_per_connection = 100",
                  "kafka.max_in_flight_requests_per_connection: refused" },
                { "max_in_flight = 5", NULL },
                { "retries = 0", "kafka.retries: refused: must be at least 1" },
                { "retries = 10", NULL },
                { "enabled_events = 1", "kafka.enabled_events: refused: managed by the relay" },
        };

        (void)state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char text[512];

                snprintf(text, sizeof(text), "kafka = {\n  bootstrap_servers = \"k:1\";\n  %s;\n};\n",
                         cases[i].setting);
                if (cases[i].frag)
                        expect_error(text, 3, cases[i].frag);
                else {
                        struct relay_config c;

                        load_ok(text, &c);
                        config_free(&c);
                }
        }
        /* message.timeout.ms follows relay.batch_timeout */
        expect_error("relay = { batch_timeout = \"10s\"; };\nkafka = {\n  bootstrap_servers = \"k:1\";\n"
                     "  message_timeout_ms = 10000;\n};\n",
                     4,
                     "kafka.message_timeout_ms: must be 1..7499, below relay.batch_timeout (10s) less the "
                     "2500 ms");
}

static void test_kafka_bootstrap_required(void **state) {
        struct relay_config c;
        char err[512];

        (void)state;
        /* no kafka group at all: a file-level error */
        expect_error("relay = { batch_size = 5; };\n", 0, "kafka.bootstrap_servers: required");
        expect_error("", 0, "kafka.bootstrap_servers: required");
        /* a kafka group without it: the group's line */
        expect_error("relay = { batch_size = 5; };\n\nkafka = {\n  linger_ms = 5;\n};\n", 3,
                     "kafka.bootstrap_servers: required");
        expect_error("kafka = { bootstrap_servers = \"\"; };\n", 1, "kafka.bootstrap_servers: required");

        /* config_kafka_conf() on bare defaults refuses too */
        assert_int_equal(config_defaults(&c), 0);
        assert_null(config_kafka_conf(&c, err, sizeof(err)));
        assert_non_null(strstr(err, "kafka.bootstrap_servers: required"));
        config_free(&c);
}

/* ---- conninfo ----------------------------------------------------------------------------- */

static void test_redact_conninfo(void **state) {
        static const struct {
                const char *in, *want;
        } cases[] = {
                { "", "" },
                { "host=db1 dbname=app", "host=db1 dbname=app" },
                { "host=db1 password=secret user=relay", "host=db1 password=*** user=relay" },
                { "password=secret", "password=***" },
                { "host=db1 password = 'se cret' user=x", "host=db1 password = *** user=x" },
                { "password='it\\'s \\\\ secret' host=h", "password=*** host=h" },
                { "password=se\\ cret host=h", "password=*** host=h" },
                { "sslpassword=keypass host=h", "sslpassword=*** host=h" },
                { "Password=x host=h", "Password=*** host=h" },
                { "host=h password='unterminated secret", "host=h password=***" },
                { "host=h  \tpassword=x\tport=5", "host=h  \tpassword=***\tport=5" },
                /* a malformed remainder is redacted whole */
                { "host=h secret", "host=h ***" },
                { "host=h password=se cret", "host=h password=*** ***" },
                /* dbname may itself be a connection string that libpq expands */
                { "dbname='host=h password=secret'", "dbname='host=h password=***'" },
                { "dbname=postgresql://u:secret@h/db", "dbname='postgresql://u:***@h/db'" },
                { "postgresql://relay:secret@db1:5432/app", "postgresql://relay:***@db1:5432/app" },
                { "postgres://relay:secret@db1/app", "postgres://relay:***@db1/app" },
                { "postgresql://relay@db1/app", "postgresql://relay@db1/app" },
                { "postgresql://db1:5432/app", "postgresql://db1:5432/app" },
                { "postgresql://u:secret@h/db?password=x&sslmode=require",
                  "postgresql://u:***@h/db?password=***&sslmode=require" },
                { "postgresql:///app?host=/run/pg&password=x",
                  "postgresql:///app?host=/run/pg&password=***" },
                { "postgresql://h/db?pass%77ord=x", "postgresql://h/db?pass%77ord=***" },
                { "postgresql://h/db?sslpassword=x", "postgresql://h/db?sslpassword=***" },
                { "postgresql://u:se/cret@h/db", "postgresql://u:***@h/db" },
                { "postgresql://u:p%40ss@h/db", "postgresql://u:***@h/db" },
        };
        char buf[256];

        (void)state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                assert_ptr_equal(config_redact_conninfo(cases[i].in, buf, sizeof(buf)), buf);
                if (strcmp(buf, cases[i].want) != 0)
                        fail_msg("redact(%s) = %s, want %s", cases[i].in, buf, cases[i].want);
        }
        /* small buffers truncate, never overflow, and stay terminated */
        memset(buf, 'x', sizeof(buf));
        config_redact_conninfo("host=db1 password=secret", buf, 12);
        assert_string_equal(buf, "host=db1 pa");
        memset(buf, 'x', sizeof(buf));
        config_redact_conninfo("password=secret", buf, 1);
        assert_string_equal(buf, "");
        assert_int_equal(buf[1], 'x');
}

static void test_conninfo_errors_hide_password(void **state) {
        static const char *const bad[] = {
                "host=db1 password=hunter2 nonsense=1",
                "host=db1 password=hunter2 port",
                "host=db1 password=hun ter2",
                "host=db1 password='hunter2",
                "hunter2",
                "host=db1 hunter2",
                "postgresql://u:hunter2@[::1/app",
                "postgresql://u:hunter2@h/app?bogus=1",
                "postgresql://u:hunter2@h/app?password=hunter2&bogus=1",
                "postgresql://h/app?passwd=hunter2",
                "host=db1 passwd=hunter2",
                "host=db1 PASSWORD=hunter2",
                "host=db1 pass word=hunter2",
        };

        (void)state;
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct relay_config c;
                char text[512], err[1024];
                char *path;

                snprintf(text, sizeof(text), "postgres = {\n  conninfo = \"%s\";\n};\n" KAFKA_OK, bad[i]);
                path = write_tmp(text);
                memset(&c, 0, sizeof(c));
                assert_int_equal(config_load(path, &c, err, sizeof(err)), -EINVAL);
                if (!strstr(err, "postgres.conninfo: invalid connection string") || strstr(err, "hunter") ||
                    strstr(err, "ter2"))
                        fail_msg("conninfo %s: %s", bad[i], err);
                assert_non_null(strstr(err, ":2: postgres.conninfo: "));
                unlink(path);
                free(path);
        }
        expect_error("postgres = { conninfo = \"host=x bogus=1\"; };\n" KAFKA_OK, 1,
                     "postgres.conninfo: invalid connection string: invalid connection option \"bogus\" "
                     "(got \"host=x bogus=***\")");
        expect_error("postgres = { conninfo = \"host=x passwd=hunter2 port=5\"; };\n" KAFKA_OK, 1,
                     "postgres.conninfo: invalid connection string: invalid connection option \"passwd\" "
                     "(got \"host=x passwd=*** port=5\")");
        /* valid strings pass, password and all */
        {
                struct relay_config c;

                load_ok("postgres = { conninfo = \"host=db1 password='a b' sslmode=disable\"; };\n" KAFKA_OK,
                        &c);
                assert_string_equal(c.postgres.conninfo, "host=db1 password='a b' sslmode=disable");
                config_free(&c);
                load_ok("postgres = { conninfo = \"postgresql://u:pw@db1:5433/app?sslmode=disable\"; "
                        "};\n" KAFKA_OK,
                        &c);
                config_free(&c);
        }
}

/* conninfo_check(): what libpq's parser accepts but libpq refuses when it connects. */
static void test_conninfo_check(void **state) {
        static const struct {
                const char *in;
                const char *want; /* NULL: accepted; else the whole message */
        } cases[] = {
                { "", NULL },
                { "host=db1 dbname=app", NULL },
                { "host=db1 port=5432", NULL },
                { "host=db1 port=1", NULL },
                { "host=db1 port=65535", NULL },
                { "host=db1 port=' 5432 '", NULL }, /* libpq skips white space around a number */
                { "host=db1 port=''", NULL }, /* empty: the default port */
                { "host=a,b port=5432", NULL }, /* one port for every host */
                { "host=a,b port=5432,5433", NULL },
                { "host=a,b port=5432,", NULL }, /* an empty element is the default port */
                { "hostaddr=10.0.0.1,10.0.0.2 port=1,2", NULL },
                { "host=a,b hostaddr=10.0.0.1,10.0.0.2", NULL },
                { "postgresql://u:pw@127.0.0.1:5433/x", NULL },
                { "postgresql://h1:5432,h2:5433/db", NULL },
                { "postgresql://h1,h2/db", NULL },
                { "postgresql://h/db?port=", NULL },
                { "connect_timeout=10 keepalives=1 keepalives_idle=30 keepalives_interval=5 "
                  "keepalives_count=3 tcp_user_timeout=10000",
                  NULL },
                { "connect_timeout=-1", NULL }, /* libpq: no timeout */
                { "host=db1 port=notaport",
                  "invalid connection string: port must be 1..65535 (got \"host=db1 port=notaport\")" },
                { "postgresql://u:pw@127.0.0.1:notaport/x",
                  "invalid connection string: port must be 1..65535 (got "
                  "\"postgresql://u:***@127.0.0.1:notaport/x\")" },
                { "postgresql://h/db?port=x&password=pw",
                  "invalid connection string: port must be 1..65535 (got "
                  "\"postgresql://h/db?port=x&password=***\")" },
                { "host=db1 port=0",
                  "invalid connection string: port must be 1..65535 (got \"host=db1 port=0\")" },
                { "host=db1 port=65536",
                  "invalid connection string: port must be 1..65535 (got \"host=db1 port=65536\")" },
                { "host=db1 port=-1",
                  "invalid connection string: port must be 1..65535 (got \"host=db1 port=-1\")" },
                { "host=db1 port=5432x",
                  "invalid connection string: port must be 1..65535 (got \"host=db1 port=5432x\")" },
                { "host=db1 port=' '",
                  "invalid connection string: port must be 1..65535 (got \"host=db1 port=' '\")" },
                { "host=db1 port=99999999999",
                  "invalid connection string: port must be 1..65535 (got \"host=db1 port=99999999999\")" },
                { "host=a,b port=5432,x",
                  "invalid connection string: port must be 1..65535 (got \"host=a,b port=5432,x\")" },
                { "postgresql://h1:5432,h2:x/db",
                  "invalid connection string: port must be 1..65535 (got \"postgresql://h1:5432,h2:x/db\")" },
                { "host=a,b,c port=1,2",
                  "invalid connection string: 2 ports for 3 hosts; give one port, or one per host (got "
                  "\"host=a,b,c port=1,2\")" },
                { "host=a port=1,",
                  "invalid connection string: 2 ports for 1 hosts; give one port, or one per host (got "
                  "\"host=a port=1,\")" },
                { "hostaddr=10.0.0.1,10.0.0.2 host=a",
                  "invalid connection string: 1 host names for 2 hostaddr values; give one per address "
                  "(got \"hostaddr=10.0.0.1,10.0.0.2 host=a\")" },
                { "host=db1 connect_timeout=10s",
                  "invalid connection string: connect_timeout must be an integer (got \"host=db1 "
                  "connect_timeout=10s\")" },
                { "keepalives=yes",
                  "invalid connection string: keepalives must be an integer (got \"keepalives=yes\")" },
                { "keepalives_idle=''",
                  "invalid connection string: keepalives_idle must be an integer (got "
                  "\"keepalives_idle=''\")" },
                { "keepalives_interval=x",
                  "invalid connection string: keepalives_interval must be an integer (got "
                  "\"keepalives_interval=x\")" },
                { "keepalives_count=1.5",
                  "invalid connection string: keepalives_count must be an integer (got "
                  "\"keepalives_count=1.5\")" },
                { "password=pw tcp_user_timeout=5000000000",
                  "invalid connection string: tcp_user_timeout must be an integer (got \"password=*** "
                  "tcp_user_timeout=5000000000\")" },
                /* what libpq's parser refuses is reported as before */
                { "host=x bogus=1",
                  "invalid connection string: invalid connection option \"bogus\" (got \"host=x "
                  "bogus=***\")" },
                { "host=db1 password='pw",
                  "invalid connection string (in a password value) (got \"host=db1 password=***\")" },
        };

        (void)state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char msg[512] = "";
                int r = conninfo_check(cases[i].in, msg, sizeof(msg));

                if (!cases[i].want) {
                        if (r != 0)
                                fail_msg("conninfo_check(%s) = %d (%s), want 0", cases[i].in, r, msg);
                } else if (r != -EINVAL || strcmp(msg, cases[i].want) != 0)
                        fail_msg("conninfo_check(%s) = %d\n  got  %s\n  want %s", cases[i].in, r, msg,
                                 cases[i].want);
        }
        /* at load time, with the setting's line, and never the password */
        expect_error(
                "postgres = {\n  conninfo = \"postgresql://u:hunter2@127.0.0.1:notaport/x\";\n};\n" KAFKA_OK,
                2,
                "postgres.conninfo: invalid connection string: port must be 1..65535 (got "
                "\"postgresql://u:***@127.0.0.1:notaport/x\")");
        expect_error("postgres = {\n  conninfo = \"host=db1 password=hunter2 port=notaport\";\n};\n" KAFKA_OK,
                     2,
                     "postgres.conninfo: invalid connection string: port must be 1..65535 (got "
                     "\"host=db1 password=*** port=notaport\")");
}

/* ---- the producer probe ------------------------------------------------------------------- */

static void test_kafka_probe(void **state) {
        char dir[] = "/tmp/test_config_probe_XXXXXX", main_path[256], inc_path[256], err[1024], want[600];
        struct relay_config c;
        FILE *f;

        (void)state;
        /* a file that loads, and a producer librdkafka creates */
        load_ok("relay = { batch_size = 5; };\n" KAFKA_OK, &c);
        assert_int_equal(c.kafka.line, 2);
        assert_null(c.kafka.file);
        err[0] = 0;
        if (kafka_guard_probe(&c, err, sizeof(err)) != 0)
                fail_msg("%s", err);
        config_free(&c);

        /* each property is fine alone; rd_kafka_new() refuses the pair: the group's line */
        load_ok("relay = { batch_size = 5; };\n\nkafka = {\n  bootstrap_servers = \"k:1\";\n"
                "  linger_ms = 40000;\n};\n",
                &c);
        assert_int_equal(c.kafka.line, 3);
        assert_int_equal(kafka_guard_probe(&c, err, sizeof(err)), -EINVAL);
        snprintf(want, sizeof(want),
                 "%s:3: kafka: cannot create the producer: `message.timeout.ms` must be greater than "
                 "`linger.ms`",
                 c.file);
        assert_string_equal(err, want);
        config_free(&c);

        /* a kafka group from an included file is blamed on that file */
        assert_non_null(mkdtemp(dir));
        snprintf(main_path, sizeof(main_path), "%s/main.conf", dir);
        snprintf(inc_path, sizeof(inc_path), "%s/kafka.inc", dir);
        f = fopen(main_path, "w");
        assert_non_null(f);
        fputs("relay = { batch_size = 5; };\n@include \"kafka.inc\"\n", f);
        fclose(f);
        f = fopen(inc_path, "w");
        assert_non_null(f);
        fputs("# included\nkafka = {\n  bootstrap_servers = \"k:1\";\n  linger_ms = 40000;\n};\n", f);
        fclose(f);
        memset(&c, 0, sizeof(c));
        assert_int_equal(config_load(main_path, &c, err, sizeof(err)), 0);
        assert_string_equal(c.kafka.file, inc_path);
        assert_int_equal(kafka_guard_probe(&c, err, sizeof(err)), -EINVAL);
        snprintf(want, sizeof(want), "%s:2: kafka: cannot create the producer: ", inc_path);
        assert_memory_equal(err, want, strlen(want));
        config_free(&c);
        unlink(inc_path);
        unlink(main_path);
        rmdir(dir);
}

/* ---- SIGHUP: restart-only settings -------------------------------------------------------- */

#define RUNNING_CONF                                                                          \
        "postgres = { conninfo = \"host=db1\"; table = \"s.outbox\"; channel = \"ch1\"; };\n" \
        "relay = { batch_timeout = \"30s\"; batch_size = 10; };\n"                            \
        "kafka = { bootstrap_servers = \"k1:9092\"; linger_ms = 7; };\n"
#define NEXT_CONF                                                                              \
        "postgres = { conninfo = \"host=db2\"; table = \"s.outbox2\"; channel = \"ch1\"; };\n" \
        "relay = { batch_timeout = \"40s\"; batch_size = 20; };\n"                             \
        "kafka = { bootstrap_servers = \"k2:9092\"; };\n"

static void test_keep_restart_only(void **state) {
        struct relay_config running, next;
        char changed[256];

        (void)state;
        load_ok(RUNNING_CONF, &running);
        load_ok(NEXT_CONF, &next);
        assert_int_equal(config_keep_restart_only(&running, &next, changed, sizeof(changed)), 4);
        assert_string_equal(changed, "postgres.conninfo, postgres.table, relay.batch_timeout, kafka.*");
        assert_string_equal(next.postgres.conninfo, "host=db1");
        assert_string_equal(next.postgres.table, "s.outbox");
        assert_int_equal(next.relay.batch_timeout, 30 * USEC_PER_SEC);
        assert_int_equal(next.relay.batch_size, 20); /* reloadable: the new value */
        assert_int_equal(next.kafka.n_props, 2);
        assert_string_equal(next.kafka.props[1].name, "linger.ms");
        assert_string_equal(next.kafka.props[1].setting, "linger_ms");
        assert_string_equal(next.kafka.props[1].value, "7");
        assert_int_equal(next.kafka.props[1].line, 3);
        /* a second time nothing differs */
        assert_int_equal(config_keep_restart_only(&running, &next, changed, sizeof(changed)), 0);
        assert_string_equal(changed, "");
        config_free(&running);
        config_free(&next);
}

/* A dup() that fails once `dup_budget` copies have been made. */
static int dup_budget;

static char *failing_dup(const char *s) {
        if (dup_budget <= 0)
                return NULL;
        dup_budget--;
        return strdup(s);
}

/* Out of memory at any one copy: -ENOMEM, `next` exactly as loaded and freeable, `changed`
 * empty. With enough memory the same call succeeds. */
static void test_keep_restart_only_out_of_memory(void **state) {
        struct relay_config running, next, fresh;
        char changed[256];
        int budget, r = -ENOMEM;

        (void)state;
        load_ok(RUNNING_CONF, &running);
        for (budget = 0; budget < 100; budget++) {
                load_ok(NEXT_CONF, &next);
                load_ok(NEXT_CONF, &fresh);
                dup_budget = budget;
                strcpy(changed, "junk");
                r = config_keep_restart_only_with(&running, &next, changed, sizeof(changed), failing_dup);
                if (r >= 0) {
                        config_free(&next);
                        config_free(&fresh);
                        break;
                }
                assert_int_equal(r, -ENOMEM);
                assert_string_equal(changed, "");
                assert_same_settings(&next, &fresh);
                assert_int_equal(next.kafka.n_props, fresh.kafka.n_props);
                for (size_t i = 0; i < next.kafka.n_props; i++) {
                        assert_non_null(next.kafka.props[i].name);
                        assert_string_equal(next.kafka.props[i].name, fresh.kafka.props[i].name);
                        assert_string_equal(next.kafka.props[i].setting, fresh.kafka.props[i].setting);
                        assert_string_equal(next.kafka.props[i].value, fresh.kafka.props[i].value);
                }
                config_free(&next);
                config_free(&fresh);
        }
        assert_int_equal(r, 4);
        /* two strings and three per property (two): each of the 8 copies failed once */
        assert_int_equal(budget, 8);
        config_free(&running);
}

static void test_err_buffer_small_or_null(void **state) {
        struct relay_config c;
        char err[16];
        char *path = write_tmp("relay = { batch_size = 0; };\n" KAFKA_OK);

        (void)state;
        memset(&c, 0, sizeof(c));
        memset(err, 'x', sizeof(err));
        assert_int_equal(config_load(path, &c, err, sizeof(err)), -EINVAL);
        assert_int_equal(strlen(err), sizeof(err) - 1);
        assert_memory_equal(err, path, sizeof(err) - 1);
        assert_int_equal(config_load(path, &c, NULL, 0), -EINVAL);
        assert_true(is_zeroed(&c));
        unlink(path);
        free(path);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_defaults),
                cmocka_unit_test(test_minimal_file_gives_defaults),
                cmocka_unit_test(test_sample_is_valid_and_documents_defaults),
                cmocka_unit_test(test_sample_lists_every_key),
                cmocka_unit_test(test_every_key_set),
                cmocka_unit_test(test_durations),
                cmocka_unit_test(test_missing_file),
                cmocka_unit_test(test_directory_as_file),
                cmocka_unit_test(test_unreadable_file),
                cmocka_unit_test(test_syntax_errors),
                cmocka_unit_test(test_include),
                cmocka_unit_test(test_include_not_a_file),
                cmocka_unit_test(test_unknown_settings),
                cmocka_unit_test(test_group_as_scalar),
                cmocka_unit_test(test_wrong_types),
                cmocka_unit_test(test_int_ranges),
                cmocka_unit_test(test_int64_accepted),
                cmocka_unit_test(test_enums),
                cmocka_unit_test(test_identifiers),
                cmocka_unit_test(test_cross_field),
                cmocka_unit_test(test_kafka_pass_through),
                cmocka_unit_test(test_kafka_relay_defaults),
                cmocka_unit_test(test_kafka_librdkafka_errors),
                cmocka_unit_test(test_kafka_guarantees),
                cmocka_unit_test(test_kafka_bootstrap_required),
                cmocka_unit_test(test_redact_conninfo),
                cmocka_unit_test(test_conninfo_errors_hide_password),
                cmocka_unit_test(test_conninfo_check),
                cmocka_unit_test(test_kafka_probe),
                cmocka_unit_test(test_keep_restart_only),
                cmocka_unit_test(test_keep_restart_only_out_of_memory),
                cmocka_unit_test(test_err_buffer_small_or_null),
        };

        return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
