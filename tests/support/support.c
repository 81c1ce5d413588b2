/* support.c -- Shared test support: the test bed's servers, the relay as a process, topic checks. */
#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

const char *ts_env(const char *name) {
        const char *v = getenv(name);

        if (!v || !*v) {
                /* Never skip: an integration test without its servers is a failure. */
                fprintf(stderr,
                        "FATAL: %s is not set; run the integration tests through "
                        "scripts/test.sh (it starts PostgreSQL and Kafka)\n",
                        name);
                exit(2);
        }
        return v;
}

const char *ts_conninfo(void) {
        static char buf[256];

        if (!buf[0])
                snprintf(buf, sizeof(buf), "host=%s port=%s dbname=%s user=%s", ts_env("PGHOST"),
                         ts_env("PGPORT"), ts_env("PGDATABASE"), ts_env("PGUSER"));
        return buf;
}

char *ts_topic(const char *prefix) {
        static unsigned counter;
        char buf[128];

        snprintf(buf, sizeof(buf), "%s-%d-%ld-%u", prefix, (int)getpid(), (long)time(NULL), counter++);
        return strdup(buf);
}

int64_t ts_now_ms(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- PostgreSQL ---- */

PGconn *ts_pg_connect(void) {
        PGconn *c = PQconnectdb(ts_conninfo());

        if (PQstatus(c) != CONNECTION_OK)
                fail_msg("cannot connect to the test bed's PostgreSQL: %s", PQerrorMessage(c));
        PQclear(PQexec(c, "SET client_min_messages = warning"));
        return c;
}

static PGresult *vexec(PGconn *c, const char *fmt, va_list ap) {
        char *sql;
        PGresult *res;

        if (vasprintf(&sql, fmt, ap) < 0)
                fail_msg("out of memory");
        res = PQexec(c, sql);
        if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
                fail_msg("SQL failed: %s\n  %s", PQresultErrorMessage(res), sql);
        free(sql);
        return res;
}

void ts_pg_exec(PGconn *c, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        PQclear(vexec(c, fmt, ap));
        va_end(ap);
}

int64_t ts_pg_int(PGconn *c, const char *fmt, ...) {
        va_list ap;
        PGresult *res;
        int64_t v;

        va_start(ap, fmt);
        res = vexec(c, fmt, ap);
        va_end(ap);
        if (PQntuples(res) < 1 || PQgetisnull(res, 0, 0))
                fail_msg("query returned no value");
        v = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        PQclear(res);
        return v;
}

void ts_pg_wait(PGconn *c, int timeout_ms, const char *fmt, ...) {
        int64_t until = ts_now_ms() + timeout_ms;
        char *sql, last[64] = "(no value)";
        va_list ap;

        va_start(ap, fmt);
        if (vasprintf(&sql, fmt, ap) < 0)
                fail_msg("out of memory");
        va_end(ap);
        for (;;) {
                PGresult *res = PQexec(c, sql);
                bool done;

                if (PQresultStatus(res) != PGRES_TUPLES_OK)
                        fail_msg("SQL failed: %s\n  %s", PQresultErrorMessage(res), sql);
                done = PQntuples(res) > 0 && !PQgetisnull(res, 0, 0) && PQgetvalue(res, 0, 0)[0] == 't';
                if (PQntuples(res) > 0)
                        snprintf(last, sizeof(last), "%s",
                                 PQgetisnull(res, 0, 0) ? "NULL" : PQgetvalue(res, 0, 0));
                PQclear(res);
                if (done)
                        break;
                if (ts_now_ms() > until)
                        fail_msg("waited %d ms in vain for: %s (last value %s)", timeout_ms, sql, last);
                usleep(20000);
        }
        free(sql);
}

/* The copy keeps only what the writer wrote, in its own columns, so it neither follows the
 * relay's columns of the outbox nor what the relay does to a row later. */
void ts_pg_install_copy(PGconn *c) {
        ts_pg_exec(c,
                   "CREATE TABLE IF NOT EXISTS outbox_test_copy (id bigint, topic text, key text,"
                   " payload bytea, headers jsonb, created_at timestamptz);"
                   "CREATE INDEX IF NOT EXISTS outbox_test_copy_topic ON outbox_test_copy (topic, id);"
                   "CREATE OR REPLACE FUNCTION outbox_test_copy() RETURNS trigger LANGUAGE plpgsql AS"
                   " $$ BEGIN INSERT INTO outbox_test_copy (id, topic, key, payload, headers, created_at)"
                   " VALUES (NEW.id, NEW.topic, NEW.key, NEW.payload, NEW.headers, NEW.created_at);"
                   " RETURN NULL; END $$;"
                   "DROP TRIGGER IF EXISTS outbox_test_copy ON outbox;"
                   "CREATE TRIGGER outbox_test_copy AFTER INSERT ON outbox"
                   " FOR EACH ROW EXECUTE FUNCTION outbox_test_copy();");
}

void ts_testbed(const char *cmd) {
        char buf[1024];
        int rc;

        snprintf(buf, sizeof(buf), "'%s/scripts/testbed.sh' %s '%s'", ts_env("OUTBOX_RELAY_SRCDIR"), cmd,
                 ts_env("TESTBED_DIR"));
        rc = system(buf);
        if (rc != 0)
                fail_msg("testbed.sh %s failed (%d)", cmd, rc);
}

/* ---- the relay as a process ---- */

/* Relays started and not yet reaped, by value: a failed test longjmps out of its frame, so the
 * teardown must not point into it. Keeps a daemon from running on into the next test. */
static struct ts_relay running[16];
/* mock-kafka processes, for the same reason: their pids, not pointers into a test's frame. */
static pid_t mocks[8];
/* Writer threads, heap-allocated, for the same reason. */
static struct ts_load *loads[8];
static void load_stop(struct ts_load *l);

static void track(const struct ts_relay *r, bool add) {
        for (size_t i = 0; i < 16; i++) {
                if (add && running[i].pid <= 0) {
                        running[i] = *r;
                        return;
                }
                if (!add && running[i].pid == r->pid)
                        running[i].pid = 0;
        }
}

int ts_teardown(void **state) {
        (void)state;
        for (size_t i = 0; i < 8; i++)
                if (loads[i]) {
                        load_stop(loads[i]);
                        loads[i] = NULL;
                }
        for (size_t i = 0; i < 8; i++)
                if (mocks[i] > 0) {
                        kill(mocks[i], SIGKILL);
                        waitpid(mocks[i], NULL, 0);
                        mocks[i] = 0;
                }
        for (size_t i = 0; i < 16; i++) {
                struct ts_relay *r = &running[i];

                if (r->pid > 0) {
                        kill(r->pid, SIGKILL);
                        waitpid(r->pid, NULL, 0);
                        r->pid = 0;
                        ts_relay_dump_log(r);
                }
        }
        return 0;
}

void ts_relay_start(struct ts_relay *r, const char *relay_group, const char *extra_groups) {
        struct ts_relay_opts o = { .relay_group = relay_group, .extra_groups = extra_groups };

        ts_relay_start_opts(r, &o);
}

void ts_relay_start_ex(struct ts_relay *r, const char *relay_group, const char *kafka_extra,
                       const char *extra_groups) {
        struct ts_relay_opts o = { .relay_group = relay_group,
                                   .kafka_extra = kafka_extra,
                                   .extra_groups = extra_groups };

        ts_relay_start_opts(r, &o);
}

void ts_relay_start_opts(struct ts_relay *r, const struct ts_relay_opts *o) {
        /* Under OUTBOX_TEST_TMPDIR when the runner gives one (scripts/test.sh: inside its test
         * bed, removed with it), else /tmp: the directory stays after the test, logs and all. */
        const char *base = getenv("OUTBOX_TEST_TMPDIR");
        FILE *f;
        int fd;

        memset(r, 0, sizeof(*r));
        snprintf(r->dir, sizeof(r->dir), "%s/outbox-relay-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(r->dir))
                fail_msg("mkdtemp: %s", strerror(errno));
        snprintf(r->conf, sizeof(r->conf), "%s/relay.conf", r->dir);
        snprintf(r->log, sizeof(r->log), "%s/relay.log", r->dir);
        f = fopen(r->conf, "w");
        if (!f)
                fail_msg("cannot write %s", r->conf);
        fprintf(f,
                "postgres = { conninfo = \"%s\"; %s };\n"
                "kafka = { bootstrap_servers = \"%s\"; %s };\n"
                "relay = { %s };\n"
                "log = { level = \"%s\"; };\n"
                "%s\n%s",
                o->conninfo ? o->conninfo : ts_conninfo(), o->postgres_extra ? o->postgres_extra : "",
                o->bootstrap ? o->bootstrap : ts_env("KAFKA_BOOTSTRAP"), o->kafka_extra ? o->kafka_extra : "",
                o->relay_group ? o->relay_group : "", o->log_level ? o->log_level : "info",
                o->extra_groups ? o->extra_groups : "",
                o->extra_groups && strstr(o->extra_groups, "http") ? "" : TS_HTTP_GROUP);
        fclose(f);

        r->pid = fork();
        if (r->pid < 0)
                fail_msg("fork: %s", strerror(errno));
        if (r->pid == 0) {
                const char *bin = getenv("OUTBOX_RELAY_BIN");
                char pid[32];

                fd = open(r->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                if (fd < 0 || !bin)
                        _exit(127);
                dup2(fd, STDOUT_FILENO);
                dup2(fd, STDERR_FILENO);
                unsetenv("NOTIFY_SOCKET");
                unsetenv("WATCHDOG_USEC");
                unsetenv("WATCHDOG_PID");
                if (o->notify_socket)
                        setenv("NOTIFY_SOCKET", o->notify_socket, 1);
                if (o->watchdog_usec) {
                        snprintf(pid, sizeof(pid), "%d", (int)getpid());
                        setenv("WATCHDOG_USEC", o->watchdog_usec, 1);
                        setenv("WATCHDOG_PID", pid, 1);
                }
                execl(bin, bin, "-c", r->conf, (char *)NULL);
                _exit(127);
        }
        track(r, true);
}

int ts_relay_stop(struct ts_relay *r, int sig, int timeout_ms) {
        int64_t until = ts_now_ms() + timeout_ms;
        int status;

        if (r->pid <= 0)
                return -1;
        if (sig)
                kill(r->pid, sig);
        for (;;) {
                pid_t p = waitpid(r->pid, &status, WNOHANG);

                if (p == r->pid)
                        break;
                if (ts_now_ms() > until) {
                        kill(r->pid, SIGKILL);
                        waitpid(r->pid, &status, 0);
                        track(r, false);
                        r->pid = 0;
                        ts_relay_dump_log(r);
                        fail_msg("relay did not exit within %d ms of signal %d", timeout_ms, sig);
                }
                usleep(10000);
        }
        track(r, false);
        r->pid = 0;
        if (WIFEXITED(status))
                return WEXITSTATUS(status);
        return 128 + WTERMSIG(status);
}

static char *slurp(const char *path) {
        FILE *f = fopen(path, "r");
        char *buf = NULL;
        size_t len = 0;

        if (!f)
                return strdup("");
        FILE *m = open_memstream(&buf, &len);
        char chunk[4096];
        size_t n;

        while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
                fwrite(chunk, 1, n, m);
        fclose(f);
        fclose(m);
        return buf;
}

bool ts_relay_log_wait(struct ts_relay *r, const char *needle, int timeout_ms) {
        int64_t until = ts_now_ms() + timeout_ms;

        for (;;) {
                char *s = slurp(r->log);
                bool found = strstr(s, needle) != NULL;

                free(s);
                if (found)
                        return true;
                if (ts_now_ms() > until)
                        return false;
                usleep(20000);
        }
}

const char *ts_relay_http(struct ts_relay *r, int timeout_ms) {
        static const char tag[] = "serving HTTP on ";
        char *s, *at;

        if (!ts_relay_log_wait(r, tag, timeout_ms)) {
                ts_relay_dump_log(r);
                fail_msg("the relay did not say where it serves HTTP");
        }
        s = slurp(r->log);
        /* "serving HTTP on 127.0.0.1:46725 (health, …)": the address ends at the space. */
        at = strstr(s, tag) + strlen(tag);
        snprintf(r->http, sizeof(r->http), "%.*s", (int)strcspn(at, " \n"), at);
        free(s);
        return r->http;
}

struct http_body {
        char *p;
        size_t n;
};

static size_t http_collect(char *data, size_t size, size_t nmemb, void *arg) {
        struct http_body *b = arg;
        char *p = realloc(b->p, b->n + size * nmemb + 1);

        if (!p)
                return 0;
        memcpy(p + b->n, data, size * nmemb);
        b->n += size * nmemb;
        p[b->n] = 0;
        b->p = p;
        return size * nmemb;
}

long ts_http(const char *addr, const char *method, const char *path, char **body) {
        static bool init;
        struct http_body b = { calloc(1, 1), 0 };
        char url[300];
        long code = 0;
        CURL *c;

        if (!init) {
                curl_global_init(CURL_GLOBAL_DEFAULT);
                init = true;
        }
        c = curl_easy_init();
        if (!c || !b.p)
                fail_msg("curl: out of memory");
        snprintf(url, sizeof(url), "http://%s%s", addr, path);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
        if (strcmp(method, "HEAD") == 0)
                curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_collect);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
        if (curl_easy_perform(c) == CURLE_OK)
                curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_cleanup(c);
        if (body)
                *body = b.p;
        else
                free(b.p);
        return code;
}

void ts_http_wait(const char *addr, const char *path, long status, const char *needle, int timeout_ms) {
        int64_t until = ts_now_ms() + timeout_ms;

        for (;;) {
                char *body = NULL;
                long code = ts_http(addr, "GET", path, &body);

                if (code == status && (!needle || strstr(body, needle))) {
                        free(body);
                        return;
                }
                if (ts_now_ms() > until)
                        fail_msg("GET %s: waited %d ms for %ld%s%s, last answer %ld: %s", path, timeout_ms,
                                 status, needle ? " with " : "", needle ? needle : "", code, body);
                free(body);
                usleep(50000);
        }
}

double ts_metric(const char *text, const char *series) {
        size_t n = strlen(series);

        for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
                if (strncmp(p, series, n) == 0 && p[n] == ' ')
                        return strtod(p + n + 1, NULL);
        return -1;
}

int ts_relay_log_count(const struct ts_relay *r, const char *needle) {
        FILE *f = fopen(r->log, "r");
        char *line = NULL;
        size_t cap = 0;
        int n = 0;

        if (!f)
                return 0;
        while (getline(&line, &cap, f) >= 0)
                n += strstr(line, needle) != NULL;
        free(line);
        fclose(f);
        return n;
}

void ts_relay_log_wait_n(struct ts_relay *r, const char *needle, int n, int timeout_ms) {
        int64_t until = ts_now_ms() + timeout_ms;
        int seen;

        while ((seen = ts_relay_log_count(r, needle)) < n) {
                if (ts_now_ms() > until) {
                        ts_relay_dump_log(r);
                        fail_msg("waited %d ms in vain for %d log lines with '%s' (saw %d)", timeout_ms, n,
                                 needle, seen);
                }
                usleep(20000);
        }
}

void ts_relay_log_stats(const struct ts_relay *r, struct ts_relay_log_stats *out) {
        FILE *f = fopen(r->log, "r");
        char *line = NULL;
        size_t cap = 0;

        memset(out, 0, sizeof(*out));
        out->published = out->dead_lettered = -1;
        if (!f)
                return;
        while (getline(&line, &cap, f) >= 0) {
                const char *p;
                long long n, d;

                if ((p = strstr(line, "drained: published ")) &&
                    sscanf(p, "drained: published %lld, dead-lettered %lld", &n, &d) == 2) {
                        out->published = n;
                        out->dead_lettered = d;
                }
                if ((p = strstr(line, "batch of "))) {
                        if (sscanf(p, "batch of %lld rows: %lld delivered, some failed", &n, &d) == 2) {
                                out->partial_batches++;
                                out->partial_failed_rows += n - d;
                        } else if (sscanf(p, "batch of %lld rows: nothing delivered", &n) == 1 &&
                                   strstr(p, "nothing delivered")) {
                                out->failed_batches++;
                                out->failed_batch_rows += n;
                        }
                }
                if (((p = strstr(line, "finishing a batch of ")) &&
                     sscanf(p, "finishing a batch of %lld rows failed", &n) == 1) ||
                    ((p = strstr(line, "giving up a batch of ")) &&
                     sscanf(p, "giving up a batch of %lld rows in flight", &n) == 1)) {
                        out->rolled_back_batches++;
                        out->rolled_back_rows += n;
                }
                out->breaker_opened += strstr(line, "circuit breaker opened") != NULL;
                out->breaker_reopened += strstr(line, "circuit breaker probe failed") != NULL;
                out->breaker_closed += strstr(line, "circuit breaker closed") != NULL;
                out->db_lost += strstr(line, "lost the PostgreSQL connection") != NULL;
                out->db_back += strstr(line, "connected to PostgreSQL again") != NULL;
        }
        free(line);
        fclose(f);
}

long long ts_relay_log_resendable(const struct ts_relay_log_stats *s) {
        return s->failed_batch_rows + s->partial_failed_rows + s->rolled_back_rows;
}

void ts_relay_dump_log(const struct ts_relay *r) {
        char *s = slurp(r->log);

        fprintf(stderr, "----- relay log %s -----\n%s----- end of relay log -----\n", r->log, s);
        free(s);
}

/* ---- the systemd notify protocol, without systemd ---- */

void ts_notify_open(struct ts_notify *n) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        static unsigned counter;

        memset(n, 0, sizeof(*n));
        snprintf(n->path, sizeof(n->path), "/tmp/outbox-notify-%d-%u", (int)getpid(), counter++);
        unlink(n->path);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", n->path);
        n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (n->fd < 0 || bind(n->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                fail_msg("notify socket: %s", strerror(errno));
        n->log = calloc(1, 1);
}

void ts_notify_close(struct ts_notify *n) {
        if (n->fd >= 0)
                close(n->fd);
        unlink(n->path);
        free(n->log);
        memset(n, 0, sizeof(*n));
        n->fd = -1;
}

/* Receives one datagram (if any within ms) and appends its lines. Returns the new part. */
static char *notify_recv(struct ts_notify *n, int ms) {
        struct pollfd p = { .fd = n->fd, .events = POLLIN };
        char buf[4096];
        ssize_t r;
        size_t start;

        if (poll(&p, 1, ms) <= 0)
                return NULL;
        r = recv(n->fd, buf, sizeof(buf) - 1, 0);
        if (r <= 0)
                return NULL;
        buf[r] = 0;
        start = n->len;
        n->log = realloc(n->log, n->len + (size_t)r + 2);
        memcpy(n->log + n->len, buf, (size_t)r);
        n->len += (size_t)r;
        if (n->log[n->len - 1] != '\n')
                n->log[n->len++] = '\n';
        n->log[n->len] = 0;
        return n->log + start;
}

static bool has_line(const char *text, const char *want) {
        size_t wl = strlen(want);

        for (const char *p = text; p && *p;) {
                const char *e = strchr(p, '\n');
                size_t l = e ? (size_t)(e - p) : strlen(p);

                if (l == wl && memcmp(p, want, wl) == 0)
                        return true;
                p = e ? e + 1 : NULL;
        }
        return false;
}

bool ts_notify_wait(struct ts_notify *n, const char *want, int timeout_ms) {
        int64_t until = ts_now_ms() + timeout_ms;

        for (;;) {
                int64_t left = until - ts_now_ms();
                char *part;

                if (left <= 0)
                        return false;
                part = notify_recv(n, (int)left);
                if (part && has_line(part, want))
                        return true;
        }
}

void ts_notify_drain(struct ts_notify *n, int ms) {
        int64_t until = ts_now_ms() + ms;

        while (ts_now_ms() < until)
                notify_recv(n, (int)(until - ts_now_ms()));
}

int ts_notify_count(const struct ts_notify *n, const char *prefix) {
        int count = 0;
        size_t pl = strlen(prefix);

        for (const char *p = n->log; p && *p;) {
                const char *e = strchr(p, '\n');

                count += strncmp(p, prefix, pl) == 0;
                p = e ? e + 1 : NULL;
        }
        return count;
}

/* ---- mock-kafka ---- */

static bool mock_line(struct ts_mock *m, char *buf, size_t sz, int timeout_ms) {
        size_t len = 0;
        int64_t until = ts_now_ms() + timeout_ms;

        while (len + 1 < sz) {
                struct pollfd p = { .fd = m->out, .events = POLLIN };
                char c;

                if (ts_now_ms() > until || poll(&p, 1, 100) < 0)
                        return false;
                if (!(p.revents & (POLLIN | POLLHUP)))
                        continue;
                if (read(m->out, &c, 1) != 1)
                        return false;
                if (c == '\n')
                        break;
                buf[len++] = c;
        }
        buf[len] = 0;
        return true;
}

void ts_mock_start(struct ts_mock *m, const char *topic, int partitions) {
        ts_mock_start_n(m, topic, partitions, 1);
}

void ts_mock_start_n(struct ts_mock *m, const char *topic, int partitions, int brokers) {
        int in[2], out[2];
        char line[300], arg[200], nbrokers[16];
        const char *bin = ts_env("MOCK_KAFKA_BIN");

        memset(m, 0, sizeof(*m));
        if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0)
                fail_msg("pipe: %s", strerror(errno));
        snprintf(arg, sizeof(arg), "%s:%d", topic, partitions);
        snprintf(nbrokers, sizeof(nbrokers), "%d", brokers);
        m->pid = fork();
        if (m->pid == 0) {
                dup2(in[0], STDIN_FILENO);
                dup2(out[1], STDOUT_FILENO);
                execl(bin, bin, "--brokers", nbrokers, "--topic", arg, (char *)NULL);
                _exit(127);
        }
        close(in[0]);
        close(out[1]);
        m->in = in[1];
        m->out = out[0];
        for (size_t i = 0; i < 8; i++)
                if (mocks[i] <= 0) {
                        mocks[i] = m->pid;
                        break;
                }
        if (!mock_line(m, line, sizeof(line), 10000) || strncmp(line, "BOOTSTRAP ", 10) != 0)
                fail_msg("mock-kafka did not start (got '%s')", line);
        snprintf(m->bootstrap, sizeof(m->bootstrap), "%s", line + 10);
}

void ts_mock_cmd(struct ts_mock *m, const char *cmd) {
        char line[300];
        size_t len = strlen(cmd);

        if (write(m->in, cmd, len) != (ssize_t)len || write(m->in, "\n", 1) != 1)
                fail_msg("mock-kafka: cannot send '%s'", cmd);
        if (!mock_line(m, line, sizeof(line), 10000) || strcmp(line, "OK") != 0)
                fail_msg("mock-kafka: '%s' answered '%s'", cmd, line);
}

void ts_mock_stop(struct ts_mock *m) {
        int64_t until = ts_now_ms() + 10000;

        if (m->pid <= 0)
                return;
        close(m->in);
        close(m->out);
        kill(m->pid, SIGTERM);
        while (waitpid(m->pid, NULL, WNOHANG) == 0) {
                if (ts_now_ms() > until) {
                        kill(m->pid, SIGKILL);
                        waitpid(m->pid, NULL, 0);
                        break;
                }
                usleep(10000);
        }
        for (size_t i = 0; i < 8; i++)
                if (mocks[i] == m->pid)
                        mocks[i] = 0;
        m->pid = 0;
}

/* ---- a steady writer ---- */

struct ts_load {
        char *topic;
        int rows, per_second, keys;
        volatile int written;
        volatile int stop;
        char error[256];
        pthread_t thread;
};

static void *load_main(void *arg) {
        struct ts_load *l = arg;
        PGconn *c = PQconnectdb(ts_conninfo());
        int64_t start = ts_now_ms();

        if (PQstatus(c) != CONNECTION_OK)
                snprintf(l->error, sizeof(l->error), "%s", PQerrorMessage(c));
        while (!l->error[0] && l->written < l->rows && !l->stop) {
                char sql[600];
                PGresult *res;
                int64_t due = start + (int64_t)l->written * 1000 / l->per_second;

                if (ts_now_ms() < due)
                        usleep((useconds_t)(due - ts_now_ms()) * 1000);
                snprintf(sql, sizeof(sql),
                         "INSERT INTO outbox (topic, key, payload, headers)"
                         " SELECT '%s', 'key-' || ((%d + g) %% %d), convert_to('event ' || (%d + g), 'UTF8'),"
                         " jsonb_build_object('n', (%d + g)::text) FROM generate_series(0, 49) g",
                         l->topic, l->written, l->keys, l->written, l->written);
                res = PQexec(c, sql);
                if (PQresultStatus(res) != PGRES_COMMAND_OK)
                        snprintf(l->error, sizeof(l->error), "%s", PQresultErrorMessage(res));
                else
                        l->written += 50;
                PQclear(res);
        }
        PQfinish(c);
        return NULL;
}

struct ts_load *ts_load_start(const char *topic, int rows, int per_second, int keys) {
        struct ts_load *l = calloc(1, sizeof(*l));

        if (!l || !(l->topic = strdup(topic)))
                fail_msg("out of memory");
        l->rows = rows;
        l->per_second = per_second;
        l->keys = keys;
        if (pthread_create(&l->thread, NULL, load_main, l) != 0)
                fail_msg("pthread_create failed");
        for (size_t i = 0; i < 8; i++)
                if (!loads[i]) {
                        loads[i] = l;
                        break;
                }
        return l;
}

int ts_load_written(const struct ts_load *l) {
        return l->written;
}

void ts_load_wait(const struct ts_load *l, int rows, int timeout_ms) {
        int64_t until = ts_now_ms() + timeout_ms;

        while (l->written < rows && !l->error[0] && l->written < l->rows) {
                if (ts_now_ms() > until)
                        fail_msg("waited %d ms in vain for the writer to write %d rows (it wrote %d at %d/s)",
                                 timeout_ms, rows, l->written, l->per_second);
                usleep(20000);
        }
        if (l->error[0])
                fail_msg("the writer failed after %d rows: %s", l->written, l->error);
}

static void load_stop(struct ts_load *l) {
        l->stop = 1;
        pthread_join(l->thread, NULL);
        free(l->topic);
        free(l);
}

int ts_load_finish(struct ts_load *l) {
        char error[256];
        int written;

        pthread_join(l->thread, NULL);
        for (size_t i = 0; i < 8; i++)
                if (loads[i] == l)
                        loads[i] = NULL;
        snprintf(error, sizeof(error), "%s", l->error);
        written = l->written;
        free(l->topic);
        free(l);
        if (error[0])
                fail_msg("the writer failed: %s", error);
        return written;
}

/* ---- Kafka ---- */

static rd_kafka_conf_t *client_conf(void) {
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        char err[256];

        if (rd_kafka_conf_set(conf, "bootstrap.servers", ts_env("KAFKA_BOOTSTRAP"), err, sizeof(err)) ||
            rd_kafka_conf_set(conf, "log_level", "3", err, sizeof(err)))
                fail_msg("conf: %s", err);
        return conf;
}

static void msg_copy(struct ts_msg *d, const rd_kafka_message_t *m) {
        rd_kafka_headers_t *h = NULL;

        memset(d, 0, sizeof(*d));
        d->topic = strdup(rd_kafka_topic_name(m->rkt));
        d->partition = m->partition;
        d->offset = m->offset;
        if (m->key) {
                d->key = malloc(m->key_len + 1);
                memcpy(d->key, m->key, m->key_len);
                d->key[m->key_len] = 0;
                d->key_len = m->key_len;
        }
        if (m->payload) {
                d->value = malloc(m->len + 1);
                memcpy(d->value, m->payload, m->len);
                d->value[m->len] = 0;
                d->value_len = m->len;
        }
        d->timestamp = rd_kafka_message_timestamp(m, &d->tstype);
        d->outbox_id = -1;
        if (rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                size_t cnt = rd_kafka_header_cnt(h);
                const char *name;
                const void *val;
                size_t sz;

                d->headers = calloc(cnt ? cnt : 1, sizeof(*d->headers));
                for (size_t i = 0; rd_kafka_header_get_all(h, i, &name, &val, &sz) == 0; i++) {
                        struct ts_header *th = &d->headers[d->n_headers++];

                        th->name = strdup(name);
                        th->value = malloc(sz + 1);
                        if (val)
                                memcpy(th->value, val, sz);
                        th->value[sz] = 0;
                        th->value_len = sz;
                        if (strcmp(name, "outbox-id") == 0)
                                d->outbox_id = strtoll(th->value, NULL, 10);
                }
        }
}

void ts_consume(const char *const *topics, size_t expect, int timeout_ms, int settle_ms,
                struct ts_msgs *out) {
        ts_consume_from(ts_env("KAFKA_BOOTSTRAP"), topics, expect, timeout_ms, settle_ms, out);
}

void ts_consume_from(const char *bootstrap, const char *const *topics, size_t expect, int timeout_ms,
                     int settle_ms, struct ts_msgs *out) {
        rd_kafka_conf_t *conf = client_conf();
        rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(16);
        char err[256], group[64];
        rd_kafka_t *rk;
        size_t cap = expect + 16;
        int64_t start = ts_now_ms(), last = start;

        memset(out, 0, sizeof(*out));
        out->v = calloc(cap, sizeof(*out->v));
        snprintf(group, sizeof(group), "outbox-test-%d", (int)getpid());
        rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, err, sizeof(err));
        rd_kafka_conf_set(conf, "group.id", group, err, sizeof(err));
        rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof(err));
        rd_kafka_conf_set(conf, "fetch.wait.max.ms", "50", err, sizeof(err));
        rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
        if (!rk)
                fail_msg("consumer: %s", err);
        rd_kafka_poll_set_consumer(rk);
        for (const char *const *t = topics; *t; t++) {
                const struct rd_kafka_metadata *md = NULL;
                rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, *t, NULL);
                int parts_n = 0;

                /* The topic exists once the relay produced to it; wait for its metadata. */
                while (ts_now_ms() - start < timeout_ms) {
                        if (rd_kafka_metadata(rk, 0, rkt, &md, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
                            md->topic_cnt == 1 && md->topics[0].err == 0 && md->topics[0].partition_cnt > 0) {
                                parts_n = md->topics[0].partition_cnt;
                                rd_kafka_metadata_destroy(md);
                                break;
                        }
                        if (md)
                                rd_kafka_metadata_destroy(md);
                        md = NULL;
                        usleep(200000);
                }
                rd_kafka_topic_destroy(rkt);
                for (int p = 0; p < parts_n; p++)
                        rd_kafka_topic_partition_list_add(parts, *t, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
        }
        if (rd_kafka_assign(rk, parts))
                fail_msg("assign failed");
        for (;;) {
                int64_t now = ts_now_ms();
                rd_kafka_message_t *m;

                if (now - start > timeout_ms)
                        break;
                if (out->n >= expect && now - last > settle_ms)
                        break;
                m = rd_kafka_consumer_poll(rk, 100);
                if (!m)
                        continue;
                if (m->err) {
                        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                                fprintf(stderr, "consumer: %s\n", rd_kafka_message_errstr(m));
                        rd_kafka_message_destroy(m);
                        continue;
                }
                if (out->n == cap) {
                        cap *= 2;
                        out->v = realloc(out->v, cap * sizeof(*out->v));
                }
                msg_copy(&out->v[out->n++], m);
                last = ts_now_ms();
                rd_kafka_message_destroy(m);
        }
        rd_kafka_topic_partition_list_destroy(parts);
        rd_kafka_consumer_close(rk);
        rd_kafka_destroy(rk);
}

void ts_msgs_free(struct ts_msgs *m) {
        for (size_t i = 0; i < m->n; i++) {
                struct ts_msg *x = &m->v[i];

                free(x->topic);
                free(x->key);
                free(x->value);
                for (size_t j = 0; j < x->n_headers; j++) {
                        free(x->headers[j].name);
                        free(x->headers[j].value);
                }
                free(x->headers);
        }
        free(m->v);
        memset(m, 0, sizeof(*m));
}

static void on_dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
        (void)rk;
        (void)opaque;
        *(rd_kafka_resp_err_t *)m->_private = m->err;
}

