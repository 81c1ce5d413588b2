#!/usr/bin/env bash
# scaleout.sh -- Several relays on one table: drain throughput with 1, 2 and 3 relays, at 50 and at
# 10,000 keys, in the ordered default (relay.ordering = "key") and in "none", all in one run.
#
#   bench/scaleout.sh
#
# Starts a private PostgreSQL 15 + Kafka test bed (scripts/testbed.sh) and stops it on exit. For
# each case: the outbox is filled with BENCH_ROWS rows (200-byte payloads, 3 headers, as in
# bench/run.sh), the relays start together, and the drain rate is rows / seconds from the start
# until the table is empty. Every case's topic must then hold every row (a count, not an order
# check: tests/integration/test_sharing.c checks order under faults). Prints a markdown table
# with the ratios the targets speak of, and writes it to bench/results-scaleout.md. With each rate
# goes the machine's CPU per row over the drain (every process on it: the relays, PostgreSQL,
# Kafka), and PostgreSQL's and Kafka's own: on this 2-core machine the cases are bound by CPU, and
# the ordered claim's cost shows there.
#
# Environment: BENCH_ROWS [1000000], BENCH_WARMUP_ROWS [200000] (one unmeasured drain per mode
# first), BENCH_BATCH [the relay's default], BENCH_BUILD [build/bench],
# BENCH_DRAIN_TIMEOUT [360] seconds, BENCH_KEEP=1 keeps the test bed directory, BENCH_KEYS ["50 10000"]
# and BENCH_RELAYS ["1 2 3"] choose the cases, BENCH_REPEAT [1] runs every pair of cases that many
# times, in rounds (the table shows medians).
set -euo pipefail

SRCDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BENCH_BUILD:-$SRCDIR/build/bench}
ROWS=${BENCH_ROWS:-1000000}
WARMUP_ROWS=${BENCH_WARMUP_ROWS:-200000}
BATCH=${BENCH_BATCH:-}
DRAIN_TIMEOUT=${BENCH_DRAIN_TIMEOUT:-360}
KEYS=${BENCH_KEYS:-50 10000}
RELAYS=${BENCH_RELAYS:-1 2 3}
REPEAT=${BENCH_REPEAT:-1}
RESULTS=$SRCDIR/bench/results-scaleout.md
NAME=scaleout
# shellcheck source=bench/lib.sh
. "$SRCDIR/bench/lib.sh"

bench_build
bench_testbed

# Warm-up, not measured: on a fresh test bed the first case ran about a third slower than the
# same case later in the run (the broker's JVM still compiling, PostgreSQL's caches cold), and
# the first case is always 1 ordered relay at 50 keys. One drain in each mode first.
for ordering in key none; do
        out=$(ROWS=$WARMUP_ROWS drain 10000 "$ordering" 1 warmup) || die "the warm-up drain failed"
        read -r r _ <<<"$out"
        say "warm-up, ordering \"$ordering\": $(printf '%.0f' "$r") rows/s (not measured)"
done

# The cases run in pairs, ordered and "none" at the same keys and relays, so that the two sides of
# "ordered ÷ none" are measured next to each other. With BENCH_REPEAT > 1 the run goes in rounds:
# every round runs every pair once, and round r starts r - 1 pairs further along, so a drift of the
# machine over the run (caches, the broker's JIT, autovacuum, a busy neighbour on a shared host)
# weighs on every case alike, not only on the two sides of a pair: "3 relays ÷ 1" and "50 keys ÷
# 10,000" then compare cases measured over the same minutes. (Until 2026-12-07 each pair ran all
# its repeats in a row, and those two ratios compared cases measured minutes apart; drains of one
# case had varied by up to 1.53× within one run.) Odd rounds run the ordered side of each pair
# first, even rounds "none"; each case reports its median.
# Each case's drains, a line each as drain() prints it: rate, then the CPU a row of the machine,
# of PostgreSQL and of Kafka.
declare -A DRAINS=() RATE
PAIRS=()
for keys in $KEYS; do
        for n in $RELAYS; do PAIRS+=("$keys $n"); done
done
for rep in $(seq "$REPEAT"); do
        for i in "${!PAIRS[@]}"; do
                read -r keys n <<<"${PAIRS[$(((i + rep - 1) % ${#PAIRS[@]}))]}"
                for ordering in $([ $((rep % 2)) = 1 ] && echo key none || echo none key); do
                        out=$(drain "$keys" "$ordering" "$n" "scaleout$([ "$REPEAT" -gt 1 ] && echo "-r$rep")") ||
                                die "keys $keys, ordering \"$ordering\", $n relay(s): the drain failed"
                        read -r r c pc kc <<<"$out"
                        DRAINS[$keys-$ordering-$n]+="$out"$'\n'
                        say "round $rep, keys $keys, ordering \"$ordering\", $n relay(s): $(printf '%.0f' "$r") rows/s, CPU µs per row: machine $(printf '%.2f' "$c"), PostgreSQL $(printf '%.2f' "$pc"), Kafka $(printf '%.2f' "$kc")"
                done
        done
done
# The median of field $2 (1 the rate, 2 3 4 the CPU a row) over the drains of case $1.
med() { printf '%s' "${DRAINS[$1]}" | awk -v f="$2" '{ print $f }' | median; }
for case in "${!DRAINS[@]}"; do RATE[$case]=$(med "$case" 1); done

{
        echo "### Several relays on one table ($(date -u '+%Y-%m-%d %H:%M UTC'), \`bench/scaleout.sh\`, $ROWS rows per case$([ "$REPEAT" -gt 1 ] && echo ", median of $REPEAT rounds, in pairs"))"
        echo
        echo "| keys | relays | ordered (\"key\") rows/s | \"none\" rows/s | ordered ÷ none | ordered ÷ 1 relay ordered | machine CPU µs/row, ordered / \"none\" | PostgreSQL CPU µs/row, ordered / \"none\" | Kafka CPU µs/row, ordered / \"none\" |"
        echo "|---|---|---|---|---|---|---|---|---|"
        for keys in $KEYS; do
                for n in $RELAYS; do
                        o=${RATE[$keys-key-$n]} u=${RATE[$keys-none-$n]} o1=${RATE[$keys-key-${RELAYS%% *}]}
                        printf '| %s | %s | %.0f | %.0f | %.3f | %.3f | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f |\n' \
                                "$keys" "$n" "$o" "$u" "$(calc "$o / $u")" "$(calc "$o / $o1")" \
                                "$(med "$keys-key-$n" 2)" "$(med "$keys-none-$n" 2)" "$(med "$keys-key-$n" 3)" \
                                "$(med "$keys-none-$n" 3)" "$(med "$keys-key-$n" 4)" "$(med "$keys-none-$n" 4)"
                done
        done
        echo
        if [ "$KEYS" = "50 10000" ]; then
                for n in $RELAYS; do
                        printf -- '- %s relay(s): ordered at 50 keys ÷ ordered at 10,000 keys = %.3f\n' "$n" \
                                "$(calc "${RATE[50-key-$n]} / ${RATE[10000-key-$n]}")"
                done
        fi
        echo
        echo "Machine: $(nproc) cores, PostgreSQL, Kafka and the relays on it; durability as scripts/testbed.sh sets it."
} | tee "$RESULTS"
