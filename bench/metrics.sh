#!/usr/bin/env bash
# metrics.sh -- Does serving /metrics cost throughput? One relay drains the same backlog with HTTP
# off (http.listen = "") and on (any free port, scraped every second as Prometheus would), in
# turns, BENCH_ROUNDS times each; the table shows every drain, the medians and on ÷ off.
#
#   bench/metrics.sh
#
# Starts a private PostgreSQL 15 + Kafka test bed (scripts/testbed.sh) and stops it on exit. Each
# drain: the outbox is filled as bench/run.sh fills it (200-byte payloads, 3 headers, 10,000
# keys), then the relay starts, and the rate is rows / seconds from its start until the table is
# empty; its topic must then hold every row, and with HTTP on the last scrape's
# outbox_relay_events_published_total must say so too.
#
# Environment: BENCH_ROWS [1000000], BENCH_ROUNDS [3], BENCH_BUILD [build/bench],
# BENCH_DRAIN_TIMEOUT [900] seconds, BENCH_KEEP=1 keeps the test bed.
set -euo pipefail

SRCDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BENCH_BUILD:-$SRCDIR/build/bench}
ROWS=${BENCH_ROWS:-1000000}
ROUNDS=${BENCH_ROUNDS:-3}
DRAIN_TIMEOUT=${BENCH_DRAIN_TIMEOUT:-900}
RESULTS=$SRCDIR/bench/results-metrics.md
NAME=metrics
# shellcheck source=bench/lib.sh
. "$SRCDIR/bench/lib.sh"

command -v curl >/dev/null || die "curl is missing"
bench_build
bench_testbed
for mode in off on; do
        listen='""'
        [ "$mode" = off ] || listen='"127.0.0.1:0"'
        cat >"$TB/relay-$mode.conf" <<CONF
postgres = { conninfo = "host=$PGHOST port=$PGPORT dbname=$PGDATABASE user=$PGUSER"; };
kafka = { bootstrap_servers = "$KAFKA_BOOTSTRAP"; };
relay = { poll_interval = "1s"; };
log = { level = "info"; };
http = { listen = $listen; };
CONF
done

# Scrapes /metrics of the relay logging to $1 every second until it exits; the last scrape stays
# in $2.
scrape() {
        local log=$1 out=$2 addr=""
        while kill -0 "${PIDS[0]}" 2>/dev/null; do
                [ -n "$addr" ] || addr=$(sed -n 's/.*serving HTTP on \([0-9.]*:[0-9]*\) .*/\1/p' "$log" | head -n 1)
                if [ -n "$addr" ] && curl -sf -m 2 -o "$out.tmp" "http://$addr/metrics"; then
                        mv "$out.tmp" "$out"
                fi
                sleep 1
        done
}

# One drain: mode, round -> prints the rate (rows/s).
drain() {
        local mode=$1 topic=metrics-$1-$2 t0 t1 got log scraper=""
        log="$TB/relay-$topic.log"
        "$UTIL" create-topic --topic "$topic" --partitions 3 >&2 || die "creating topic '$topic' failed"
        say "$topic: filling $ROWS rows"
        fill "$ROWS" 10000 "$topic"
        t0=$EPOCHREALTIME
        "$RELAY" -c "$TB/relay-$mode.conf" 2>>"$log" &
        PIDS=($!)
        if [ "$mode" = on ]; then
                scrape "$log" "$TB/scrape-$topic.txt" &
                scraper=$!
        fi
        "$UTIL" wait-drain --pid "${PIDS[0]}" --timeout "$DRAIN_TIMEOUT" --interval-ms 100 >"$TB/drain-$topic.out" ||
                die "$topic: the relay did not drain the outbox (log in $TB)"
        t1=$(awk -F= '$1 == "drained_at_us" { printf "%.6f", $2 / 1e6 }' "$TB/drain-$topic.out")
        sleep 2 # one more scrape after the drain
        stop_relays
        [ -z "$scraper" ] || wait "$scraper" || true
        got=$("$UTIL" watermarks --topic "$topic")
        [ "$got" -ge "$ROWS" ] || die "$topic: $got messages in Kafka, expected at least $ROWS"
        if [ "$mode" = on ]; then
                local said
                said=$(awk -v t="$topic" '$1 == "outbox_relay_events_published_total{topic=\"" t "\"}" { print $2 }' \
                        "$TB/scrape-$topic.txt")
                [ "$said" = "$ROWS" ] || die "$topic: /metrics says $said published, expected $ROWS"
        fi
        say "$topic: $ROWS rows in $(calc "$t1 - $t0")s; $got messages in Kafka"
        calc "$ROWS / ($t1 - $t0)"
}

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

off=() on=()
for ((i = 1; i <= ROUNDS; i++)); do
        off+=("$(drain off "$i")")
        on+=("$(drain on "$i")")
done
moff=$(median "${off[@]}")
mon=$(median "${on[@]}")
ratios=()
for ((i = 0; i < ROUNDS; i++)); do
        ratios+=("$(calc "${on[i]} / ${off[i]}")")
done
mratio=$(median "${ratios[@]}")
{
        echo "### /metrics on vs off ($(date -u '+%Y-%m-%d %H:%M UTC'), \`bench/metrics.sh\`, one relay, defaults, $ROWS rows, 10,000 keys, in turns)"
        echo
        echo "| round | HTTP off rows/s | HTTP on, scraped every 1 s, rows/s | on ÷ off |"
        echo "|---|---|---|---|"
        for ((i = 0; i < ROUNDS; i++)); do
                printf '| %d | %.0f | %.0f | %.3f |\n' $((i + 1)) "${off[i]}" "${on[i]}" "$(calc "${on[i]} / ${off[i]}")"
        done
        printf '| median | %.0f | %.0f | %.3f |\n' "$moff" "$mon" "$(calc "$mon / $moff")"
        printf '| median of the rounds'"'"' ratios | | | **%.3f** |\n' "$mratio"
        echo
        echo "Machine: $(nproc) cores, PostgreSQL, Kafka and the relay on it; durability as scripts/testbed.sh sets it."
} | tee "$RESULTS"
