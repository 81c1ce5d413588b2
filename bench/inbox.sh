#!/usr/bin/env bash
# inbox.sh -- What the consumer's inbox (sql/inbox.sql) costs: accept per event, size, prune rate.
#
#   bench/inbox.sh
#
# Starts a private PostgreSQL 15 + Kafka test bed (scripts/testbed.sh; only PostgreSQL is used)
# and stops it on exit. Then, in a database of its own with sql/inbox.sql applied:
#   1. accept, server time: BENCH_INBOX_EVENTS accepts in one statement (no round trips);
#   2. accept, client: pgbench, one client, one accept per transaction (as a consumer that
#      commits each message), then 100 accepts per transaction (a consumer's batch);
#   3. size: the table and its indexes after those BENCH_INBOX_EVENTS entries;
#   4. prune: BENCH_INBOX_EVENTS entries past the retention removed by
#      CALL outbox_inbox_prune_all(…, 1000), while pgbench goes on accepting new events.
# Group 'orders-consumer', source 'shop/public.outbox' (the lengths change the size).
# Prints a markdown table and writes it to bench/results-inbox.md.
#
# Environment: BENCH_INBOX_EVENTS [1000000], BENCH_KEEP=1 keeps the test bed directory.
set -euo pipefail

SRCDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
EVENTS=${BENCH_INBOX_EVENTS:-1000000}
RESULTS=$SRCDIR/bench/results-inbox.md
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
NAME=inbox
BUILD=${BENCH_BUILD:-$SRCDIR/build/bench} # lib.sh wants it; nothing is built here
# say, die, the test bed removed on exit (bench/lib.sh)
# shellcheck source=bench/lib.sh
. "$SRCDIR/bench/lib.sh"

num() { awk "BEGIN { printf \"%.2f\", $1 }"; }
q() { psql -X -A -t -q -v ON_ERROR_STOP=1 -d inbox_bench -c "$1"; }
# ms SQL: wall milliseconds of one statement
ms() {
        local t0 t1
        t0=$EPOCHREALTIME
        q "$1" >/dev/null
        t1=$EPOCHREALTIME
        awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", (b - a) * 1000 }'
}

"$SRCDIR/scripts/install-deps.sh" >&2 || die "scripts/install-deps.sh failed"
TB=$(mktemp -d /tmp/outbox-inbox.XXXXXX)
say "starting the test bed in $TB"
"$SRCDIR/scripts/testbed.sh" start "$TB" >&2 || die "the test bed did not start"
# shellcheck disable=SC1091
. "$TB/env"
psql -X -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE inbox_bench" >&2
psql -X -q -v ON_ERROR_STOP=1 -d inbox_bench -f "$SRCDIR/sql/inbox.sql" >&2

