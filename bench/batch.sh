#!/usr/bin/env bash
# batch.sh -- Which batch_size: drain rate, relay CPU and peak RSS, and latency at a steady rate, for several batch sizes in one run.
#
#   bench/batch.sh
#
# Starts a private PostgreSQL 15 + Kafka test bed (scripts/testbed.sh) and stops it on exit; its
# broker is warmed first, as for bench/run.sh (BENCH_WARMUP_MESSAGES, bench/lib.sh). For each
# batch size, in turn and twice (the second round in the reverse order, so a drift of the machine
# weighs on both ends alike): BENCH_ROWS rows as in bench/run.sh (200-byte payloads, 10,000 keys,
# 3 headers) drained by one relay with the defaults but that batch size, then rows inserted at
# BENCH_LATENCY_RATE per second for BENCH_LATENCY_SECONDS with the relay still running
# (bench/latency: insert -> consumed). Prints a markdown table (the mean of the two rounds, for
# two also their median) and writes it to bench/results-batch.md.
#
# Environment: BENCH_BATCHES ["500 1000 2000 5000"], BENCH_ROWS [1000000],
# BENCH_LATENCY_SECONDS [15], BENCH_LATENCY_RATE [1000], BENCH_BUILD [build/bench],
# BENCH_WARMUP_MESSAGES [3000000; 0: none], BENCH_KEEP=1 keeps the test bed directory.
set -euo pipefail

NAME=batch
SRCDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BENCH_BUILD:-$SRCDIR/build/bench}
BATCHES=${BENCH_BATCHES:-500 1000 2000 5000}
ROWS=${BENCH_ROWS:-1000000}
LAT_SECONDS=${BENCH_LATENCY_SECONDS:-15}
LAT_RATE=${BENCH_LATENCY_RATE:-1000}
RESULTS=$SRCDIR/bench/results-batch.md
CLK_TCK=$(getconf CLK_TCK)

# say, die, calc, q, the release build, the test bed (its broker warmed) removed on exit,
# stopping the relay (bench/lib.sh)
# shellcheck source=bench/lib.sh
. "$SRCDIR/bench/lib.sh"
mean2() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f", (a + b) / 2 }'; }

bench_build
ninja -C "$BUILD" bench/latency >&2 || die "building failed"
LATENCY=$BUILD/bench/latency
bench_testbed

# One case: batch size, round -> "rate cpu_us_per_event hwm_kib p50 p99 p999 max missing"
run_case() {
        local batch=$1 topic="batch-$1-r$2" t0 t1 ticks hwm
        "$UTIL" create-topic --topic "$topic" --partitions 3 >&2 || die "creating topic '$topic' failed"
        timeout 600 psql -X -q -v ON_ERROR_STOP=1 -v rows="$ROWS" -v topic="$topic" <<'SQL' >&2 ||
TRUNCATE outbox;
INSERT INTO outbox (topic, key, payload, headers)
SELECT :'topic', 'key-' || (g % 10000),
       convert_to(rpad('row ' || g || ' ', 200, 'abcdefghijklmnopqrstuvwxyz0123456789'), 'UTF8'),
       jsonb_build_object('trace-id', md5(g::text), 'source', 'outbox-bench', 'type', 'order.created')
  FROM generate_series(1, :rows) g;
VACUUM ANALYZE outbox;
SQL
                die "filling the outbox failed"
        cat >"$TB/relay.conf" <<CONF
postgres = { conninfo = "host=$PGHOST port=$PGPORT dbname=$PGDATABASE user=$PGUSER"; };
kafka = { bootstrap_servers = "$KAFKA_BOOTSTRAP"; };
relay = { batch_size = $batch; };
log = { level = "notice"; };
http = { listen = "127.0.0.1:0"; };
CONF
        t0=$EPOCHREALTIME
        "$RELAY" -c "$TB/relay.conf" 2>>"$TB/relay-$topic.log" &
        PIDS=($!)
        "$UTIL" wait-drain --pid "${PIDS[0]}" --timeout 360 --interval-ms 100 >"$TB/drain-$topic.out" ||
                die "$topic: the relay did not drain the outbox"
        t1=$(awk -F= '$1 == "drained_at_us" { printf "%.6f", $2 / 1e6 }' "$TB/drain-$topic.out")
        ticks=$(awk '{ print $14 + $15 }' "/proc/${PIDS[0]}/stat")
        [ "$("$UTIL" watermarks --topic "$topic")" -ge "$ROWS" ] || die "$topic: rows missing in Kafka"
        timeout $((LAT_SECONDS + 120)) "$LATENCY" --topic "$topic" --seconds "$LAT_SECONDS" --rate "$LAT_RATE" \
                --per-tx 10 --keys 10000 --grace 30 >"$TB/latency-$topic.out" || die "$topic: the latency tool failed"
        hwm=$(awk '/^VmHWM/ { print $2 }' "/proc/${PIDS[0]}/status")
        kill -TERM "${PIDS[0]}"
        wait "${PIDS[0]}" || die "$topic: the relay did not exit 0 on SIGTERM"
        PIDS=()
        lat() { awk -F= -v k="$1" '$1 == k { print $2 }' "$TB/latency-$topic.out"; }
        echo "$(calc "$ROWS / ($t1 - $t0)") $(calc "$ticks * 1000000 / $CLK_TCK / $ROWS") $hwm $(lat p50_ms) $(lat p99_ms) $(lat p999_ms) $(lat max_ms) $(lat missing)"
}

declare -A R1 R2
for b in $BATCHES; do
        R1[$b]=$(run_case "$b" 1)
        say "batch $b, round 1: ${R1[$b]}"
done
for b in $(echo $BATCHES | tr ' ' '\n' | tac); do
        R2[$b]=$(run_case "$b" 2)
        say "batch $b, round 2: ${R2[$b]}"
done

{
        echo "### Batch size ($(date -u '+%Y-%m-%d %H:%M UTC'), \`bench/batch.sh\`, $ROWS rows per drain, latency at $LAT_RATE rows/s for $LAT_SECONDS s; mean of two rounds)"
        echo
        echo "| batch_size | drain rows/s | relay CPU µs/event | peak RSS MiB | latency p50 / p99 / p99.9 / max ms | rows missing |"
        echo "|---|---|---|---|---|---|"
        for b in $BATCHES; do
                read -r a1 c1 h1 p501 p991 p9991 m1 x1 <<<"${R1[$b]}"
                read -r a2 c2 h2 p502 p992 p9992 m2 x2 <<<"${R2[$b]}"
                printf '| %s | %.0f (%.0f, %.0f) | %.2f | %.1f | %.1f / %.1f / %.1f / %.1f | %d |\n' "$b" \
                        "$(mean2 "$a1" "$a2")" "$a1" "$a2" "$(mean2 "$c1" "$c2")" \
                        "$(calc "($h1 > $h2 ? $h1 : $h2) / 1024")" "$(mean2 "$p501" "$p502")" \
                        "$(mean2 "$p991" "$p992")" "$(mean2 "$p9991" "$p9992")" "$(mean2 "$m1" "$m2")" \
                        "$((x1 + x2))"
        done
        echo
        echo "Machine: $(nproc) cores, PostgreSQL, Kafka and the relay on it; durability as scripts/testbed.sh sets it."
} | tee "$RESULTS"
