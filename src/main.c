/* main.c -- Command line, configuration, exit codes; everything else lives in the library. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include <libpq-fe.h>

#include "config.h"
#include "kafka_guard.h"
#include "log.h"
#include "relay.h"
#include "signals.h"
#include "sql.h"
#include "version.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: outbox-relay [OPTIONS]\n"
                "Relays rows from a PostgreSQL outbox table to Apache Kafka.\n\n"
                "  -c, --config FILE   configuration file (default %s)\n"
                "      --check-config  validate the configuration and exit\n"
                "      --print-sql     print the table's migrations (sql/, in order) for psql and exit\n"
                "  -h, --help          show this help\n"
                "      --version       show the version and the libraries it runs with\n\n"
                "Exit status: 0 clean stop, 78 configuration error (or a table that lacks a\n"
                "migration), 1 any other failure. Every key of the file: outbox-relay.conf(5).\n",
                CONFIG_DEFAULT_PATH);
}

static void version(void) {
        int pq = PQlibVersion();

        printf("outbox-relay %s\n", VERSION);
        if (BUILD_GIT_DESCRIBE[0])
                printf("built from git %s\n", BUILD_GIT_DESCRIBE);
        printf("librdkafka %s\n", rd_kafka_version_str());
        /* PQlibVersion(): major * 10000 + minor since PostgreSQL 10 */
        printf("libpq %d.%d\n", pq / 10000, pq % 10000);
        if (LIBSYSTEMD_VERSION[0])
                printf("libsystemd %s (built against; it has no call that says its version at run time)\n",
                       LIBSYSTEMD_VERSION);
        else
                printf("libsystemd: not built in\n");
}

/* The migrations, in the order they are applied; each is idempotent, so all of them may be
 * applied again on every upgrade. */
static int print_sql(void) {
        puts("-- outbox-relay " VERSION ": the migrations of sql/, in order; each may be applied again.\n"
             "\\set ON_ERROR_STOP on");
        for (size_t i = 0; i < sql_migrations_n; i++)
                printf("\n%s", sql_migrations[i].text); /* each starts with its name */
        /* psql must not apply a cut script as if it were whole: a failed write is an error */
        if (fflush(stdout) != 0 || ferror(stdout)) {
                fprintf(stderr, "outbox-relay: --print-sql: cannot write: %s\n", strerror(errno));
                return 1;
        }
        return 0;
}

/* Exit status 78 (EX_CONFIG) says "fix the file", and systemd's RestartPreventExitStatus=78
 * stops restarting on it. So main() gives it only for what config_load() and
 * kafka_guard_probe() find wrong with the configuration, and for a table that lacks a migration
 * when the relay starts (setup that a restart cannot cure either: relay_run's -ENOPKG), never
 * for a failure at run time, which a restart may well cure. */
int main(int argc, char **argv) {
        enum { OPT_CHECK = 0x100, OPT_VERSION, OPT_PRINT_SQL };
        static const struct option options[] = {
                { "config", required_argument, NULL, 'c' },
                { "check-config", no_argument, NULL, OPT_CHECK },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, OPT_VERSION },
                { "print-sql", no_argument, NULL, OPT_PRINT_SQL },
                { 0 },
        };
        const char *path = CONFIG_DEFAULT_PATH;
        struct relay_config *cfg;
        struct relay relay;
        bool check = false;
        char err[1024];
        int c, r;

        setvbuf(stderr, NULL, _IOLBF, 0);
        while ((c = getopt_long(argc, argv, "c:h", options, NULL)) >= 0) {
                switch (c) {
                case 'c':
                        path = optarg;
                        break;
                case OPT_CHECK:
                        check = true;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                case OPT_VERSION:
                        version();
                        return 0;
                case OPT_PRINT_SQL:
                        return print_sql();
                default:
                        usage(stderr);
                        return EX_USAGE;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "outbox-relay: unexpected argument '%s'\n", argv[optind]);
                return EX_USAGE;
        }

        /* allocated only now: the options that print and exit above leave nothing to free */
        cfg = calloc(1, sizeof(*cfg));
        if (!cfg) {
                fprintf(stderr, "<3>outbox-relay: out of memory\n");
                return 1;
        }
        r = config_load(path, cfg, err, sizeof(err));
        if (r < 0) {
                fprintf(stderr, "<3>outbox-relay: %s\n", err);
                free(cfg);
                /* A missing or unreadable file is the file's fault too; memory is not. */
                return r == -ENOMEM ? 1 : EX_CONFIG;
        }
        /* What librdkafka refuses only when the producer is created is a configuration error
         * as well: find it here, not in the relay's first turn. */
        r = kafka_guard_probe(cfg, err, sizeof(err));
        if (r < 0) {
                fprintf(stderr, "<3>outbox-relay: %s\n", err);
                config_free(cfg);
                free(cfg);
                return r == -EINVAL ? EX_CONFIG : 1;
        }
        if (check) {
                printf("%s: configuration is valid\n", path);
                config_free(cfg);
                free(cfg);
                return 0;
        }
        log_open();
        log_set_level(cfg->log.level);
        log_event(LOG_INFO, LOG_EV_STARTED, NULL, "outbox-relay %s starting (librdkafka %s), table '%s'",
                  VERSION, rd_kafka_version_str(), cfg->postgres.table);

        /* The relay owns cfg from here on, and replaces it on SIGHUP. */
        r = relay_init(&relay, cfg, signals_install());
        if (r < 0) {
                log_error_errno(r, "cannot initialise");
                return 1;
        }
        r = relay_run(&relay);
        relay_done(&relay);
        /* The configuration was checked above: whatever fails from here on (the producer
         * included) gets 1, and systemd restarts the relay. */
        if (r == -ENOPKG)
                return EX_CONFIG;
        if (r < 0) {
                if (r == -ECANCELED)
                        log_notice("second stop signal: rolled back, exiting without draining");
                return 1;
        }
        log_event(LOG_INFO, LOG_EV_STOPPED, NULL, "stopped");
        return 0;
}
