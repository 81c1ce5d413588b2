/* mock-kafka.c -- librdkafka mock cluster driven by line commands on stdin, for fault-injection tests. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h> /* must follow rdkafka.h */

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))

#define LINE_MAX_LEN 4096
#define MAX_ARGS 64
#define MAX_TOPICS 64
#define POLL_MS 200

/* Set by SIGTERM/SIGINT; the command loop polls stdin with a timeout so it is noticed promptly. */
static volatile sig_atomic_t stop_requested;

struct topic_spec {
        const char *name;
        int partitions;
};

struct mock {
        rd_kafka_t *rk;
        rd_kafka_mock_cluster_t *mc;
        int broker_cnt;
        bool quit;
};

/* Kafka protocol ApiKey numbers; the public headers carry no enum for them. */
static const struct {
        const char *name;
        int16_t key;
} api_keys[] = {
        { "Produce", 0 },
        { "Fetch", 1 },
        { "ListOffsets", 2 },
        { "Metadata", 3 },
        { "LeaderAndIsr", 4 },
        { "StopReplica", 5 },
        { "UpdateMetadata", 6 },
        { "ControlledShutdown", 7 },
        { "OffsetCommit", 8 },
        { "OffsetFetch", 9 },
        { "FindCoordinator", 10 },
        { "JoinGroup", 11 },
        { "Heartbeat", 12 },
        { "LeaveGroup", 13 },
        { "SyncGroup", 14 },
        { "DescribeGroups", 15 },
        { "ListGroups", 16 },
        { "SaslHandshake", 17 },
        { "ApiVersions", 18 },
        { "CreateTopics", 19 },
        { "DeleteTopics", 20 },
        { "DeleteRecords", 21 },
        { "InitProducerId", 22 },
        { "OffsetForLeaderEpoch", 23 },
        { "AddPartitionsToTxn", 24 },
        { "AddOffsetsToTxn", 25 },
        { "EndTxn", 26 },
        { "WriteTxnMarkers", 27 },
        { "TxnOffsetCommit", 28 },
        { "DescribeAcls", 29 },
        { "CreateAcls", 30 },
        { "DeleteAcls", 31 },
        { "DescribeConfigs", 32 },
        { "AlterConfigs", 33 },
        { "SaslAuthenticate", 36 },
        { "CreatePartitions", 37 },
        { "DeleteGroups", 42 },
        { "IncrementalAlterConfigs", 44 },
        { "OffsetDelete", 47 },
};

/* Names that rd_kafka_get_err_descs() does not list: newer Kafka spellings of old codes. */
static const struct {
        const char *name;
        rd_kafka_resp_err_t err;
} err_aliases[] = {
        { "NOT_LEADER_OR_FOLLOWER", RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION },
        { "COORDINATOR_LOAD_IN_PROGRESS", RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS },
        { "GROUP_LOAD_IN_PROGRESS", RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS },
        { "GROUP_COORDINATOR_NOT_AVAILABLE", RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE },
        { "NOT_COORDINATOR_FOR_GROUP", RD_KAFKA_RESP_ERR_NOT_COORDINATOR },
        { "NO_ERROR", RD_KAFKA_RESP_ERR_NO_ERROR },
};

static void on_signal(int sig) {
        (void)sig;
        stop_requested = 1;
}

static bool parse_long(const char *s, long min, long max, long *out) {
        char *end;

        if (!s || !*s)
                return false;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno != 0 || *end != '\0' || v < min || v > max)
                return false;
        *out = v;
        return true;
}

static bool parse_int(const char *s, int min, int max, int *out) {
        long v;

        if (!parse_long(s, min, max, &v))
                return false;
        *out = (int)v;
        return true;
}

static bool parse_api_key(const char *s, int16_t *out) {
        int v;

        if (parse_int(s, 0, INT16_MAX, &v)) {
                *out = (int16_t)v;
                return true;
        }
        for (size_t i = 0; i < ELEMENTSOF(api_keys); i++)
                if (strcasecmp(s, api_keys[i].name) == 0) {
                        *out = api_keys[i].key;
                        return true;
                }
        return false;
}

/* Accepts a number, or a name as rd_kafka_get_err_descs() spells it ("_TRANSPORT",
 * "NOT_ENOUGH_REPLICAS"), with or without the RD_KAFKA_RESP_ERR_ prefix. */
