#!/usr/bin/env bash
# run.sh -- The outbox-relay benchmark, one command: PostgreSQL ceiling, relay throughput, latency.
#
#   bench/run.sh
#
# Starts a private PostgreSQL 15 + Kafka test bed (scripts/testbed.sh) in a temporary directory and
# stops it on exit, whatever happens. Then:
#   1. ceiling: 1M outbox rows drained by pgbench running the relay's own claim + DELETE SQL
#      (read from src/pg.c), batch 2000 (the relay's default), one client, no Kafka; then, for reference only, the same
#      with a claim whose columns PostgreSQL may skip computing;
#   2. relay:   1M rows drained by the relay (release build) into Kafka: events/s, ratio to the
#      ceiling, CPU seconds per million events, peak RSS, where the time went;
#   3. latency: rows inserted at a steady 1,000/s for 60 s (issue 11) while the relay runs, consumed from
#      Kafka: p50/p90/p99/max, and every row must arrive;
#   4. reference: the same 1M rows drained by a minimal relay (bench/reference_relay.py), so the
#      relay's rate is shown as a ratio to it too;
#   5. rounds: 1-4 gave one figure each; the ceiling, the relay's drain and the reference relay
#      again, in turn, BENCH_ROUNDS - 1 times, and every ratio round by round with its median.
# Prints a markdown results table and writes it to bench/results-latest.md.
#
# Environment (defaults in brackets): BENCH_ROWS [1000000], BENCH_BATCH [2000, the relay's default],
# BENCH_LATENCY_SECONDS [60], BENCH_LATENCY_RATE [1000], BENCH_DRAIN_TIMEOUT [360] seconds,
# BENCH_WARMUP_MESSAGES [3000000] (sent to the broker before the relay's drain, so its JVM is warm; 0: none),
# BENCH_PIPELINES [the relay's default], BENCH_ROUNDS [3] (the ceiling, the relay's drain and the
# reference relay measured that many times in turn, the first round as above, each later one a
# drain only: one measurement of each swung the ratios by a third between runs), BENCH_BUILD
# [build/bench], BENCH_KEEP=1 keeps the test bed directory (logs) after the run.
set -euo pipefail

SRCDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BENCH_BUILD:-$SRCDIR/build/bench}
ROWS=${BENCH_ROWS:-1000000}
BATCH=${BENCH_BATCH:-2000}
PIPELINES=${BENCH_PIPELINES:-}
PIPELINES_LINE=${PIPELINES:+pipelines = $PIPELINES;}
KEYS=10000
LAT_SECONDS=${BENCH_LATENCY_SECONDS:-60}
LAT_RATE=${BENCH_LATENCY_RATE:-1000}
DRAIN_TIMEOUT=${BENCH_DRAIN_TIMEOUT:-360}
WARMUP_MESSAGES=${BENCH_WARMUP_MESSAGES:-3000000}
ROUNDS=${BENCH_ROUNDS:-3}
TOPIC=outbox-bench
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
RESULTS=$SRCDIR/bench/results-latest.md
CLK_TCK=$(getconf CLK_TCK)

TB=
RELAY_PID=
STAMP_PID=
RUN_START=$EPOCHREALTIME

say() { printf 'bench [%5.1fs]: %s\n' "$(awk -v a="$RUN_START" -v b="$EPOCHREALTIME" 'BEGIN{print b-a}')" "$*" >&2; }
die() {
        echo "bench: FAILED: $*" >&2
        if [ -n "$TB" ] && [ -s "$TB/relay.log" ]; then
                echo "bench: last lines of the relay's log ($TB/relay.log):" >&2
                tail -20 "$TB/relay.log" >&2
        fi
        exit 1
}

cleanup() {
        local rc=$?
        trap - EXIT INT TERM
        if [ -n "$RELAY_PID" ] && kill -0 "$RELAY_PID" 2>/dev/null; then
                kill -TERM "$RELAY_PID" 2>/dev/null || true
                for _ in $(seq 100); do kill -0 "$RELAY_PID" 2>/dev/null || break; sleep 0.1; done
                kill -KILL "$RELAY_PID" 2>/dev/null || true
        fi
        if [ -n "$STAMP_PID" ]; then
                for _ in $(seq 20); do kill -0 "$STAMP_PID" 2>/dev/null || break; sleep 0.1; done
                kill "$STAMP_PID" 2>/dev/null || true
        fi
        if [ -n "$TB" ] && [ -d "$TB" ]; then
                "$SRCDIR/scripts/testbed.sh" stop "$TB" >/dev/null 2>&1 || echo "bench: stopping the test bed failed" >&2
                if [ "${BENCH_KEEP:-0}" = 1 ] || [ $rc -ne 0 ]; then
                        echo "bench: test bed directory kept: $TB" >&2
                else
                        rm -rf "$TB"
                fi
        fi
        exit $rc
}
trap cleanup EXIT
trap 'echo "bench: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
trap 'exit 130' INT
trap 'exit 143' TERM