rd_kafka_resp_err_t ts_produce(const char *topic, const char *key, const void *value, size_t len) {
        rd_kafka_conf_t *conf = client_conf();
        rd_kafka_resp_err_t result = RD_KAFKA_RESP_ERR__IN_PROGRESS, e;
        char err[256];
        rd_kafka_t *rk;

        rd_kafka_conf_set_dr_msg_cb(conf, on_dr);
        rd_kafka_conf_set(conf, "enable.idempotence", "true", err, sizeof(err));
        rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
        if (!rk)
                fail_msg("producer: %s", err);
        e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, key ? strlen(key) : 0),
                              RD_KAFKA_V_VALUE((void *)value, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_OPAQUE(&result), RD_KAFKA_V_END);
        if (e)
                result = e;
        else
                rd_kafka_flush(rk, 30000);
        rd_kafka_destroy(rk);
        return result;
}

/* ---- verification ---- */

/* One header as the writer wrote it: a name and a string value (NULL: the JSON value was null). */
struct expect_header {
        char *name;
        char *value;
        size_t len;
};

struct expect_row {
        int64_t id;
        char *topic;
        char *key;
        size_t key_len;
        unsigned char *payload;
        size_t payload_len;
        int64_t ts; /* created_at in ms since the epoch, truncated */
        bool dead;
        struct expect_header *headers; /* sorted by name */
        size_t n_headers;
        bool seen;
};

