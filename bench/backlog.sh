#!/usr/bin/env bash
# backlog.sh -- Is the drain flat at any backlog? One relay with the defaults drains 1M and then
# 10M rows in one test bed; the table shows each rate and 10M ÷ 1M (issue 11: >= 0.9), with the
# relay's peak RSS (issue 11: <= 32 MiB at any backlog) and CPU per event at each.
#
#   bench/backlog.sh
#
# Starts a private PostgreSQL 15 + Kafka test bed (scripts/testbed.sh) and stops it on exit. Each
# drain: the outbox is filled as bench/run.sh fills it (200-byte payloads, 3 headers, 10,000
# keys), then the relay starts, and the rate is rows / seconds from its start until the table is
# empty; its topic must then hold every row. With BENCH_BASELINE_RELAY=path (another build of the
# relay, e.g. of an earlier commit), each backlog is drained by both, one after the other, and
# the table shows both.
#
# Environment: BENCH_BACKLOGS ["1000000 10000000"], BENCH_BUILD [build/bench],
# BENCH_BASELINE_RELAY [none], BENCH_DRAIN_TIMEOUT [900] seconds, BENCH_KEEP=1 keeps the test bed.
set -euo pipefail

SRCDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BENCH_BUILD:-$SRCDIR/build/bench}
BACKLOGS=${BENCH_BACKLOGS:-1000000 10000000}
BASELINE=${BENCH_BASELINE_RELAY:-}
DRAIN_TIMEOUT=${BENCH_DRAIN_TIMEOUT:-900}
RESULTS=$SRCDIR/bench/results-backlog.md
NAME=backlog
# shellcheck source=bench/lib.sh
. "$SRCDIR/bench/lib.sh"

[ -z "$BASELINE" ] || [ -x "$BASELINE" ] || die "BENCH_BASELINE_RELAY '$BASELINE' is not an executable"
bench_build
bench_testbed
cat >"$TB/relay.conf" <<CONF
postgres = { conninfo = "host=$PGHOST port=$PGPORT dbname=$PGDATABASE user=$PGUSER"; };
kafka = { bootstrap_servers = "$KAFKA_BOOTSTRAP"; };
relay = { poll_interval = "1s"; };
log = { level = "notice"; };
http = { listen = "127.0.0.1:0"; };
CONF

# One drain: relay binary, rows, name -> prints the rate (rows/s), the relay's peak RSS (MiB,
# VmHWM at the drain's end) and its CPU per event (µs, utime + stime at the drain's end).
drain() {
        local relay=$1 rows=$2 topic=backlog-$3-$2 t0 t1 got hwm stat ticks
        "$UTIL" create-topic --topic "$topic" --partitions 3 >&2 || die "creating topic '$topic' failed"
        say "$topic: filling $rows rows"
        fill "$rows" 10000 "$topic"
        t0=$EPOCHREALTIME
        "$relay" -c "$TB/relay.conf" 2>>"$TB/relay-$topic.log" &
        PIDS=($!)
        "$UTIL" wait-drain --pid "${PIDS[0]}" --timeout "$DRAIN_TIMEOUT" --interval-ms 100 >"$TB/drain-$topic.out" ||
                die "$topic: the relay did not drain the outbox (log in $TB)"
        t1=$(awk -F= '$1 == "drained_at_us" { printf "%.6f", $2 / 1e6 }' "$TB/drain-$topic.out")
        hwm=$(awk '$1 == "VmHWM:" { print $2 }' "/proc/${PIDS[0]}/status")
        stat=$(cat "/proc/${PIDS[0]}/stat")
        stat=${stat##*) }
        ticks=$(echo "$stat" | awk '{ print $12 + $13 }')
        stop_relays
        got=$("$UTIL" watermarks --topic "$topic")
        [ "$got" -ge "$rows" ] || die "$topic: $got messages in Kafka, expected at least $rows"
        say "$topic: $rows rows in $(calc "$t1 - $t0")s; $got messages in Kafka"
        echo "$(calc "$rows / ($t1 - $t0)") $(calc "$hwm / 1024") $(calc "$ticks * 1000000 / $(getconf CLK_TCK) / $rows")"
}

declare -A RATE RSS CPU
for rows in $BACKLOGS; do
        read -r "RATE[relay-$rows]" "RSS[relay-$rows]" "CPU[relay-$rows]" <<<"$(drain "$RELAY" "$rows" relay)"
        [ -z "$BASELINE" ] ||
                read -r "RATE[baseline-$rows]" "RSS[baseline-$rows]" "CPU[baseline-$rows]" <<<"$(drain "$BASELINE" "$rows" baseline)"
done

first=${BACKLOGS%% *}
{
        echo "### Drain at growing backlogs ($(date -u '+%Y-%m-%d %H:%M UTC'), \`bench/backlog.sh\`, one relay, defaults, 10,000 keys)"
        echo
        if [ -n "$BASELINE" ]; then
                echo "| rows | relay rows/s | ÷ at $first | peak RSS (MiB) | CPU (µs/event) | baseline rows/s | ÷ at $first | relay ÷ baseline |"
                echo "|---|---|---|---|---|---|---|---|"
        else
                echo "| rows | relay rows/s | ÷ at $first | peak RSS (MiB) | CPU (µs/event) |"
                echo "|---|---|---|---|---|"
        fi
        for rows in $BACKLOGS; do
                r=${RATE[relay-$rows]}
                if [ -n "$BASELINE" ]; then
                        b=${RATE[baseline-$rows]}
                        printf '| %s | %.0f | %.3f | %.1f | %.2f | %.0f | %.3f | %.3f |\n' "$rows" "$r" \
                                "$(calc "$r / ${RATE[relay-$first]}")" "${RSS[relay-$rows]}" "${CPU[relay-$rows]}" \
                                "$b" "$(calc "$b / ${RATE[baseline-$first]}")" "$(calc "$r / $b")"
                else
                        printf '| %s | %.0f | %.3f | %.1f | %.2f |\n' "$rows" "$r" "$(calc "$r / ${RATE[relay-$first]}")" \
                                "${RSS[relay-$rows]}" "${CPU[relay-$rows]}"
                fi
        done
        echo
        echo "Machine: $(nproc) cores, PostgreSQL, Kafka and the relay on it; durability as scripts/testbed.sh sets it."
} | tee "$RESULTS"