static bool parse_err(const char *s, rd_kafka_resp_err_t *out) {
        static const char prefix[] = "RD_KAFKA_RESP_ERR_";
        const struct rd_kafka_err_desc *descs;
        size_t cnt;
        int v;

        if (parse_int(s, INT_MIN, INT_MAX, &v)) {
                *out = (rd_kafka_resp_err_t)v;
                return true;
        }
        if (strncasecmp(s, prefix, sizeof(prefix) - 1) == 0)
                s += sizeof(prefix) - 1;
        rd_kafka_get_err_descs(&descs, &cnt);
        for (size_t i = 0; i < cnt; i++)
                if (descs[i].name && strcasecmp(s, descs[i].name) == 0) {
                        *out = descs[i].code;
                        return true;
                }
        for (size_t i = 0; i < ELEMENTSOF(err_aliases); i++)
                if (strcasecmp(s, err_aliases[i].name) == 0) {
                        *out = err_aliases[i].err;
                        return true;
                }
        return false;
}

static void reply_ok(void) {
        fputs("OK\n", stdout);
        fflush(stdout);
}

static void reply_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void reply_err(const char *fmt, ...) {
        va_list ap;

        fputs("ERR ", stdout);
        va_start(ap, fmt);
        vfprintf(stdout, fmt, ap);
        va_end(ap);
        fputc('\n', stdout);
        fflush(stdout);
}

static void reply_kafka(rd_kafka_resp_err_t err) {
        if (err)
                reply_err("%s (%s)", rd_kafka_err2name(err), rd_kafka_err2str(err));
        else
                reply_ok();
}

static bool want_args(const char *cmd, int argc, int min, int max, const char *usage) {
        if (argc - 1 >= min && (max < 0 || argc - 1 <= max))
                return true;
        reply_err("usage: %s %s", cmd, usage);
        return false;
}

static int replication_factor(const struct mock *m) {
        return m->broker_cnt < 3 ? m->broker_cnt : 3;
}

static void cmd_broker_state(struct mock *m, int argc, char **argv) {
        int id;

        if (!want_args(argv[0], argc, 1, 1, "ID"))
                return;
        if (!parse_int(argv[1], -1, INT32_MAX, &id)) {
                reply_err("bad broker id '%s'", argv[1]);
                return;
        }
        if (strcmp(argv[0], "broker-down") == 0)
                reply_kafka(rd_kafka_mock_broker_set_down(m->mc, id));
        else
                reply_kafka(rd_kafka_mock_broker_set_up(m->mc, id));
}

static void cmd_rtt(struct mock *m, int argc, char **argv) {
        int id, ms;

        if (!want_args(argv[0], argc, 2, 2, "ID MS"))
                return;
        if (!parse_int(argv[1], -1, INT32_MAX, &id)) {
                reply_err("bad broker id '%s'", argv[1]);
                return;
        }
        if (!parse_int(argv[2], 0, INT_MAX, &ms)) {
                reply_err("bad rtt '%s'", argv[2]);
                return;
        }
        reply_kafka(rd_kafka_mock_broker_set_rtt(m->mc, id, ms));
}

static void cmd_errors(struct mock *m, int argc, char **argv) {
        rd_kafka_resp_err_t errs[MAX_ARGS];
        int16_t key;

        if (!want_args(argv[0], argc, 2, -1, "APIKEY ERR [ERR...]"))
                return;
        if (!parse_api_key(argv[1], &key)) {
                reply_err("unknown api key '%s'", argv[1]);
                return;
        }
        for (int i = 2; i < argc; i++)
                if (!parse_err(argv[i], &errs[i - 2])) {
                        reply_err("unknown error '%s'", argv[i]);
                        return;
                }
        rd_kafka_mock_push_request_errors_array(m->mc, key, (size_t)(argc - 2), errs);
        reply_ok();
}

static void cmd_broker_errors(struct mock *m, int argc, char **argv) {
        rd_kafka_resp_err_t errs[MAX_ARGS / 2];
        int rtts[MAX_ARGS / 2];
        int16_t key;
        int id, n;

        if (!want_args(argv[0], argc, 4, -1, "ID APIKEY ERR RTT_MS [ERR RTT_MS...]"))
                return;
        if ((argc - 3) % 2 != 0) {
                reply_err("usage: %s ID APIKEY ERR RTT_MS [ERR RTT_MS...]", argv[0]);
                return;
        }
        if (!parse_int(argv[1], 0, INT32_MAX, &id)) {
                reply_err("bad broker id '%s'", argv[1]);
                return;
        }
        if (!parse_api_key(argv[2], &key)) {
                reply_err("unknown api key '%s'", argv[2]);
                return;
        }
        n = (argc - 3) / 2;
        /* Validate every pair before pushing any, so a typo leaves the stack untouched. */
        for (int i = 0; i < n; i++) {
                if (!parse_err(argv[3 + 2 * i], &errs[i])) {
                        reply_err("unknown error '%s'", argv[3 + 2 * i]);
                        return;
                }
                if (!parse_int(argv[4 + 2 * i], 0, INT_MAX, &rtts[i])) {
                        reply_err("bad rtt '%s'", argv[4 + 2 * i]);
                        return;
                }
        }
        /* The call is variadic; one pair per call keeps the order (the stack is FIFO). */
        for (int i = 0; i < n; i++) {
                rd_kafka_resp_err_t err =
                        rd_kafka_mock_broker_push_request_error_rtts(m->mc, id, key, 1, errs[i], rtts[i]);
                if (err) {
                        reply_kafka(err);
                        return;
                }
        }
        reply_ok();
}