static int cmp_id(const void *a, const void *b) {
        int64_t x = ((const struct expect_row *)a)->id, y = ((const struct expect_row *)b)->id;
        return (x > y) - (x < y);
}

static struct expect_row *find_row(struct expect_row *rows, size_t n, int64_t id) {
        struct expect_row key = { .id = id };
        return bsearch(&key, rows, n, sizeof(*rows), cmp_id);
}

static int cmp_expect_header(const void *a, const void *b) {
        return strcmp(((const struct expect_header *)a)->name, ((const struct expect_header *)b)->name);
}

static int cmp_msg_header(const void *a, const void *b) {
        return strcmp((*(const struct ts_header *const *)a)->name,
                      (*(const struct ts_header *const *)b)->name);
}

/* "YYYY-MM-DD HH:MM:SS.UUUUUU" in UTC -> ms since the epoch, truncated (Kafka's CreateTime is in
 * ms; a timestamp is never rounded up into the next millisecond). -1 when it does not parse. */
static int64_t utc_text_ms(const char *s) {
        struct tm tm = { 0 };
        int us = 0, used = 0;

        if (sscanf(s, "%d-%d-%d %d:%d:%d.%6d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                   &tm.tm_min, &tm.tm_sec, &us, &used) != 7 ||
            s[used] != 0)
                return -1;
        tm.tm_year -= 1900;
        tm.tm_mon -= 1;
        return (int64_t)timegm(&tm) * 1000 + us / 1000;
}

/* Compares the message's headers with the row's: exactly one outbox-id with the row's id, and
 * otherwise the row's headers, each once, byte for byte (names and values may hold anything,
 * so they are compared as pairs, never as text joined with separators). Returns NULL or what
 * differs, written into why. */
static const char *headers_differ(const struct ts_msg *m, const struct expect_row *r, const char *source,
                                  char *why, size_t whysz) {
        const struct ts_header **mine = calloc(m->n_headers + 1, sizeof(*mine));
        char id[32];
        size_t n = 0, id_headers = 0, source_headers = 0;
        const char *res = NULL;

        snprintf(id, sizeof(id), "%" PRId64, r->id);
        for (size_t i = 0; i < m->n_headers; i++) {
                if (strcmp(m->headers[i].name, "outbox-id") == 0) {
                        id_headers++;
                        if (strcmp(m->headers[i].value, id) != 0) {
                                snprintf(why, whysz, "outbox-id '%s'", m->headers[i].value);
                                res = why;
                        }
                        continue;
                }
                if (strcmp(m->headers[i].name, "outbox-source") == 0) {
                        source_headers++;
                        if (!res && strcmp(m->headers[i].value, source) != 0) {
                                snprintf(why, whysz, "outbox-source '%s', want '%s'", m->headers[i].value,
                                         source);
                                res = why;
                        }
                        continue;
                }
                mine[n++] = &m->headers[i];
        }
        qsort(mine, n, sizeof(*mine), cmp_msg_header);
        if (!res && id_headers != 1) {
                snprintf(why, whysz, "%zu outbox-id headers", id_headers);
                res = why;
        } else if (!res && source_headers != 1) {
                snprintf(why, whysz, "%zu outbox-source headers", source_headers);
                res = why;
        } else if (!res && n != r->n_headers) {
                snprintf(why, whysz, "%zu headers besides outbox-id and outbox-source, want %zu", n,
                         r->n_headers);
                res = why;
        } else if (!res) {
                for (size_t i = 0; i < n && !res; i++) {
                        const struct expect_header *e = &r->headers[i];

                        if (strcmp(mine[i]->name, e->name) != 0 || !e->value ||
                            mine[i]->value_len != e->len || memcmp(mine[i]->value, e->value, e->len) != 0) {
                                snprintf(why, whysz, "header '%s'='%s', want '%s'='%s'", mine[i]->name,
                                         mine[i]->value, e->name, e->value ? e->value : "(JSON null)");
                                res = why;
                        }
                }
        }
        free(mine);
        return res;
}

struct msg_ref {
        const struct ts_msg *m;
};

static int cmp_key_offset(const void *a, const void *b) {
        const struct ts_msg *x = ((const struct msg_ref *)a)->m, *y = ((const struct msg_ref *)b)->m;
        int c = strcmp(x->topic, y->topic);

        if (c)
                return c;
        if (!x->key || !y->key)
                return (x->key != NULL) - (y->key != NULL);
        if (x->key_len != y->key_len)
                return x->key_len < y->key_len ? -1 : 1;
        c = memcmp(x->key, y->key, x->key_len);
        if (c)
                return c;
        if (x->partition != y->partition)
                return x->partition < y->partition ? -1 : 1;
        return (x->offset > y->offset) - (x->offset < y->offset);
}

static bool same_key(const struct ts_msg *x, const struct ts_msg *y) {
        return x->key && y->key && x->key_len == y->key_len && memcmp(x->key, y->key, x->key_len) == 0 &&
                strcmp(x->topic, y->topic) == 0;
}

static char *topics_array(const char *const *topics) {
        size_t len = 3;
        char *s;

        for (const char *const *t = topics; *t; t++)
                len += strlen(*t) + 3;
        s = calloc(1, len);
        strcat(s, "{");
        for (const char *const *t = topics; *t; t++) {
                if (t != topics)
                        strcat(s, ",");
                strcat(s, "\"");
                strcat(s, *t);
                strcat(s, "\"");
        }
        strcat(s, "}");
        return s;
}

static const char *ts_source;

void ts_verify_source(const char *source) {
        ts_source = source;
}

void ts_verify(PGconn *c, const char *const *topics, const struct ts_msgs *m, bool exclude_dead,
               struct ts_verify *out) {
        char *arr = topics_array(topics);
        const char *params[1] = { arr };
        PGresult *res;
        struct expect_row *rows;
        size_t n, shown = 0;
        struct msg_ref *refs;
        char source[256];

        memset(out, 0, sizeof(*out));
        /* The outbox-source every message carries: derived from the database and the table, as
         * the relays these tests start do not set relay.source (unless ts_verify_source says). */
        if (ts_source)
                snprintf(source, sizeof(source), "%s", ts_source);
        else {
                res = PQexec(
                        c,
                        "SELECT quote_ident(current_database()) || '/' || quote_ident(n.nspname) || '.' || "
                        "quote_ident(r.relname) FROM pg_class r"
                        " JOIN pg_namespace n ON n.oid = r.relnamespace WHERE r.oid = 'outbox'::regclass");
                if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
                        fail_msg("verify source query: %s", PQresultErrorMessage(res));
                snprintf(source, sizeof(source), "%s", PQgetvalue(res, 0, 0));
                PQclear(res);
        }
        /* What was written, as written: created_at as UTC text (converted to ms here, not by
         * the expression the relay uses), the headers jsonb parsed by PostgreSQL below. */
        res = PQexecParams(c,
                           "SELECT c.id, c.topic, c.key, c.payload,"
                           " to_char(c.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'),"
                           " (o.dead_at IS NOT NULL)"
                           " FROM outbox_test_copy c LEFT JOIN outbox o ON o.id = c.id"
                           " WHERE c.topic = ANY($1::text[]) ORDER BY c.id",
                           1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_TUPLES_OK)
                fail_msg("verify query: %s", PQresultErrorMessage(res));
        n = (size_t)PQntuples(res);
        rows = calloc(n + 1, sizeof(*rows));
        for (size_t i = 0; i < n; i++) {
                struct expect_row *r = &rows[i];

                r->id = strtoll(PQgetvalue(res, (int)i, 0), NULL, 10);
                r->topic = strdup(PQgetvalue(res, (int)i, 1));
                if (!PQgetisnull(res, (int)i, 2)) {
                        r->key = strdup(PQgetvalue(res, (int)i, 2));
                        r->key_len = (size_t)PQgetlength(res, (int)i, 2);
                }
                if (!PQgetisnull(res, (int)i, 3))
                        r->payload = PQunescapeBytea((const unsigned char *)PQgetvalue(res, (int)i, 3),
                                                     &r->payload_len);
                r->ts = utc_text_ms(PQgetvalue(res, (int)i, 4));
                if (r->ts < 0)
                        fail_msg("verify: row %" PRId64 ": created_at '%s' does not parse", r->id,
                                 PQgetvalue(res, (int)i, 4));
                r->dead = PQgetvalue(res, (int)i, 5)[0] == 't';
                if (!(exclude_dead && r->dead))
                        out->expected++;
        }
        PQclear(res);
        /* The headers: one (id, name, value) per pair of each object (not objects: none). */
        res = PQexecParams(
                c,
                "SELECT c.id, h.key, h.value FROM outbox_test_copy c,"
                " jsonb_each_text(CASE WHEN jsonb_typeof(c.headers) = 'object' THEN c.headers END) h"
                " WHERE c.topic = ANY($1::text[]) ORDER BY c.id",
                1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_TUPLES_OK)
                fail_msg("verify headers query: %s", PQresultErrorMessage(res));
        for (int i = 0, end; i < PQntuples(res); i = end) {
                struct expect_row *r = find_row(rows, n, strtoll(PQgetvalue(res, i, 0), NULL, 10));

                for (end = i;
                     end < PQntuples(res) && strcmp(PQgetvalue(res, end, 0), PQgetvalue(res, i, 0)) == 0;)
                        end++;
                if (!r)
                        continue; /* written between the two queries */
                r->headers = calloc((size_t)(end - i), sizeof(*r->headers));
                for (int j = i; j < end; j++) {
                        struct expect_header *h = &r->headers[r->n_headers++];

                        h->name = strdup(PQgetvalue(res, j, 1));
                        if (!PQgetisnull(res, j, 2)) {
                                h->value = strdup(PQgetvalue(res, j, 2));
                                h->len = (size_t)PQgetlength(res, j, 2);
                        }
                }
                qsort(r->headers, r->n_headers, sizeof(*r->headers), cmp_expect_header);
        }
        PQclear(res);
        free(arr);

        out->consumed = m->n;
        for (size_t i = 0; i < m->n; i++) {
                const struct ts_msg *msg = &m->v[i];
                struct expect_row *r = find_row(rows, n, msg->outbox_id);
                const char *why = NULL;
                char hdr_why[600];

                if (!r) {
                        out->unexpected++;
                        if (shown++ < 5)
                                fprintf(stderr,
                                        "verify: message %s/%d@%" PRId64 " has unknown outbox-id %" PRId64
                                        "\n",
                                        msg->topic, msg->partition, msg->offset, msg->outbox_id);
                        continue;
                }
                if (r->seen)
                        out->duplicates++;
                r->seen = true;
                if (strcmp(msg->topic, r->topic) != 0)
                        why = "topic";
                else if ((msg->key == NULL) != (r->key == NULL) ||
                         (r->key && (msg->key_len != r->key_len || memcmp(msg->key, r->key, r->key_len))))
                        why = "key";
                else if ((msg->value == NULL) != (r->payload == NULL) ||
                         (r->payload &&
                          (msg->value_len != r->payload_len ||
                           memcmp(msg->value, r->payload, r->payload_len))))
                        why = "payload";
                else if (msg->timestamp != r->ts || msg->tstype != RD_KAFKA_TIMESTAMP_CREATE_TIME)
                        why = "timestamp";
                else
                        why = headers_differ(msg, r, source, hdr_why, sizeof(hdr_why));
                if (why) {
                        out->mismatched++;
                        if (shown++ < 5)
                                fprintf(stderr,
                                        "verify: row %" PRId64 ": %s differs (timestamp %" PRId64
                                        " type %d, want %" PRId64 " CreateTime)\n",
                                        r->id, why, msg->timestamp, (int)msg->tstype, r->ts);
                }
        }
        for (size_t i = 0; i < n; i++)
                if (!rows[i].seen && !(exclude_dead && rows[i].dead)) {
                        out->missing++;
                        if (shown++ < 5)
                                fprintf(stderr, "verify: row %" PRId64 " (topic %s) never arrived\n",
                                        rows[i].id, rows[i].topic);
                }

        /* Per-key order: within a key (one partition), the first delivery of each id must come
         * in id order. */
        refs = calloc(m->n + 1, sizeof(*refs));
        for (size_t i = 0; i < m->n; i++)
                refs[i].m = &m->v[i];
        qsort(refs, m->n, sizeof(*refs), cmp_key_offset);
        int64_t last = -1;

        for (size_t i = 0, start = 0; i < m->n; i++) {
                const struct ts_msg *x = refs[i].m;

                if (!x->key)
                        continue;
                if (i == 0 || !same_key(refs[i - 1].m, x)) {
                        start = i;
                        last = -1;
                }
                if (x->outbox_id > last) {
                        last = x->outbox_id;
                        continue;
                }
                /* An older id again is a duplicate when it was delivered before, otherwise it
                 * overtook a later one: an order violation. */
                bool seen_before = false;
                for (size_t k = start; k < i; k++)
                        seen_before |= refs[k].m->outbox_id == x->outbox_id;
                if (!seen_before) {
                        out->order_violations++;
                        if (shown++ < 5)
                                fprintf(stderr,
                                        "verify: key '%s': id %" PRId64 " delivered after %" PRId64 "\n",
                                        x->key, x->outbox_id, last);
                }
        }
        free(refs);
        for (size_t i = 0; i < n; i++) {
                free(rows[i].topic);
                free(rows[i].key);
                PQfreemem(rows[i].payload);
                for (size_t j = 0; j < rows[i].n_headers; j++) {
                        free(rows[i].headers[j].name);
                        free(rows[i].headers[j].value);
                }
                free(rows[i].headers);
        }
        free(rows);
        fprintf(stderr,
                "verify: expected %zu, consumed %zu, missing %zu, duplicates %zu, mismatched %zu, "
                "order violations %zu, unexpected %zu\n",
                out->expected, out->consumed, out->missing, out->duplicates, out->mismatched,
                out->order_violations, out->unexpected);
}

bool ts_wait_drained(PGconn *c, const char *const *topics, int timeout_ms) {
        int64_t until = ts_now_ms() + timeout_ms;
        char *arr = topics_array(topics);
        bool ok = false;

        for (;;) {
                const char *params[1] = { arr };
                PGresult *res = PQexecParams(c,
                                             "SELECT count(*) FROM outbox WHERE topic = ANY($1::text[])"
                                             " AND published_at IS NULL AND dead_at IS NULL",
                                             1, NULL, params, NULL, NULL, 0);
                long left = PQresultStatus(res) == PGRES_TUPLES_OK ? atol(PQgetvalue(res, 0, 0)) : -1;

                PQclear(res);
                if (left == 0) {
                        ok = true;
                        break;
                }
                if (ts_now_ms() > until) {
                        fprintf(stderr, "ts_wait_drained: %ld rows of %s still pending after %d ms\n", left,
                                arr, timeout_ms);
                        /* what the oldest of them says, for the failure's reader */
                        res = PQexecParams(c,
                                           "SELECT id, attempts, coalesce(last_error, '(none)') FROM outbox"
                                           " WHERE topic = ANY($1::text[]) AND published_at IS NULL"
                                           " AND dead_at IS NULL ORDER BY id LIMIT 1",
                                           1, NULL, params, NULL, NULL, 0);
                        if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
                                fprintf(stderr,
                                        "ts_wait_drained: oldest pending id %s, attempts %s, last error %s\n",
                                        PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1), PQgetvalue(res, 0, 2));
                        PQclear(res);
                        break;
                }
                usleep(50000);
        }
        free(arr);
        return ok;
}

