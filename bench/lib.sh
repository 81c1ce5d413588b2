# lib.sh -- What the bench scripts but run.sh share: messages, the release build, a
# private test bed removed on exit, the outbox fill, one timed drain, stopping the relays.
# Sourced, with NAME (the script's name in messages), SRCDIR and BUILD set first.
# shellcheck shell=bash

RUN_START=$EPOCHREALTIME
TB=
PIDS=() # relays started by the script; stop_relays stops them

say() { printf '%s [%6.1fs]: %s\n' "$NAME" "$(awk -v a="$RUN_START" -v b="$EPOCHREALTIME" 'BEGIN{print b-a}')" "$*" >&2; }
die() { echo "$NAME: FAILED: $*" >&2; exit 1; }
calc() { awk "BEGIN { printf \"%.6f\", $1 }"; }
q() { psql -X -A -t -q -v ON_ERROR_STOP=1 -c "$1"; }

# SIGTERM to every relay in PIDS, then up to 30 s each before SIGKILL.
stop_relays() {
        local p
        for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
        for p in "${PIDS[@]}"; do
                for _ in $(seq 300); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
                kill -KILL "$p" 2>/dev/null || true
                wait "$p" 2>/dev/null || true
        done
        PIDS=()
}
cleanup() {
        local rc=$?
        trap - EXIT INT TERM
        # Relays of a drain that was cut short (drain() runs in $(...), its PIDS are not ours).
        if [ -n "$TB" ] && [ -f "$TB/drain.pids" ]; then mapfile -t -O "${#PIDS[@]}" PIDS <"$TB/drain.pids"; fi
        stop_relays
        if [ -n "$TB" ] && [ -d "$TB" ]; then
                "$SRCDIR/scripts/testbed.sh" stop "$TB" >/dev/null 2>&1 || echo "$NAME: stopping the test bed failed" >&2
                if [ "${BENCH_KEEP:-0}" = 1 ] || [ $rc -ne 0 ]; then echo "$NAME: test bed kept: $TB" >&2; else rm -rf "$TB"; fi
        fi
        exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The release build of the relay and bench-util (installing what they need first).
bench_build() {
        "$SRCDIR/scripts/install-deps.sh" >&2 || die "scripts/install-deps.sh failed"
        if [ -f "$BUILD/build.ninja" ]; then
                meson configure "$BUILD" -Dbuildtype=release -Dbench=enabled >/dev/null || die "meson configure failed"
        else
                meson setup "$BUILD" "$SRCDIR" -Dbuildtype=release -Dbench=enabled >/dev/null || die "meson setup failed"
        fi
        ninja -C "$BUILD" outbox-relay bench/bench-util >&2 || die "building failed"
        RELAY=$BUILD/outbox-relay
        UTIL=$BUILD/bench/bench-util
}

# A private test bed in TB, its environment loaded, the broker's idempotent producer warmed, and
# BENCH_WARMUP_MESSAGES (3,000,000; 0: none) messages like the relay's sent to warm the broker.
bench_testbed() {
        TB=$(mktemp -d "/tmp/outbox-$NAME.XXXXXX")
        say "starting the test bed in $TB"
        "$SRCDIR/scripts/testbed.sh" start "$TB" >&2 || die "the test bed did not start"
        # shellcheck disable=SC1091
        . "$TB/env"
        "$UTIL" create-topic --topic "$NAME-warmup" --partitions 1 --warm-idempotence >&2 || die "warm-up failed"
        # The broker's JVM compiles its produce path under the first few million messages; a
        # drain measured on a fresh broker pays for that (bench/run.sh says what was measured).
        if [ "${BENCH_WARMUP_MESSAGES:-3000000}" -gt 0 ]; then
                "$UTIL" create-topic --topic "$NAME-broker-warmup" --partitions 3 >&2 || die "warm-up failed"
                "$UTIL" warm-broker --topic "$NAME-broker-warmup" --messages "${BENCH_WARMUP_MESSAGES:-3000000}" >&2 ||
                        die "warming the broker failed"
        fi
}

# fill ROWS KEYS TOPIC: an empty outbox, then ROWS rows as bench/run.sh writes them (200-byte
# payloads, 3 headers), keys 'key-0' .. KEYS - 1, without the NOTIFY trigger; VACUUM ANALYZE.
fill() {
        timeout 1200 psql -X -q -v ON_ERROR_STOP=1 -v rows="$1" -v keys="$2" -v topic="$3" <<'SQL' >&2 ||
ALTER TABLE outbox DISABLE TRIGGER USER;
TRUNCATE outbox;
INSERT INTO outbox (topic, key, payload, headers)
SELECT :'topic', 'key-' || (g % :keys),
       convert_to(rpad('row ' || g || ' ', 200, 'abcdefghijklmnopqrstuvwxyz0123456789'), 'UTF8'),
       jsonb_build_object('trace-id', md5(g::text), 'source', 'outbox-bench', 'type', 'order.created')
  FROM generate_series(1, :rows) g;
ALTER TABLE outbox ENABLE TRIGGER USER;
VACUUM ANALYZE outbox;
SQL
                die "filling the outbox failed"
}

# The median of the numbers on stdin (separated by spaces or newlines).
median() { tr ' ' '\n' | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.6f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# CPU time of the whole machine so far, in clock ticks (user, nice, system, irq, softirq). Not
# steal, which bench/run.sh's machine_ticks counts as busy: time the hypervisor kept is no work of
# the relays, PostgreSQL or Kafka, and this figure is divided by the rows.
busy_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
# PostgreSQL's CPU ticks: the postmaster's, its live children's, and those of the children it has
# reaped (cutime, cstime), so sessions that end during a drain still count. A session that ends
# while this reads is missed, and counted in the next reading: drain() reads after pg_quiet.
pg_ticks() {
        local pm c
        pm=$(head -1 "$TB/pg/data/postmaster.pid")
        {
                awk '{ print $14 + $15 + $16 + $17 }' "/proc/$pm/stat"
                for c in $(pgrep -P "$pm"); do awk '{ print $14 + $15 }' "/proc/$c/stat" 2>/dev/null || true; done
        } | awk '{ s += $1 } END { print s + 0 }'
}
# Until no client session of the outbox's database is left (psql's end, say), 5 s at most.
pg_quiet() {
        local pm
        pm=$(head -1 "$TB/pg/data/postmaster.pid")
        for _ in $(seq 50); do
                pgrep -P "$pm" -f "^postgres: [^ ]+ $PGDATABASE " >/dev/null || return 0
                sleep 0.1
        done
}
# The broker's CPU ticks (its JVM, every thread).
kafka_ticks() { awk '{ print $14 + $15 }' "/proc/$(cat "$TB/kafka/pid")/stat"; }

# One drain: keys, ordering, relays [, topic prefix] -> prints the rate (rows/s) and the CPU µs
# per row over the drain of the machine, of PostgreSQL and of Kafka. ROWS rows, BATCH (empty: the
# relay's default), DRAIN_TIMEOUT seconds, the relay binary RELAY (bench_build sets it). Callers
# run it in $(...), where a die() ends only that subshell: check its status (out=$(drain ...) ||
# die ...).
drain() {
        local keys=$1 ordering=$2 n=$3 topic t0 t1 got conf batch_line="" c0 c1 p0 p1 k0 k1 hz
        topic="${4:-scaleout}-$keys-$ordering-$n"
        "$UTIL" create-topic --topic "$topic" --partitions 3 >&2 || die "creating topic '$topic' failed"
        fill "$ROWS" "$keys" "$topic"
        [ -n "$BATCH" ] && batch_line="batch_size = $BATCH;"
        conf=$TB/relay-$ordering.conf
        cat >"$conf" <<CONF
postgres = { conninfo = "host=$PGHOST port=$PGPORT dbname=$PGDATABASE user=$PGUSER"; };
kafka = { bootstrap_servers = "$KAFKA_BOOTSTRAP"; };
relay = { $batch_line poll_interval = "1s"; ordering = "$ordering"; status_interval = "5s"; };
log = { level = "notice"; };
http = { listen = "127.0.0.1:0"; };
CONF
        pg_quiet
        c0=$(busy_ticks) p0=$(pg_ticks) k0=$(kafka_ticks)
        t0=$EPOCHREALTIME
        for i in $(seq "$n"); do
                "$RELAY" -c "$conf" 2>>"$TB/relay-$topic-$i.log" &
                PIDS+=($!)
                echo $! >>"$TB/drain.pids" # for cleanup(): PIDS is this subshell's
        done
        # drain runs in $(...), which has no EXIT trap: stop the relays before failing.
        "$UTIL" wait-drain --pid "${PIDS[0]}" --timeout "$DRAIN_TIMEOUT" --interval-ms 100 >"$TB/drain-$topic.out" ||
                { stop_relays; rm -f "$TB/drain.pids"; die "$topic: the relays did not drain the outbox (logs in $TB)"; }
        c1=$(busy_ticks) p1=$(pg_ticks) k1=$(kafka_ticks)
        t1=$(awk -F= '$1 == "drained_at_us" { printf "%.6f", $2 / 1e6 }' "$TB/drain-$topic.out")
        stop_relays
        rm -f "$TB/drain.pids"
        got=$("$UTIL" watermarks --topic "$topic")
        [ "$got" -ge "$ROWS" ] || die "$topic: $got messages in Kafka, expected at least $ROWS"
        say "$topic: $ROWS rows in $(calc "$t1 - $t0")s; $got messages in Kafka"
        hz=$(getconf CLK_TCK)
        echo "$(calc "$ROWS / ($t1 - $t0)") $(calc "($c1 - $c0) * 1e6 / $hz / $ROWS")" \
                "$(calc "($p1 - $p0) * 1e6 / $hz / $ROWS") $(calc "($k1 - $k0) * 1e6 / $hz / $ROWS")"
}