static void cmd_clear_errors(struct mock *m, int argc, char **argv) {
        int16_t key;

        if (!want_args(argv[0], argc, 1, 1, "APIKEY"))
                return;
        if (!parse_api_key(argv[1], &key)) {
                reply_err("unknown api key '%s'", argv[1]);
                return;
        }
        rd_kafka_mock_clear_request_errors(m->mc, key);
        reply_ok();
}

static void cmd_topic_create(struct mock *m, int argc, char **argv) {
        int parts, rf = replication_factor(m);

        if (!want_args(argv[0], argc, 2, 3, "NAME PARTITIONS [REPLICATION_FACTOR]"))
                return;
        if (!parse_int(argv[2], 1, 100000, &parts)) {
                reply_err("bad partition count '%s'", argv[2]);
                return;
        }
        if (argc > 3 && !parse_int(argv[3], 1, m->broker_cnt, &rf)) {
                reply_err("bad replication factor '%s' (1..%d)", argv[3], m->broker_cnt);
                return;
        }
        reply_kafka(rd_kafka_mock_topic_create(m->mc, argv[1], parts, rf));
}

static void cmd_topic_error(struct mock *m, int argc, char **argv) {
        rd_kafka_resp_err_t err;

        if (!want_args(argv[0], argc, 2, 2, "NAME ERR"))
                return;
        if (!parse_err(argv[2], &err)) {
                reply_err("unknown error '%s'", argv[2]);
                return;
        }
        rd_kafka_mock_topic_set_error(m->mc, argv[1], err);
        reply_ok();
}

static void cmd_leader(struct mock *m, int argc, char **argv) {
        int part, id;

        if (!want_args(argv[0], argc, 3, 3, "TOPIC PARTITION BROKER"))
                return;
        if (!parse_int(argv[2], 0, INT32_MAX, &part)) {
                reply_err("bad partition '%s'", argv[2]);
                return;
        }
        if (!parse_int(argv[3], -1, INT32_MAX, &id)) {
                reply_err("bad broker id '%s'", argv[3]);
                return;
        }
        reply_kafka(rd_kafka_mock_partition_set_leader(m->mc, argv[1], part, id));
}

static void cmd_ping(struct mock *m, int argc, char **argv) {
        (void)m;
        (void)argc;
        (void)argv;
        reply_ok();
}

static void cmd_quit(struct mock *m, int argc, char **argv) {
        (void)argc;
        (void)argv;
        m->quit = true;
        reply_ok();
}

static const struct {
        const char *name;
        void (*fn)(struct mock *m, int argc, char **argv);
} commands[] = {
        { "broker-down", cmd_broker_state },
        { "broker-up", cmd_broker_state },
        { "rtt", cmd_rtt },
        { "errors", cmd_errors },
        { "broker-errors", cmd_broker_errors },
        { "clear-errors", cmd_clear_errors },
        { "topic-create", cmd_topic_create },
        { "topic-error", cmd_topic_error },
        { "leader", cmd_leader },
        { "ping", cmd_ping },
        { "quit", cmd_quit },
};

/* Splits on blanks in place. Blank lines and lines starting with '#' get no reply, so a
 * harness can send comments; every other line gets exactly one. */
static void run_line(struct mock *m, char *line) {
        char *argv[MAX_ARGS + 1];
        char *save = NULL;
        int argc = 0;

        for (char *tok = strtok_r(line, " \t\r", &save); tok; tok = strtok_r(NULL, " \t\r", &save)) {
                if (argc == MAX_ARGS) {
                        reply_err("too many arguments (max %d)", MAX_ARGS - 1);
                        return;
                }
                argv[argc++] = tok;
        }
        argv[argc] = NULL;
        if (argc == 0 || argv[0][0] == '#')
                return;
        for (size_t i = 0; i < ELEMENTSOF(commands); i++)
                if (strcmp(argv[0], commands[i].name) == 0) {
                        commands[i].fn(m, argc, argv);
                        return;
                }
        reply_err("unknown command '%s'", argv[0]);
}

