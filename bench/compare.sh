#!/usr/bin/env bash
# compare.sh -- Two builds of the relay on one case, drained in turn on one test bed: is a change
# faster, and does the database do less for it?
#
#   bench/compare.sh REV
#
# Builds the working tree (BENCH_BUILD, as the other bench scripts do) and REV (any git revision,
# in a temporary worktree), starts one private PostgreSQL 15 + Kafka test bed
# (scripts/testbed.sh) with pg_stat_statements loaded, and drains BENCH_ROWS rows with each build
# in turn, BENCH_PAIRS times: the working tree first in odd pairs, REV first in even ones. Every
# drain starts from a fresh fill (bench/lib.sh: fill) and must leave every row in Kafka.
#
# On this 2-core machine drains of one build varied by up to 1.53x within one run (bench/README.md),
# so one drain each says nothing; a pair's two drains are minutes apart at most, and the table
# gives every pair's ratio and their median. With each drain go the CPU per row of the machine, of
# PostgreSQL and of Kafka (the rest is the relays' and the machine's own), and from
# pg_stat_statements (reset before each drain) the claims': how many, rows per claim, the server's
# execution time per row claimed and buffers per claim. Those show where a change moves
# the database's work even when the rates are lost in the noise.
#
# Environment: BENCH_PAIRS [6], BENCH_ROWS [1000000], BENCH_KEYS [50], BENCH_RELAYS [3],
# BENCH_ORDERING ["key"], BENCH_WARMUP_ROWS [200000] (one unmeasured drain per build first),
# BENCH_BATCH [the relay's default], BENCH_BUILD [build/bench], BENCH_DRAIN_TIMEOUT [360],
# BENCH_KEEP=1 keeps the test bed directory. Writes the table to bench/results-compare.md.
set -euo pipefail

SRCDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BENCH_BUILD:-$SRCDIR/build/bench}
REV=${1:?usage: bench/compare.sh REV}
PAIRS=${BENCH_PAIRS:-6}
ROWS=${BENCH_ROWS:-1000000}
KEYS=${BENCH_KEYS:-50}
N=${BENCH_RELAYS:-3}
ORDERING=${BENCH_ORDERING:-key}
WARMUP_ROWS=${BENCH_WARMUP_ROWS:-200000}
BATCH=${BENCH_BATCH:-}
DRAIN_TIMEOUT=${BENCH_DRAIN_TIMEOUT:-360}
RESULTS=$SRCDIR/bench/results-compare.md
NAME=compare
# shellcheck source=bench/lib.sh
. "$SRCDIR/bench/lib.sh"

REV_ID=$(git -C "$SRCDIR" rev-parse --short --verify "$REV^{commit}") || die "'$REV' is not a revision"
HEAD_ID=$(git -C "$SRCDIR" rev-parse --short HEAD)
[ -z "$(git -C "$SRCDIR" status --porcelain --untracked-files=no)" ] || HEAD_ID="$HEAD_ID+changes"

bench_build
HERE=$RELAY
OTHER_TREE=$(mktemp -d "/tmp/outbox-compare-$REV_ID.XXXXXX")
# The worktree goes with the test bed, whatever happens.
remove_worktree() { git -C "$SRCDIR" worktree remove --force "$OTHER_TREE" 2>/dev/null || rm -rf "$OTHER_TREE"; }
# set +e: under set -e, (exit $rc) with rc > 0 would end the trap before cleanup stops the test bed.
trap 'rc=$?; set +e; remove_worktree; (exit "$rc"); cleanup' EXIT
git -C "$SRCDIR" worktree add --detach "$OTHER_TREE" "$REV_ID" >&2 || die "cannot check out $REV_ID"
say "building $REV_ID"
meson setup "$OTHER_TREE/build" "$OTHER_TREE" -Dbuildtype=release -Dbench=enabled >/dev/null || die "meson setup of $REV_ID failed"
ninja -C "$OTHER_TREE/build" outbox-relay >&2 || die "building $REV_ID failed"
THERE=$OTHER_TREE/build/outbox-relay

bench_testbed
echo "shared_preload_libraries = 'pg_stat_statements'" >>"$TB/pg/data/postgresql.auto.conf"
chown --reference="$TB/pg/data" "$TB/pg/data/postgresql.auto.conf"
"$SRCDIR/scripts/testbed.sh" pg-stop "$TB" >&2 && "$SRCDIR/scripts/testbed.sh" pg-start "$TB" >&2 ||
        die "restarting PostgreSQL with pg_stat_statements failed"