/* ---- Kafka administration ---- */

static rd_kafka_t *admin_client(void) {
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        char err[512];
        rd_kafka_t *rk;

        if (rd_kafka_conf_set(conf, "bootstrap.servers", ts_env("KAFKA_BOOTSTRAP"), err, sizeof(err)) ||
            rd_kafka_conf_set(conf, "log_level", "3", err, sizeof(err)))
                fail_msg("admin conf: %s", err);
        rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
        if (!rk)
                fail_msg("admin client: %s", err);
        return rk;
}

/* Waits for the one result of an admin request on q; fails the test on a request error. */
static rd_kafka_event_t *admin_result(rd_kafka_queue_t *q, const char *what) {
        rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);

        if (!ev)
                fail_msg("%s: no result within 30 s", what);
        if (rd_kafka_event_error(ev))
                fail_msg("%s: %s", what, rd_kafka_event_error_string(ev));
        return ev;
}

void ts_create_topic(const char *topic, int partitions, const char *name, const char *value) {
        rd_kafka_t *rk = admin_client();
        rd_kafka_AdminOptions_t *opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
        rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
        const rd_kafka_topic_result_t **tr;
        rd_kafka_NewTopic_t *nt;
        rd_kafka_event_t *ev;
        size_t n = 0;
        char err[512];

        nt = rd_kafka_NewTopic_new(topic, partitions, 1, err, sizeof(err));
        if (!nt)
                fail_msg("NewTopic: %s", err);
        if (name && rd_kafka_NewTopic_set_config(nt, name, value))
                fail_msg("NewTopic_set_config %s=%s failed", name, value);
        rd_kafka_AdminOptions_set_operation_timeout(opts, 15000, err, sizeof(err));
        rd_kafka_CreateTopics(rk, &nt, 1, opts, q);
        ev = admin_result(q, "CreateTopics");
        tr = rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
        if (n != 1 || rd_kafka_topic_result_error(tr[0]))
                fail_msg("CreateTopics %s: %s", topic,
                         n == 1 ? rd_kafka_topic_result_error_string(tr[0]) : "no topic result");
        rd_kafka_event_destroy(ev);
        rd_kafka_queue_destroy(q);
        rd_kafka_AdminOptions_destroy(opts);
        rd_kafka_NewTopic_destroy(nt);
        rd_kafka_destroy(rk);
}