/* Reads stdin with read(2), not stdio, so poll() sees exactly what is still unread. */
static void command_loop(struct mock *m) {
        char buf[LINE_MAX_LEN];
        size_t len = 0;
        bool overflow = false;

        while (!m->quit && !stop_requested) {
                struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };
                int r = poll(&pfd, 1, POLL_MS);
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        perror("mock-kafka: poll");
                        return;
                }
                if (r == 0)
                        continue;

                ssize_t n = read(STDIN_FILENO, buf + len, sizeof(buf) - 1 - len);
                if (n < 0) {
                        if (errno == EINTR || errno == EAGAIN)
                                continue;
                        perror("mock-kafka: read");
                        return;
                }
                if (n == 0) {
                        /* EOF: a last line without '\n' still counts. */
                        if (len > 0 && !overflow) {
                                buf[len] = '\0';
                                run_line(m, buf);
                        }
                        return;
                }
                len += (size_t)n;

                char *start = buf, *nl;
                while (!m->quit && (nl = memchr(start, '\n', len - (size_t)(start - buf)))) {
                        *nl = '\0';
                        if (overflow) {
                                reply_err("line too long (max %d bytes)", LINE_MAX_LEN - 2);
                                overflow = false;
                        } else {
                                run_line(m, start);
                        }
                        start = nl + 1;
                }
                len -= (size_t)(start - buf);
                memmove(buf, start, len);
                if (len == sizeof(buf) - 1) {
                        /* Drop the oversized line's head and reply once its end arrives. */
                        overflow = true;
                        len = 0;
                }
        }
}

static void usage(FILE *f) {
        fputs("usage: mock-kafka [--brokers N] [--topic NAME:PARTITIONS]...\n"
              "Prints 'BOOTSTRAP host:port,...', then reads commands on stdin (see docs/mock-kafka.md).\n",
              f);
}

static bool parse_topic_arg(char *arg, struct topic_spec *t) {
        char *colon = strrchr(arg, ':');

        if (!colon || colon == arg)
                return false;
        *colon = '\0';
        t->name = arg;
        return parse_int(colon + 1, 1, 100000, &t->partitions);
}

int main(int argc, char **argv) {
        struct topic_spec topics[MAX_TOPICS];
        struct mock m = { .broker_cnt = 1 };
        size_t topic_cnt = 0;
        char errstr[512];
        int ret = 1;

        for (int i = 1; i < argc; i++) {
                const char *opt = argv[i];
                if (strcmp(opt, "-h") == 0 || strcmp(opt, "--help") == 0) {
                        usage(stdout);
                        return 0;
                }
                if (i + 1 >= argc) {
                        usage(stderr);
                        return 2;
                }
                if (strcmp(opt, "--brokers") == 0) {
                        if (!parse_int(argv[++i], 1, 64, &m.broker_cnt)) {
                                fprintf(stderr, "mock-kafka: bad broker count '%s' (1..64)\n", argv[i]);
                                return 2;
                        }
                } else if (strcmp(opt, "--topic") == 0) {
                        if (topic_cnt == MAX_TOPICS) {
                                fprintf(stderr, "mock-kafka: too many topics (max %d)\n", MAX_TOPICS);
                                return 2;
                        }
                        if (!parse_topic_arg(argv[++i], &topics[topic_cnt])) {
                                fprintf(stderr, "mock-kafka: bad topic '%s', want NAME:PARTITIONS\n",
                                        argv[i]);
                                return 2;
                        }
                        topic_cnt++;
                } else {
                        usage(stderr);
                        return 2;
                }
        }

        struct sigaction sa = { .sa_handler = on_signal };
        sigemptyset(&sa.sa_mask);
        /* No SA_RESTART: poll() returns EINTR and the loop sees the flag at once. */
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        /* A harness that closes our stdout should not kill us mid-teardown. */
        signal(SIGPIPE, SIG_IGN);

        /* The handle only hosts the cluster; it never connects anywhere itself. */
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        if (rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
                fprintf(stderr, "mock-kafka: %s\n", errstr);
        m.rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
        if (!m.rk) {
                rd_kafka_conf_destroy(conf);
                fprintf(stderr, "mock-kafka: rd_kafka_new: %s\n", errstr);
                return 1;
        }
        m.mc = rd_kafka_mock_cluster_new(m.rk, m.broker_cnt);
        if (!m.mc) {
                fprintf(stderr, "mock-kafka: rd_kafka_mock_cluster_new failed\n");
                goto out;
        }
        for (size_t i = 0; i < topic_cnt; i++) {
                rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(
                        m.mc, topics[i].name, topics[i].partitions, replication_factor(&m));
                if (err) {
                        fprintf(stderr, "mock-kafka: creating topic '%s': %s\n", topics[i].name,
                                rd_kafka_err2str(err));
                        goto out;
                }
        }

        printf("BOOTSTRAP %s\n", rd_kafka_mock_cluster_bootstraps(m.mc));
        fflush(stdout);

        command_loop(&m);
        ret = 0;
out:
        if (m.mc)
                rd_kafka_mock_cluster_destroy(m.mc);
        rd_kafka_destroy(m.rk);
        return ret;
}