say "1. $EVENTS accepts in one statement"
server_ms=$(ms "SELECT count(*) FILTER (WHERE outbox_inbox_accept('orders-consumer', 'shop/public.outbox', i))
                FROM generate_series(1, $EVENTS) i")
firsts=$(q "SELECT count(*) FROM outbox_inbox")
[ "$firsts" = "$EVENTS" ] || die "$firsts entries after $EVENTS accepts"
repeat_ms=$(ms "SELECT count(*) FILTER (WHERE outbox_inbox_accept('orders-consumer', 'shop/public.outbox', i))
                FROM generate_series(1, 100000) i")
server_us=$(num "$server_ms * 1000 / $EVENTS")
repeat_us=$(num "$repeat_ms * 1000 / 100000")

say "3. size"
q "VACUUM ANALYZE outbox_inbox"
table_mb=$(q "SELECT round(pg_table_size('outbox_inbox') / 1048576.0, 1)")
index_mb=$(q "SELECT round(pg_indexes_size('outbox_inbox') / 1048576.0, 1)")
bytes_per=$(q "SELECT round(pg_total_relation_size('outbox_inbox')::numeric / $EVENTS, 1)")

say "2. pgbench: accepts from a client"
cat >"$TB/accept1.sql" <<'SQL'
\set id random(100000000, 900000000)
SELECT outbox_inbox_accept('orders-consumer', 'shop/public.outbox', :id);
SQL
{
        echo "BEGIN;"
        for i in $(seq 100); do
                echo "\\set id$i random(100000000, 900000000)"
                echo "SELECT outbox_inbox_accept('orders-consumer', 'shop/public.outbox', :id$i);"
        done
        echo "COMMIT;"
} >"$TB/accept100.sql"
tps1=$("$PGBIN/pgbench" -n -c 1 -T 10 -f "$TB/accept1.sql" inbox_bench 2>&1 | awk '/^tps/ { print $3 }')
tps100=$("$PGBIN/pgbench" -n -c 1 -T 10 -f "$TB/accept100.sql" inbox_bench 2>&1 | awk '/^tps/ { print $3 }')
[ -n "$tps1" ] && [ -n "$tps100" ] || die "pgbench gave no rate"
client1_us=$(num "1000000 / $tps1")
client100_us=$(num "1000000 / ($tps100 * 100)")

say "4. prune $EVENTS entries past the retention while accepts go on"
q "TRUNCATE outbox_inbox"
q "INSERT INTO outbox_inbox (consumer_group, source, outbox_id, received_at)
   SELECT 'orders-consumer', 'shop/public.outbox', g, now() - interval '30 days' + g * interval '1 ms'
     FROM generate_series(1, $EVENTS) g"
q "VACUUM ANALYZE outbox_inbox"
"$PGBIN/pgbench" -n -c 1 -T 120 -f "$TB/accept1.sql" inbox_bench >"$TB/pgbench-during.txt" 2>&1 &
bg=$!
PIDS+=("$bg") # stopped on exit by bench/lib.sh, whatever happens
sleep 1
t0=$EPOCHREALTIME
psql -X -q -v ON_ERROR_STOP=1 -d inbox_bench -c "CALL outbox_inbox_prune_all('14 days', 1000)" >&2
t1=$EPOCHREALTIME
during=$(q "SELECT count(*) FROM outbox_inbox WHERE received_at > now() - interval '1 hour'")
# SIGTERM: a background job of a non-interactive shell ignores SIGINT.
kill -TERM "$bg" 2>/dev/null || true
wait "$bg" 2>/dev/null || true
PIDS=()
prune_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
left=$(q "SELECT count(*) FROM outbox_inbox WHERE received_at < now() - interval '14 days'")
[ "$left" = 0 ] || die "$left entries past the retention after the prune"
prune_rate=$(num "$EVENTS / $prune_s")

{
        echo "# Inbox benchmark ($(date -u +%Y-%m-%d), $(git -C "$SRCDIR" describe --always --dirty 2>/dev/null || echo '?'))"
        echo
        echo "Command: \`bench/inbox.sh\` (BENCH_INBOX_EVENTS=$EVENTS). PostgreSQL 15 of the test bed (durability off), one machine."
        echo
        echo "| what | figure |"
        echo "|---|---:|"
        echo "| accept, server time, first delivery ($EVENTS in one statement) | $server_us µs/event |"
        echo "| accept, server time, repeat (100000 in one statement) | $repeat_us µs/event |"
        echo "| accept from a client, one per transaction (pgbench, 1 client) | $client1_us µs/event |"
        echo "| accept from a client, 100 per transaction | $client100_us µs/event |"
        echo "| inbox size after $EVENTS events: table / indexes | $table_mb MiB / $index_mb MiB |"
        echo "| bytes per entry, all included | $bytes_per |"
        echo "| prune $EVENTS entries (outbox_inbox_prune_all, batches of 1000) | $prune_s s, $prune_rate entries/s |"
        echo "| accepts committed by another client meanwhile (it began 1 s before the prune) | $during |"
} | tee "$RESULTS"
