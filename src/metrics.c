/* metrics.c -- The relay's figures in one place: the loop records them, /metrics, STATUS= and the journal summary read them. */
#include "metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

const double metrics_bounds[METRICS_BOUNDS] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                0.5,   1,      2.5,   5,    10,    30,   60,  300 };

void histogram_observe(struct histogram *h, double seconds) {
        size_t i = 0;

        while (i < METRICS_BOUNDS && seconds > metrics_bounds[i])
                i++;
        h->buckets[i]++;
        h->count++;
        h->sum += seconds;
}

void histogram_merge(struct histogram *into, const struct histogram *from) {
        for (size_t i = 0; i <= METRICS_BOUNDS; i++)
                into->buckets[i] += from->buckets[i];
        into->count += from->count;
        into->sum += from->sum;
}

int metrics_init(struct metrics *m, usec_t start_wall) {
        memset(m, 0, sizeof(*m));
        if (pthread_mutex_init(&m->lock, NULL) != 0)
                return -ENOMEM;
        m->d.pending_rows = -1;
        m->d.ordering = "key";
        m->d.relays = 1;
        m->d.pipelines = 1;
        m->d.start_time = (double)start_wall / USEC_PER_SEC;
        atomic_init(&m->turn, 0);
        atomic_init(&m->exiting, false);
        return 0;
}

void metrics_done(struct metrics *m) {
        pthread_mutex_destroy(&m->lock);
}

void metrics_read(struct metrics *m, struct metrics_data *out) {
        pthread_mutex_lock(&m->lock);
        *out = m->d;
        pthread_mutex_unlock(&m->lock);
}

static double seconds(usec_t u) {
        return (double)u / USEC_PER_SEC;
}

void metrics_add_batch(struct metrics *m, const struct metrics_batch *b) {
        struct metrics_totals *t = &m->d.totals;

        pthread_mutex_lock(&m->lock);
        t->published += b->add.published;
        t->dead_lettered += b->add.dead_lettered;
        t->failed += b->add.failed;
        t->held += b->add.held;
        t->overtaken += b->add.overtaken;
        t->batches += b->add.batches;
        histogram_observe(&m->d.claim_seconds, seconds(b->claim));
        histogram_observe(&m->d.finish_seconds, seconds(b->finish));
        histogram_observe(&m->d.batch_seconds, seconds(b->total));
        histogram_merge(&m->d.delivery_seconds, &b->delivery);
        histogram_merge(&m->d.end_to_end_seconds, &b->end_to_end);
        pthread_mutex_unlock(&m->lock);
}

void metrics_published(struct metrics *m, const char *topic, uint64_t n) {
        struct metrics_data *d = &m->d;
        size_t i;

        pthread_mutex_lock(&m->lock);
        for (i = 0; i < d->n_topics; i++)
                if (strcmp(d->topics[i].name, topic) == 0)
                        break;
        if (i == d->n_topics && d->n_topics < METRICS_TOPICS && strlen(topic) < sizeof(d->topics[0].name)) {
                snprintf(d->topics[i].name, sizeof(d->topics[i].name), "%s", topic);
                d->n_topics++;
        }
        if (i < d->n_topics)
                d->topics[i].published += n;
        else
                d->other_published += n;
        pthread_mutex_unlock(&m->lock);
}

void metrics_transition(struct metrics *m, enum metrics_transition t) {
        pthread_mutex_lock(&m->lock);
        m->d.transitions[t]++;
        pthread_mutex_unlock(&m->lock);
}

void metrics_reconnected(struct metrics *m) {
        pthread_mutex_lock(&m->lock);
        m->d.db_reconnects++;
        pthread_mutex_unlock(&m->lock);
}

void metrics_update(struct metrics *m, void (*set)(struct metrics_data *d, void *arg), void *arg) {
        pthread_mutex_lock(&m->lock);
        set(&m->d, arg);
        pthread_mutex_unlock(&m->lock);
}

/* ---- the text exposition ------------------------------------------------------------------ */