q "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null

# The claims since the last reset: calls, rows per call, execution µs per row, buffers per call.
# A claim is any statement the relay sends with FOR UPDATE (every claim form in src/pg.c).
claim_stats() {
        q "SELECT sum(calls), round(sum(rows)::numeric / greatest(sum(calls), 1), 0),
                  round((sum(total_exec_time) * 1000 / greatest(sum(rows), 1))::numeric, 2),
                  round(sum(shared_blks_hit + shared_blks_read)::numeric / greatest(sum(calls), 1), 0)
             FROM pg_stat_statements WHERE query LIKE '%FOR UPDATE%' AND query NOT LIKE '%pg_stat_statements%'" |
                tr '|' ' '
}

# One measured drain with the relay binary $1:
# "rate cpu pg_cpu kafka_cpu calls rows_per_claim us_per_row buffers".
measure() {
        local out stats
        RELAY=$1
        q "SELECT pg_stat_statements_reset()" >/dev/null || exit 1
        out=$(drain "$KEYS" "$ORDERING" "$N" "$2") || exit 1
        stats=$(claim_stats) || exit 1
        echo "$out $stats"
}

for side in a b; do
        # In $(...): the warm-up's RELAY and ROWS stay in the subshell.
        out=$(if [ $side = a ]; then RELAY=$HERE; else RELAY=$THERE; fi
                ROWS=$WARMUP_ROWS drain "$KEYS" "$ORDERING" "$N" "warmup-$side") || die "the warm-up drain failed"
        read -r r _ <<<"$out"
        say "warm-up of $([ $side = a ] && echo "$HEAD_ID" || echo "$REV_ID"): $(printf '%.0f' "$r") rows/s (not measured)"
done

declare -a LINES RATIOS
for p in $(seq "$PAIRS"); do
        if [ $((p % 2)) = 1 ]; then
                a=$(measure "$HERE" "compare-p$p-a") || die "pair $p: a drain failed"
                b=$(measure "$THERE" "compare-p$p-b") || die "pair $p: a drain failed"
        else
                b=$(measure "$THERE" "compare-p$p-b") || die "pair $p: a drain failed"
                a=$(measure "$HERE" "compare-p$p-a") || die "pair $p: a drain failed"
        fi
        read -r ar ac apc akc an ark aus abuf <<<"$a"
        read -r br bc bpc bkc bn brk bus bbuf <<<"$b"
        ratio=$(calc "$ar / $br")
        RATIOS+=("$ratio")
        LINES+=("$(printf '| %s | %.0f | %.0f | %.3f | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | %s / %s | %s / %s | %s / %s | %s / %s |' \
                "$p" "$ar" "$br" "$ratio" "$ac" "$bc" "$apc" "$bpc" "$akc" "$bkc" "$an" "$bn" "$ark" "$brk" \
                "$aus" "$bus" "$abuf" "$bbuf")")
        say "pair $p: $HEAD_ID $(printf '%.0f' "$ar") rows/s, $REV_ID $(printf '%.0f' "$br") rows/s ($ratio)"
done
median=$(echo "${RATIOS[@]}" | median)
faster=$(printf '%s\n' "${RATIOS[@]}" | awk '$1 > 1 { n++ } END { print n + 0 }')

{
        echo "### $HEAD_ID against $REV_ID ($(date -u '+%Y-%m-%d %H:%M UTC'), \`bench/compare.sh\`, $ROWS rows, $KEYS keys, $N relay(s), ordering \"$ORDERING\")"
        echo
        echo "A is $HEAD_ID, B is $REV_ID; each pair drained in turn on one test bed (A first in odd pairs)."
        echo "Claims: pg_stat_statements over each drain."
        echo
        echo "| pair | A rows/s | B rows/s | A ÷ B | machine CPU µs/row, A / B | PostgreSQL CPU µs/row, A / B | Kafka CPU µs/row, A / B | claims, A / B | rows a claim, A / B | claim execution µs a row, A / B | buffers a claim, A / B |"
        echo "|---|---|---|---|---|---|---|---|---|---|---|"
        printf '%s\n' "${LINES[@]}"
        echo
        echo "A ÷ B: median $(printf '%.3f' "$median"); A faster in $faster of $PAIRS pairs."
        echo
        echo "Machine: $(nproc) cores, PostgreSQL, Kafka and the relays on it; durability as scripts/testbed.sh sets it."
} | tee "$RESULTS"