# Arithmetic on decimals (bash has integers only).
calc() { awk "BEGIN { printf \"%.6f\", $1 }"; }
fmt() { awk -v v="$2" "BEGIN { if (v ~ /^-?[0-9.]+\$/) printf \"$1\", v; else printf \"%s\", v }"; }
# "1234567" -> "1,234,567"
thousands() { printf '%s' "$1" | sed -e ':a' -e 's/\([0-9]\)\([0-9]\{3\}\)\($\|[,.]\)/\1,\2\3/; ta'; }

# utime + stime of a process in clock ticks (fields 14 and 15 of /proc/PID/stat, counted after
# the parenthesised command name, which may contain spaces).
proc_ticks() {
        local s
        s=$(cat "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
        s=${s##*) }
        # shellcheck disable=SC2086
        set -- $s
        echo $(( ${12} + ${13} ))
}
# Busy and total ticks of the whole machine (/proc/stat "cpu" line).
machine_ticks() {
        awk '/^cpu / { busy = $2 + $3 + $4 + $7 + $8 + $9; total = busy + $5 + $6; print busy, total; exit }' /proc/stat
}
vm_kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }

q() { psql -X -A -t -q -v ON_ERROR_STOP=1 -c "$1"; }

# A string constant from src/pg.c, as the relay sends it: C literals joined and unescaped,
# printf's %% and the table's %s resolved.
c_sql() {
        awk -v name="$1" '
                index($0, "static const char " name "[] =") { on = 1 }
                on {
                        line = $0
                        while (match(line, /"([^"\\]|\\.)*"/)) {
                                out = out substr(line, RSTART + 1, RLENGTH - 2)
                                line = substr(line, RSTART + RLENGTH)
                        }
                        if ($0 ~ /;[[:space:]]*$/) exit
                }
                END { print out }' "$SRCDIR/src/pg.c" |
                sed -e 's/\\"/"/g' -e 's/\\\\/\\/g' -e 's/%%/\x01/g' -e 's/%s/outbox/g' -e 's/\x01/%/g'
}

fill() {
        local what=$1 t0 t1
        t0=$EPOCHREALTIME
        timeout 600 psql -X -q -v ON_ERROR_STOP=1 -v rows="$ROWS" -v keys="$KEYS" -v topic="$TOPIC" <<'SQL' ||
TRUNCATE outbox;
-- 200-byte payloads, 10,000 distinct keys, 3 string headers, one statement.
INSERT INTO outbox (topic, key, payload, headers)
SELECT :'topic', 'key-' || (g % :keys),
       convert_to(rpad('row ' || g || ' ', 200, 'abcdefghijklmnopqrstuvwxyz0123456789'), 'UTF8'),
       jsonb_build_object('trace-id', md5(g::text), 'source', 'outbox-bench', 'type', 'order.created')
  FROM generate_series(1, :rows) g;
VACUUM ANALYZE outbox;
SQL
                die "filling the outbox failed"
        t1=$EPOCHREALTIME
        [ "$(q 'SELECT count(*) FROM outbox')" = "$ROWS" ] || die "the outbox does not hold $ROWS rows after the fill"
        say "$what: $ROWS rows in $(fmt %.1f "$(calc "$t1 - $t0")")s (INSERT … SELECT generate_series + VACUUM ANALYZE)"
}

# ---- 0. build and test bed ---------------------------------------------------------------------

[ "$ROWS" -ge "$BATCH" ] || die "BENCH_ROWS must be at least BENCH_BATCH"
"$SRCDIR/scripts/install-deps.sh" >&2 || die "scripts/install-deps.sh failed"
[ -x "$PGBIN/pgbench" ] || die "$PGBIN/pgbench not found"

if [ -f "$BUILD/build.ninja" ]; then
        meson configure "$BUILD" -Dbuildtype=release -Dbench=enabled >/dev/null || die "meson configure failed"
else
        meson setup "$BUILD" "$SRCDIR" -Dbuildtype=release -Dbench=enabled >/dev/null || die "meson setup failed"
fi
ninja -C "$BUILD" outbox-relay bench/latency bench/bench-util >&2 || die "building failed"
RELAY=$BUILD/outbox-relay
LATENCY=$BUILD/bench/latency
UTIL=$BUILD/bench/bench-util

TB=$(mktemp -d /tmp/outbox-bench.XXXXXX)
say "starting the test bed in $TB"
"$SRCDIR/scripts/testbed.sh" start "$TB" >&2 || die "the test bed did not start"
# shellcheck disable=SC1091
. "$TB/env"
PM_PID=$(head -1 "$TB/pg/data/postmaster.pid")
KAFKA_PID=$(cat "$TB/kafka/pid")

"$UTIL" create-topic --topic "$TOPIC" --partitions 3 --warm-idempotence || die "creating topic '$TOPIC' failed"