void ts_alter_topic(const char *topic, const char *name, const char *value) {
        rd_kafka_t *rk = admin_client();
        rd_kafka_AdminOptions_t *opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_ALTERCONFIGS);
        rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
        rd_kafka_ConfigResource_t *cr = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic);
        const rd_kafka_ConfigResource_t **rr;
        rd_kafka_event_t *ev;
        size_t n = 0;
        char err[512];

        if (rd_kafka_ConfigResource_set_config(cr, name, value))
                fail_msg("ConfigResource_set_config %s=%s failed", name, value);
        rd_kafka_AdminOptions_set_request_timeout(opts, 15000, err, sizeof(err));
        rd_kafka_AlterConfigs(rk, &cr, 1, opts, q);
        ev = admin_result(q, "AlterConfigs");
        rr = rd_kafka_AlterConfigs_result_resources(rd_kafka_event_AlterConfigs_result(ev), &n);
        if (n != 1 || rd_kafka_ConfigResource_error(rr[0]))
                fail_msg("AlterConfigs %s %s=%s: %s", topic, name, value,
                         n == 1 ? rd_kafka_ConfigResource_error_string(rr[0]) : "no resource result");
        rd_kafka_event_destroy(ev);
        rd_kafka_queue_destroy(q);
        rd_kafka_AdminOptions_destroy(opts);
        rd_kafka_ConfigResource_destroy(cr);
        rd_kafka_destroy(rk);
}

