/* kafka-tail.c -- Prints a topic's messages (key, headers, value) from the beginning; for the demo and debugging. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librdkafka/rdkafka.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig) {
        (void)sig;
        stop = 1;
}

static void print_bytes(const char *label, const void *p, size_t len) {
        const unsigned char *b = p;

        printf("%s", label);
        if (!p) {
                printf("(null)");
                return;
        }
        for (size_t i = 0; i < len; i++)
                putchar(b[i] >= 0x20 && b[i] < 0x7f ? b[i] : '.');
}

int main(int argc, char **argv) {
        rd_kafka_topic_partition_list_t *parts;
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        rd_kafka_topic_t *rkt;
        rd_kafka_t *rk;
        char err[256];
        long want, seen = 0;
        time_t until;

        if (argc != 5) {
                fprintf(stderr, "usage: kafka-tail BOOTSTRAP TOPIC COUNT TIMEOUT_S\n");
                return 2;
        }
        want = atol(argv[3]);
        until = time(NULL) + atol(argv[4]);
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        if (rd_kafka_conf_set(conf, "bootstrap.servers", argv[1], err, sizeof(err)) ||
            rd_kafka_conf_set(conf, "group.id", "kafka-tail", err, sizeof(err)) ||
            rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof(err))) {
                fprintf(stderr, "kafka-tail: %s\n", err);
                return 1;
        }
        rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
        if (!rk) {
                fprintf(stderr, "kafka-tail: %s\n", err);
                return 1;
        }
        rd_kafka_poll_set_consumer(rk);
        rkt = rd_kafka_topic_new(rk, argv[2], NULL);
        while (!stop && time(NULL) < until) {
                if (rd_kafka_metadata(rk, 0, rkt, &md, 5000) == 0 && md->topics[0].err == 0 &&
                    md->topics[0].partition_cnt > 0)
                        break;
                if (md)
                        rd_kafka_metadata_destroy(md);
                md = NULL;
                struct timespec ts = { 0, 200000000 };
                nanosleep(&ts, NULL);
        }
        if (!md) {
                fprintf(stderr, "kafka-tail: topic '%s' did not appear\n", argv[2]);
                return 1;
        }
        parts = rd_kafka_topic_partition_list_new(md->topics[0].partition_cnt);
        for (int p = 0; p < md->topics[0].partition_cnt; p++)
                rd_kafka_topic_partition_list_add(parts, argv[2], p)->offset = RD_KAFKA_OFFSET_BEGINNING;
        rd_kafka_metadata_destroy(md);
        rd_kafka_topic_destroy(rkt);
        rd_kafka_assign(rk, parts);
        rd_kafka_topic_partition_list_destroy(parts);
        while (!stop && seen < want && time(NULL) < until) {
                rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
                rd_kafka_headers_t *h = NULL;
                const char *name;
                const void *val;
                size_t sz;

                if (!m)
                        continue;
                if (m->err) {
                        rd_kafka_message_destroy(m);
                        continue;
                }
                seen++;
                printf("%s[%d]@%lld ", rd_kafka_topic_name(m->rkt), m->partition, (long long)m->offset);
                print_bytes("key=", m->key, m->key_len);
                if (rd_kafka_message_headers(m, &h) == 0)
                        for (size_t i = 0; rd_kafka_header_get_all(h, i, &name, &val, &sz) == 0; i++) {
                                printf(" %s=", name);
                                print_bytes("", val, sz);
                        }
                print_bytes(" value=", m->payload, m->len);
                putchar('\n');
                fflush(stdout);
                rd_kafka_message_destroy(m);
        }
        rd_kafka_consumer_close(rk);
        rd_kafka_destroy(rk);
        return seen >= want ? 0 : 1;
}