# The machine is measured, not just the relay: how busy is it before we start (idle test bed
# included)? Other work on the machine shows up here and in the phases' "machine busy".
read -r M0_BUSY M0_TOTAL < <(machine_ticks)
sleep 3
read -r M1_BUSY M1_TOTAL < <(machine_ticks)
IDLE_BUSY=$(calc "100 * ($M1_BUSY - $M0_BUSY) / ($M1_TOTAL - $M0_TOTAL)")
say "machine busy before the measurements: $(fmt %.0f "$IDLE_BUSY") % of $(nproc) cores"

# ---- 1. the PostgreSQL ceiling -----------------------------------------------------------------

CLAIM=$(c_sql claim_fmt)
DELETE=$(c_sql delete_fmt)
case "$CLAIM" in "SELECT o.id,"*"ORDER BY o.id LIMIT \$1 FOR UPDATE SKIP LOCKED") ;;
*) die "could not read the claim query from src/pg.c (claim_fmt), got: $CLAIM" ;; esac
[ "$DELETE" = 'DELETE FROM outbox WHERE ctid = ANY($1::tid[])' ] ||
        die "could not read the finish query from src/pg.c (delete_fmt), got: $DELETE"
# $2 is the claim floor (docs/claim.md, "The claim floor"): 0 here, from the start of the index,
# as a plain SQL claim reads it.
CLAIM=${CLAIM//\$2/0}

# Claim and finish as separate statements, like the relay. pgbench -M extended sends :lim and
# :ids as parameters ($1) of unnamed statements, as the relay does. The claim's columns feed
# count(s.*) so PostgreSQL computes every one of them (header expansion included); with
# array_agg(id) alone the planner drops the unused columns (EXPLAIN VERBOSE shows NULLs): that
# lighter variant runs second, for reference only.
pgbench_script() {
        echo "\\set lim $BATCH"
        echo "BEGIN;"
        echo "$1 \\gset"
        echo "${DELETE//\$1/:ids};"
        echo "COMMIT;"
}
pgbench_script "SELECT array_agg(s.ctid) AS ids, count(s.*) AS claimed FROM (${CLAIM//\$1/:lim}) s" >"$TB/ceiling.pgbench"
pgbench_script "SELECT array_agg(ctid) AS ids FROM (${CLAIM//\$1/:lim}) s" >"$TB/ceiling-ids-only.pgbench"
TXNS=$(( (ROWS + BATCH - 1) / BATCH ))

# Drains a freshly filled outbox with one pgbench script; sets P_ROWS, P_SECS (pgbench's clock),
# P_WALL, P_RATE, P_CLAIM_MS, P_DELETE_MS (per batch) and P_BUSY (machine CPU busy, %).
run_pgbench() {
        local name=$1 out=$TB/$1.out t0 t1 left tps txns b0 n0 b1 n1
        fill "$name fill"
        read -r b0 n0 < <(machine_ticks)
        t0=$EPOCHREALTIME
        timeout 600 "$PGBIN/pgbench" -n -M extended -r -c 1 -t "$TXNS" -f "$TB/$name.pgbench" >"$out" 2>&1 ||
                { cat "$out" >&2; die "pgbench ($name) failed"; }
        t1=$EPOCHREALTIME
        read -r b1 n1 < <(machine_ticks)
        left=$(q 'SELECT count(*) FROM outbox')
        [ "$left" = 0 ] || die "pgbench ($name) left $left rows in the outbox"
        grep -q "number of failed transactions: 0 " "$out" || { cat "$out" >&2; die "pgbench ($name) reports failed transactions"; }
        tps=$(awk '/^tps = / { print $3 }' "$out")
        txns=$(awk -F'[ /]+' '/actually processed/ { print $(NF-1) }' "$out")
        P_ROWS=$((ROWS - left))
        P_SECS=$(calc "$txns / $tps")
        P_WALL=$(calc "$t1 - $t0")
        P_RATE=$(calc "$P_ROWS / $P_SECS")
        P_CLAIM_MS=$(awk '/^ +[0-9.]+ +[0-9]+ +SELECT array_agg/ { print $1 }' "$out")
        P_DELETE_MS=$(awk '/^ +[0-9.]+ +[0-9]+ +DELETE/ { print $1 }' "$out")
        P_BUSY=$(calc "100 * ($b1 - $b0) / ($n1 - $n0)")
        say "$name: $P_ROWS rows in $(fmt %.3f "$P_SECS")s (pgbench's clock; wall $(fmt %.3f "$P_WALL")s) = $(fmt %.0f "$P_RATE") rows/s; claim $P_CLAIM_MS ms, delete $P_DELETE_MS ms per batch"
}

run_pgbench ceiling
CEIL_ROWS=$P_ROWS CEIL_SECS=$P_SECS CEIL_WALL=$P_WALL CEIL_RATE=$P_RATE
CEIL_CLAIM_MS=$P_CLAIM_MS CEIL_DELETE_MS=$P_DELETE_MS CEIL_BUSY=$P_BUSY
run_pgbench ceiling-ids-only
IDS_RATE=$P_RATE IDS_CLAIM_MS=$P_CLAIM_MS IDS_DELETE_MS=$P_DELETE_MS

# ---- 2. relay throughput -----------------------------------------------------------------------

CONF=$TB/relay.conf
cat >"$CONF" <<CONF
postgres = { conninfo = "host=$PGHOST port=$PGPORT dbname=$PGDATABASE user=$PGUSER"; };
kafka = { bootstrap_servers = "$KAFKA_BOOTSTRAP"; };
relay = { batch_size = $BATCH; poll_interval = "1s"; finish = "delete"; status_interval = "2s"; $PIPELINES_LINE };
log = { level = "info"; };
http = { listen = "127.0.0.1:0"; };
CONF
"$RELAY" --check-config -c "$CONF" >/dev/null || die "the relay rejects $CONF"
RELAY_VERSION=$("$RELAY" --version)

# The broker is a JVM: fresh, it compiles its produce path under the first few million messages,
# and a drain measured then pays for it while the reference relay, later, finds it warmer
# (bench/README.md, "The set-up", has the figures). So BENCH_WARMUP_MESSAGES messages shaped like
# the relay's go to a side topic first (bench-util warm-broker; 0: none).
if [ "$WARMUP_MESSAGES" -gt 0 ]; then
        "$UTIL" create-topic --topic "$TOPIC-broker-warmup" --partitions 3 || die "creating topic '$TOPIC-broker-warmup' failed"
        "$UTIL" warm-broker --topic "$TOPIC-broker-warmup" --messages "$WARMUP_MESSAGES" || die "warming the broker failed"
fi

fill "relay fill"
[ "$("$UTIL" watermarks --topic "$TOPIC")" = 0 ] || die "topic '$TOPIC' is not empty before the relay starts"
KAFKA_T0=$(proc_ticks "$KAFKA_PID")
read -r M0_BUSY M0_TOTAL < <(machine_ticks)

# Each log line gets a wall-clock stamp ($EPOCHREALTIME: no fork per line).
stamp() { local l; while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done; }
exec {LOGFD}> >(stamp >"$TB/relay.log")
STAMP_PID=$!
RELAY_T0=$EPOCHREALTIME
"$RELAY" -c "$CONF" 2>&"$LOGFD" >"$TB/relay.stdout" &
RELAY_PID=$!
exec {LOGFD}>&- # the stamper ends when the relay closes its stderr
say "relay started (pid $RELAY_PID); draining $ROWS rows, at most ${DRAIN_TIMEOUT}s"
"$UTIL" wait-drain --pid "$RELAY_PID" --timeout "$DRAIN_TIMEOUT" --interval-ms 200 \
        --sample-app outbox-relay --sample-ms 20 >"$TB/drain.out" || die "the relay did not drain the outbox"
DRAINED_US=$(awk -F= '$1 == "drained_at_us" { print $2 }' "$TB/drain.out")
# Read right away: the relay's CPU so far and its database session's and the broker's.
RELAY_TICKS_DRAIN=$(proc_ticks "$RELAY_PID")
# Every backend of the relay: its pipelines' and the one that listens and looks.
BACKEND_TICKS=0
for p in $(q "SELECT pid FROM pg_stat_activity WHERE application_name = 'outbox-relay'"); do
        BACKEND_TICKS=$((BACKEND_TICKS + $(proc_ticks "$p")))
done
KAFKA_T1=$(proc_ticks "$KAFKA_PID")
read -r M1_BUSY M1_TOTAL < <(machine_ticks)

RELAY_SECS=$(calc "($DRAINED_US / 1e6) - $RELAY_T0")
RELAY_RATE=$(calc "$ROWS / $RELAY_SECS")
RATIO=$(calc "$RELAY_RATE / $CEIL_RATE")
RELAY_CPU=$(calc "$RELAY_TICKS_DRAIN / $CLK_TCK")
RELAY_CPU_PER_M=$(calc "$RELAY_CPU * 1000000 / $ROWS")
BACKEND_CPU=$(calc "$BACKEND_TICKS / $CLK_TCK")
BACKEND_CPU_PER_M=$(calc "$BACKEND_CPU * 1000000 / $ROWS")
KAFKA_CPU=$(calc "($KAFKA_T1 - $KAFKA_T0) / $CLK_TCK")
MACHINE_BUSY=$(calc "100 * ($M1_BUSY - $M0_BUSY) / ($M1_TOTAL - $M0_TOTAL)")
MACHINE_CPU=$(calc "($M1_BUSY - $M0_BUSY) / $CLK_TCK")
OTHER_CPU=$(calc "$MACHINE_CPU - $RELAY_CPU - $BACKEND_CPU - $KAFKA_CPU")
READY_AT=$(awk '$2 == "<6>ready" { print $1; exit }' "$TB/relay.log")
READY_S=$( [ -n "$READY_AT" ] && calc "$READY_AT - $RELAY_T0" || echo "?")
# The first summary line follows the first batch.
FIRST_AT=$(awk '$2 == "<6>summary:" { print $1; exit }' "$TB/relay.log")
FIRST_S=$( [ -n "$FIRST_AT" ] && calc "$FIRST_AT - $RELAY_T0" || echo "?")
# Steady rate: between the first and the last periodic summary line of the drain.
read -r STEADY_RATE STEADY_SPAN < <(awk -v end="$(calc "$DRAINED_US / 1e6")" '
        $2 == "<6>summary:" && $1 <= end { n = $4 + 0; if (!seen) { t0 = $1; n0 = n; seen = 1 } t1 = $1; n1 = n }
        END { if (t1 > t0) printf "%.0f %.1f\n", (n1 - n0) / (t1 - t0), t1 - t0; else print "? 0" }' "$TB/relay.log")
SAMPLES=$(awk -F= '$1 ~ /^sample_/ { s += $2 } END { print s + 0 }' "$TB/drain.out")
share() { calc "100 * $(awk -F= -v k="sample_$1" '$1 == k { print $2 }' "$TB/drain.out") / $SAMPLES"; }
S_CLAIM=$(share active_claim); S_FINISH=$(share active_finish); S_OTHER=$(share active_other)
S_IDLETX=$(share idle_in_transaction); S_IDLE=$(share idle); S_NONE=$(share no_session)
KAFKA_MSGS=$("$UTIL" watermarks --topic "$TOPIC")
say "relay: $ROWS rows in $(fmt %.3f "$RELAY_SECS")s = $(fmt %.0f "$RELAY_RATE") events/s (ratio $(fmt %.3f "$RATIO")); $KAFKA_MSGS messages in '$TOPIC'"

# ---- 3. latency at a steady rate, the relay still running --------------------------------------

say "latency: $LAT_RATE rows/s for ${LAT_SECONDS}s"
read -r M0_BUSY M0_TOTAL < <(machine_ticks)
timeout $((LAT_SECONDS + 120)) "$LATENCY" --topic "$TOPIC" --seconds "$LAT_SECONDS" --rate "$LAT_RATE" \
        --per-tx 10 --keys "$KEYS" --grace 30 --trace "$TB/latency.trace" >"$TB/latency.out" || LAT_RC=$?
LAT_RC=${LAT_RC:-0}
[ "$LAT_RC" = 0 ] || [ "$LAT_RC" = 2 ] || die "the latency tool failed (exit $LAT_RC)"
lat() { awk -F= -v k="$1" '$1 == k { print $2 }' "$TB/latency.out"; }
read -r M1_BUSY M1_TOTAL < <(machine_ticks)
LAT_BUSY=$(calc "100 * ($M1_BUSY - $M0_BUSY) / ($M1_TOTAL - $M0_TOTAL)")

# ---- stop the relay, reading its CPU and peak memory just before --------------------------------

kill -0 "$RELAY_PID" 2>/dev/null || die "the relay exited during the run"
RELAY_TICKS_END=$(proc_ticks "$RELAY_PID")
RELAY_HWM=$(vm_kib "$RELAY_PID" VmHWM)
RELAY_RSS=$(vm_kib "$RELAY_PID" VmRSS)
t0=$EPOCHREALTIME
kill -TERM "$RELAY_PID"
for _ in $(seq 300); do kill -0 "$RELAY_PID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$RELAY_PID" 2>/dev/null && die "the relay did not stop within 30s of SIGTERM"
RELAY_RC=0
wait "$RELAY_PID" || RELAY_RC=$?
RELAY_PID=
STOP_S=$(calc "$EPOCHREALTIME - $t0")
for _ in $(seq 50); do [ -n "$STAMP_PID" ] && kill -0 "$STAMP_PID" 2>/dev/null || break; sleep 0.1; done
[ "$RELAY_RC" = 0 ] || die "the relay exited with status $RELAY_RC after SIGTERM (expected 0)"
RELAY_EVENTS_END=$((ROWS + $(lat inserted)))
RELAY_CPU_END=$(calc "$RELAY_TICKS_END / $CLK_TCK")
RELAY_CPU_LAT=$(calc "($RELAY_TICKS_END - $RELAY_TICKS_DRAIN) / $CLK_TCK")
N_ERR=$(grep -c ' <[0-3]>' "$TB/relay.log" || true)
N_WARN=$(grep -c ' <4>' "$TB/relay.log" || true)
LOG_ISSUES=$( (grep ' <[0-4]>' "$TB/relay.log" || true) | cut -d' ' -f2- | sed -e 's/[0-9]\{3,\}/N/g' | sort | uniq -c | sort -rn | head -5 |
        awk '{ c = $1; $1 = ""; sub(/^ /, ""); printf "%s%dx `%s`", (NR > 1 ? "; " : ""), c, $0 }')

# ---- 4. the reference relay on the same data --------------------------------------------------

# A minimal relay as a team would write it (bench/reference_relay.py: SKIP LOCKED claim, produce,
# flush, DELETE, COMMIT; the same librdkafka settings), on a fresh fill into its own topic.
# Drains a fresh fill into topic $1 with the reference relay; sets REF_SECS, REF_RATE, REF_CPU.
reference_drain() {
        local topic=$1 t0 t1 left msgs main=$TOPIC
        "$UTIL" create-topic --topic "$topic" --partitions 3 || die "creating topic '$topic' failed"
        TOPIC=$topic
        fill "reference relay fill"
        TOPIC=$main
        say "reference relay: draining $ROWS rows"
        t0=$EPOCHREALTIME
        TIMEFORMAT='%3U %3S'
        { time timeout "$DRAIN_TIMEOUT" /usr/bin/python3 "$SRCDIR/bench/reference_relay.py" "$BATCH" >"$TB/reference-$topic.log" 2>&1; } \
                2>"$TB/reference.time" || { tail -5 "$TB/reference-$topic.log" >&2; die "the reference relay failed"; }
        t1=$EPOCHREALTIME
        left=$(q 'SELECT count(*) FROM outbox')
        [ "$left" = 0 ] || die "the reference relay left $left rows in the outbox"
        msgs=$("$UTIL" watermarks --topic "$topic")
        [ "$msgs" -ge "$ROWS" ] || die "only $msgs of $ROWS rows reached '$topic' from the reference relay"
        REF_SECS=$(calc "$t1 - $t0")
        REF_RATE=$(calc "$ROWS / $REF_SECS")
        REF_CPU=$(awk '{ printf "%.3f", $1 + $2 }' "$TB/reference.time")
}
reference_drain "$TOPIC-reference"
REF_CPU_PER_M=$(calc "$REF_CPU * 1000000 / $ROWS")
REF_RATIO=$(calc "$RELAY_RATE / $REF_RATE")
say "reference relay: $ROWS rows in $(fmt %.3f "$REF_SECS")s = $(fmt %.0f "$REF_RATE") events/s; relay ÷ reference $(fmt %.3f "$REF_RATIO")"

# ---- 5. more rounds ------------------------------------------------------------------------------

# Round 1 is the one above; each later round drains fresh fills with pgbench, the relay (started
# afresh, the same settings, stopped once the table is empty) and the reference relay, in turn.
R_CEIL=("$CEIL_RATE") R_RELAY=("$RELAY_RATE") R_CPU=("$RELAY_CPU_PER_M") R_REF=("$REF_RATE")
# reference_drain sets REF_*: round 1's are the ones the table shows beside round 1's relay.
REF1_SECS=$REF_SECS REF1_RATE=$REF_RATE REF1_CPU=$REF_CPU
for ((round = 2; round <= ROUNDS; round++)); do
        say "round $round of $ROUNDS"
        run_pgbench ceiling
        R_CEIL+=("$P_RATE")
        "$UTIL" create-topic --topic "$TOPIC-r$round" --partitions 3 || die "creating topic '$TOPIC-r$round' failed"
        MAIN_TOPIC=$TOPIC TOPIC=$TOPIC-r$round
        fill "relay fill, round $round"
        TOPIC=$MAIN_TOPIC
        t0=$EPOCHREALTIME
        "$RELAY" -c "$CONF" 2>"$TB/relay-r$round.log" >/dev/null &
        RELAY_PID=$!
        "$UTIL" wait-drain --pid "$RELAY_PID" --timeout "$DRAIN_TIMEOUT" --interval-ms 200 >"$TB/drain-r$round.out" ||
                die "the relay did not drain the outbox (round $round)"
        t1=$(awk -F= '$1 == "drained_at_us" { printf "%.6f", $2 / 1e6 }' "$TB/drain-r$round.out")
        ticks=$(proc_ticks "$RELAY_PID")
        kill -TERM "$RELAY_PID"
        wait "$RELAY_PID" || die "the relay did not exit 0 on SIGTERM (round $round)"
        RELAY_PID=
        [ "$("$UTIL" watermarks --topic "$TOPIC-r$round")" -ge "$ROWS" ] || die "rows missing in '$TOPIC-r$round'"
        R_RELAY+=("$(calc "$ROWS / ($t1 - $t0)")")
        R_CPU+=("$(calc "$ticks / $CLK_TCK * 1000000 / $ROWS")")
        reference_drain "$TOPIC-reference-r$round"
        R_REF+=("$REF_RATE")
        say "round $round: ceiling $(fmt %.0f "${R_CEIL[-1]}"), relay $(fmt %.0f "${R_RELAY[-1]}"), reference $(fmt %.0f "$REF_RATE") rows/s"
done
REF_SECS=$REF1_SECS REF_RATE=$REF1_RATE REF_CPU=$REF1_CPU
# Each round's figure with format $1, joined by " / ", and their median: "a / b / c (median m)".
rounds() {
        local f=$1 m
        shift
        m=$(printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
        printf '%s' "$(for v in "$@"; do fmt "$f" "$v"; echo; done | paste -sd/ - | sed 's|/| / |g') (median $(fmt "$f" "$m"))"
}
R_RATIO=() R_REF_RATIO=()
for ((i = 0; i < ROUNDS; i++)); do
        R_RATIO+=("$(calc "${R_RELAY[i]} / ${R_CEIL[i]}")")
        R_REF_RATIO+=("$(calc "${R_RELAY[i]} / ${R_REF[i]}")")
done

# ---- results -----------------------------------------------------------------------------------

PG_VERSION=$(q 'SHOW server_version')
PG_SETTINGS=$(q "SELECT string_agg(name || '=' || current_setting(name), ', ' ORDER BY ord)
                 FROM unnest(ARRAY['fsync', 'synchronous_commit', 'full_page_writes', 'shared_buffers',
                                   'wal_level', 'max_wal_size']) WITH ORDINALITY AS s(name, ord)")
CPU_MODEL=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
MEM_GIB=$(awk '/^MemTotal/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)
OS=$(. /etc/os-release && echo "$PRETTY_NAME")
GIT_REV=$(git -C "$SRCDIR" rev-parse --short HEAD 2>/dev/null || echo unknown)
GIT_DIRTY=$(git -C "$SRCDIR" status --porcelain 2>/dev/null | wc -l)
LAT_OK="every row arrived"
[ "$(lat missing)" = 0 ] || LAT_OK="**$(lat missing) rows missing**"

{
        echo "## outbox-relay benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
        echo
        echo "| machine and setup | |"
        echo "|---|---|"
        echo "| CPU | $(nproc) × $CPU_MODEL (nproc $(nproc)), $MEM_GIB GiB RAM, $OS, Linux $(uname -r) |"
        echo "| PostgreSQL | $PG_VERSION, private instance over TCP on 127.0.0.1; $PG_SETTINGS (durability off: test settings, not production) |"
        echo "| Kafka | $KAFKA_VERSION, one KRaft broker (combined mode, JVM -Xmx512m) on the same machine; topic \`$TOPIC\`: 3 partitions, replication factor 1; warmed with $(thousands "$WARMUP_MESSAGES") messages like the relay's (\`bench-util warm-broker\`) before the relay's drain |"
        echo "| relay | \`$RELAY_VERSION\`, git $GIT_REV ($GIT_DIRTY uncommitted paths in the tree), buildtype=release; batch_size=$BATCH, finish=delete, poll_interval=1s, status_interval=2s, librdkafka defaults of the relay (acks=all, idempotence, linger.ms=5) |"
        echo "| data | $(thousands "$ROWS") rows, 200-byte payloads, $(thousands $KEYS) distinct keys, 3 string headers per row |"
        echo "| machine load | $(fmt %.0f "$IDLE_BUSY") % CPU busy over 3 s before the measurements (idle test bed and anything else running on the machine) |"
        echo
        echo "| measurement | result |"
        echo "|---|---|"
        echo "| PostgreSQL ceiling: claim + DELETE + COMMIT via pgbench, 1 client, batch $BATCH, no Kafka | **$(fmt %.0f "$CEIL_RATE") rows/s** ($(thousands "$CEIL_ROWS") rows in $(fmt %.3f "$CEIL_SECS") s by pgbench's clock, $(fmt %.3f "$CEIL_WALL") s wall; per batch: claim $CEIL_CLAIM_MS ms, DELETE $CEIL_DELETE_MS ms; machine CPU busy $(fmt %.0f "$CEIL_BUSY") %) |"
        echo "| for reference only: the same, but \`SELECT array_agg(id) FROM (claim) s\`, so the planner skips computing the claim's other columns (header expansion, timestamp): not the relay's work | $(fmt %.0f "$IDS_RATE") rows/s (per batch: claim $IDS_CLAIM_MS ms, DELETE $IDS_DELETE_MS ms) |"
        echo "| relay: drain $(thousands "$ROWS") rows into Kafka, from process start to empty table | **$(fmt %.0f "$RELAY_RATE") events/s** ($(fmt %.3f "$RELAY_SECS") s; ready after $(fmt %.3f "$READY_S") s, first batch of $BATCH finished after $(fmt %.3f "$FIRST_S") s; $(thousands "$KAFKA_MSGS") messages in the topic) |"
        if [ "$STEADY_RATE" = "?" ]; then
                echo "| relay steady rate | not measured: fewer than two summary lines during the drain |"
        else
                echo "| relay steady rate (between its first and last summary line, $STEADY_SPAN s apart) | $STEADY_RATE events/s |"
        fi
        echo "| relay ÷ ceiling | **$(fmt %.3f "$RATIO")** |"
        echo "| reference relay (\`bench/reference_relay.py\`: Python, psycopg2 + confluent-kafka on the same librdkafka; SKIP LOCKED claim, produce, flush, DELETE, COMMIT; batch $BATCH), same data, own topic | $(fmt %.0f "$REF_RATE") events/s ($(fmt %.3f "$REF_SECS") s from start to exit, CPU $(fmt %.2f "$REF_CPU") s = $(fmt %.2f "$REF_CPU_PER_M") s per million events) |"
        echo "| relay ÷ reference relay | **$(fmt %.3f "$REF_RATIO")** |"
        echo "| relay CPU per million events (utime+stime at drain end) | **$(fmt %.2f "$RELAY_CPU_PER_M") s** ($(fmt %.2f "$RELAY_CPU") s for $(thousands "$ROWS")); before stop: $(fmt %.2f "$RELAY_CPU_END") s for $(thousands "$RELAY_EVENTS_END") events incl. the latency phase |"
        echo "| relay's PostgreSQL backends' CPU per million events (its pipelines' sessions and its own, at drain end) | **$(fmt %.2f "$BACKEND_CPU_PER_M") s** |"
        echo "| relay peak RSS (VmHWM before stop) | **$(fmt %.1f "$(calc "$RELAY_HWM / 1024")") MiB** (VmRSS $(fmt %.1f "$(calc "$RELAY_RSS / 1024")") MiB) |"
        echo "| CPU during the drain ($(fmt %.1f "$RELAY_SECS") s wall, $(nproc) cores) | relay $(fmt %.2f "$RELAY_CPU") s, its PostgreSQL backends $(fmt %.2f "$BACKEND_CPU") s, Kafka broker $(fmt %.2f "$KAFKA_CPU") s, everything else $(fmt %.2f "$OTHER_CPU") s; machine busy $(fmt %.0f "$MACHINE_BUSY") % |"
        echo "| relay's pipelines' database sessions during the drain ($SAMPLES samples of pg_stat_activity, every 20 ms, one per session) | claim running $(fmt %.1f "$S_CLAIM") %, DELETE running $(fmt %.1f "$S_FINISH") %, other statement $(fmt %.1f "$S_OTHER") %, idle in transaction (publishing to Kafka) $(fmt %.1f "$S_IDLETX") %, idle $(fmt %.1f "$S_IDLE") %, no session $(fmt %.1f "$S_NONE") % |"
        echo "| latency at $LAT_RATE events/s for ${LAT_SECONDS} s (10 rows per insert transaction), insert → consumed | $(lat received) of $(lat inserted) received, $LAT_OK, $(lat duplicates) duplicates; inserter fell behind schedule by up to $(lat max_behind_ms) ms; relay CPU $(fmt %.2f "$RELAY_CPU_LAT") s; machine busy $(fmt %.0f "$LAT_BUSY") % |"
        echo "| latency p50 / p90 / p99 / max | **$(lat p50_ms) / $(lat p90_ms) / $(lat p99_ms) / $(lat max_ms) ms** (min $(lat min_ms), mean $(lat mean_ms), p99.9 $(lat p999_ms)) |"
        echo "| of which the insert transaction itself, p50 / p99 / p99.9 / max | $(lat insert_p50_ms) / $(lat insert_p99_ms) / $(lat insert_p999_ms) / $(lat insert_max_ms) ms (every row's figures in latency.trace, kept with BENCH_KEEP=1) |"
        echo "| relay stop (SIGTERM → exit $RELAY_RC) | $(fmt %.3f "$STOP_S") s |"
        echo "| relay log (this drain and the latency phase) | $N_ERR errors, $N_WARN warnings${LOG_ISSUES:+: $LOG_ISSUES} |"
        if [ "$ROUNDS" -gt 1 ]; then
                echo "| **$ROUNDS rounds** (the first is the one above; each later one: ceiling, relay drain, reference relay, in turn, fresh fills) | |"
                echo "| ceiling rows/s, round by round | $(rounds %.0f "${R_CEIL[@]}") |"
                echo "| relay drain events/s | $(rounds %.0f "${R_RELAY[@]}") |"
                echo "| reference relay events/s | $(rounds %.0f "${R_REF[@]}") |"
                echo "| relay ÷ ceiling | **$(rounds %.3f "${R_RATIO[@]}")** |"
                echo "| relay ÷ reference relay | **$(rounds %.3f "${R_REF_RATIO[@]}")** |"
                echo "| relay CPU per million events (s) | **$(rounds %.2f "${R_CPU[@]}")** |"
        fi
} >"$TB/results.md"

cp "$TB/results.md" "$RESULTS"
cat "$TB/results.md"
say "results written to ${RESULTS#"$SRCDIR"/}"
[ "$(lat missing)" = 0 ] || die "$(lat missing) of $(lat inserted) latency rows never arrived in Kafka"
[ "$KAFKA_MSGS" -ge "$ROWS" ] || die "only $KAFKA_MSGS of $ROWS rows reached the topic"