static void head(FILE *f, const char *name, const char *type, const char *help) {
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value: backslash, double quote and newline escaped, as the format requires. */
static void label_value(FILE *f, const char *s) {
        for (; *s; s++) {
                if (*s == '\\')
                        fputs("\\\\", f);
                else if (*s == '"')
                        fputs("\\\"", f);
                else if (*s == '\n')
                        fputs("\\n", f);
                else
                        fputc(*s, f);
        }
}

static void counter(FILE *f, const char *name, const char *help, uint64_t v) {
        head(f, name, "counter", help);
        fprintf(f, "%s %" PRIu64 "\n", name, v);
}

static void gauge(FILE *f, const char *name, const char *help, double v) {
        head(f, name, "gauge", help);
        fprintf(f, "%s %.17g\n", name, v);
}

static void histogram(FILE *f, const char *name, const char *help, const struct histogram *h) {
        uint64_t cum = 0;

        head(f, name, "histogram", help);
        for (size_t i = 0; i < METRICS_BOUNDS; i++) {
                cum += h->buckets[i];
                fprintf(f, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, metrics_bounds[i], cum);
        }
        fprintf(f, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, h->count);
        fprintf(f, "%s_sum %.17g\n%s_count %" PRIu64 "\n", name, h->sum, name, h->count);
}

int metrics_render(const struct metrics_data *d, const struct metrics_process *p,
                   const struct metrics_build *b, char **out, size_t *len) {
        static const char *const to[METRICS_TRANSITIONS] = { "open", "half_open", "reopen", "closed" };
        FILE *f = open_memstream(out, len);

        if (!f)
                return -ENOMEM;

        head(f, "outbox_relay_events_published_total", "counter",
             "Events Kafka acknowledged and the relay finished, by topic (at most 64 topics, "
             "the rest as topic=\"" METRICS_OTHER_TOPIC "\").");
        for (size_t i = 0; i < d->n_topics; i++) {
                fputs("outbox_relay_events_published_total{topic=\"", f);
                label_value(f, d->topics[i].name);
                fprintf(f, "\"} %" PRIu64 "\n", d->topics[i].published);
        }
        if (d->other_published || d->n_topics == METRICS_TOPICS)
                fprintf(f, "outbox_relay_events_published_total{topic=\"%s\"} %" PRIu64 "\n",
                        METRICS_OTHER_TOPIC, d->other_published);
        counter(f, "outbox_relay_rows_dead_lettered_total", "Rows parked in the dead-letter state.",
                d->totals.dead_lettered);
        counter(f, "outbox_relay_rows_held_back_total",
                "Rows not sent in their batch because an earlier row of their (topic, key) did not go; "
                "they stay pending (a row held in several batches counts in each).",
                d->totals.held);
        counter(f, "outbox_relay_rows_overtaken_total",
                "Rows dead-lettered because a later row of their (topic, key) was already in Kafka.",
                d->totals.overtaken);
        counter(f, "outbox_relay_delivery_failures_total",
                "Row deliveries that failed and stay pending for a retry.", d->totals.failed);
        counter(f, "outbox_relay_batches_total", "Batches claimed and committed.", d->totals.batches);
        histogram(f, "outbox_relay_batch_duration_seconds", "A batch from its claim to its commit.",
                  &d->batch_seconds);
        histogram(f, "outbox_relay_claim_duration_seconds", "The claim statement of a batch.",
                  &d->claim_seconds);
        histogram(f, "outbox_relay_finish_duration_seconds",
                  "The finishing transaction of a batch (delete or mark, failures, commit).",
                  &d->finish_seconds);
        histogram(f, "outbox_relay_kafka_delivery_seconds",
                  "From handing a message to the producer to its delivery report.", &d->delivery_seconds);
        histogram(f, "outbox_relay_end_to_end_seconds",
                  "From a row's created_at to Kafka's acknowledgement of its message.",
                  &d->end_to_end_seconds);

        head(f, "outbox_relay_oldest_pending_age_seconds", "gauge",
             "Age of the oldest pending row (the lag); absent while it cannot be read.");
        if (d->lag_known)
                fprintf(f, "outbox_relay_oldest_pending_age_seconds %.6f\n", d->oldest_pending_age);
        head(f, "outbox_relay_pending_rows", "gauge",
             "Pending rows: exact below 10000; from there on the span of ids from the oldest pending row "
             "to the newest row (an estimate from above). Absent while it cannot be read.");
        if (d->lag_known && d->pending_rows >= 0)
                fprintf(f, "outbox_relay_pending_rows %" PRId64 "\n", d->pending_rows);

        gauge(f, "outbox_relay_breaker_state", "Circuit breaker: 0 closed, 1 half-open (probing), 2 open.",
              d->breaker_state);
        head(f, "outbox_relay_breaker_transitions_total", "counter",
             "Circuit breaker changes, by the state entered (reopen: a probe failed).");
        for (size_t i = 0; i < METRICS_TRANSITIONS; i++)
                fprintf(f, "outbox_relay_breaker_transitions_total{to=\"%s\"} %" PRIu64 "\n", to[i],
                        d->transitions[i]);
        counter(f, "outbox_relay_database_reconnects_total",
                "Connections to PostgreSQL made again after one was lost.", d->db_reconnects);
        gauge(f, "outbox_relay_database_connected", "1 while the relay has its PostgreSQL connection.",
              d->db_connected);
        gauge(f, "outbox_relay_paused_topics", "Topics Kafka refuses, not claimed for a while.",
              (double)d->paused_topics);
        gauge(f, "outbox_relay_paused_keys",
              "(topic, key) pairs held back while their partition takes nothing.", (double)d->paused_keys);

        head(f, "outbox_relay_ordering_info", "gauge", "The ordering mode (relay.ordering), as a label.");
        fprintf(f, "outbox_relay_ordering_info{ordering=\"%s\"} 1\n", d->ordering);
        gauge(f, "outbox_relay_sharing_relays",
              "ordering = \"key\": relays that share the table, this one included (1 otherwise).", d->relays);
        gauge(f, "outbox_relay_sharing_pipelines",
              "ordering = \"key\": pipelines (relay.pipelines of every relay) that share the table, "
              "this relay's included; this relay's pipelines otherwise.",
              d->pipelines);
        gauge(f, "outbox_relay_batches_in_flight", "Batches this relay claimed and has not finished yet.",
              (double)d->in_flight);
        gauge(f, "outbox_relay_first_bucket_number",
              "ordering = \"key\": the key bucket (of 256) where this relay's first pipeline's claims start.",
              d->first_bucket);
        gauge(f, "outbox_relay_leader",
              "ordering = \"single\": 1 while this relay is the one publishing the table (1 in the other "
              "modes).",
              d->leader);
        gauge(f, "outbox_relay_last_batch_keys", "Distinct (topic, key) pairs of the last batch.",
              (double)d->last_batch_keys);

        head(f, "outbox_relay_build_info", "gauge", "Versions the relay was built with and runs on.");
        fputs("outbox_relay_build_info{version=\"", f);
        label_value(f, b->version);
        fputs("\",librdkafka=\"", f);
        label_value(f, b->librdkafka);
        fputs("\",libpq=\"", f);
        label_value(f, b->libpq);
        fputs("\"} 1\n", f);

        head(f, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.");
        fprintf(f, "process_cpu_seconds_total %.2f\n", p->cpu_seconds);
        gauge(f, "process_resident_memory_bytes", "Resident memory size in bytes.",
              (double)p->resident_bytes);
        gauge(f, "process_virtual_memory_bytes", "Virtual memory size in bytes.", (double)p->virtual_bytes);
        if (p->heap_bytes > 0) /* 0: glibc's malloc is not the one in use (a sanitizer, valgrind) */
                gauge(f, "outbox_relay_heap_bytes",
                      "Bytes the C allocator has handed out and not taken back.", (double)p->heap_bytes);
        if (p->open_fds >= 0)
                gauge(f, "process_open_fds", "Number of open file descriptors.", (double)p->open_fds);
        if (p->max_fds >= 0)
                gauge(f, "process_max_fds", "Maximum number of open file descriptors.", (double)p->max_fds);
        gauge(f, "process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
              d->start_time);
        if (fclose(f) != 0) {
                free(*out);
                *out = NULL;
                return -ENOMEM;
        }
        return 0;
}