void ts_verify_assert(const struct ts_verify *v, size_t expected, size_t max_dup) {
        assert_int_equal(v->expected, expected);
        assert_int_equal(v->missing, 0);
        assert_int_equal(v->mismatched, 0);
        assert_int_equal(v->unexpected, 0);
        assert_int_equal(v->order_violations, 0);
        assert_true(v->duplicates <= max_dup);
}

uint64_t ts_rand(uint64_t *state) {
        uint64_t x = *state ? *state : 1;

        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        *state = x;
        return x * 2685821657736338717ULL;
}

int64_t ts_topic_messages(const char *topic) {
        rd_kafka_t *rk = admin_client();
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
        const struct rd_kafka_metadata *md = NULL;
        int64_t total = 0;

        if (rd_kafka_metadata(rk, 0, rkt, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR || md->topic_cnt != 1 ||
            md->topics[0].err)
                fail_msg("metadata of topic '%s' not had", topic);
        for (int p = 0; p < md->topics[0].partition_cnt; p++) {
                int64_t lo = 0, hi = 0;

                if (rd_kafka_query_watermark_offsets(rk, topic, md->topics[0].partitions[p].id, &lo, &hi,
                                                     10000))
                        fail_msg("watermarks of '%s' [%d] not had", topic, md->topics[0].partitions[p].id);
                total += hi - lo;
        }
        rd_kafka_metadata_destroy(md);
        rd_kafka_topic_destroy(rkt);
        rd_kafka_destroy(rk);
        return total;
}
