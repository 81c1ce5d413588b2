#!/usr/bin/env bash
# demo.sh -- Live demo: local PostgreSQL + Kafka, the relay running, events written through
# outbox_enqueue() and shown arriving in Kafka with key, headers and outbox-id. Stops everything.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=build/demo
topic=demo.orders

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "installing what is missing"
scripts/install-deps.sh

say "building"
[ -d "$build" ] || meson setup "$build" -Dbuildtype=release >/dev/null
ninja -C "$build" >/dev/null

say "starting PostgreSQL and Kafka"
tb=$(mktemp -d /tmp/outbox-relay-demo.XXXXXX)
relay_pid=
cleanup() {
        [ -n "$relay_pid" ] && kill -TERM "$relay_pid" 2>/dev/null && wait "$relay_pid" 2>/dev/null || true
        scripts/testbed.sh stop "$tb" || true
        rm -rf "$tb"
}
trap cleanup EXIT
scripts/testbed.sh start "$tb"
# shellcheck disable=SC1091
. "$tb/env"

cat >"$tb/relay.conf" <<CONF
postgres = { conninfo = "host=$PGHOST port=$PGPORT dbname=$PGDATABASE user=$PGUSER"; };
kafka = { bootstrap_servers = "$KAFKA_BOOTSTRAP"; linger_ms = 5; };
relay = { batch_size = 500; poll_interval = "5s"; finish = "delete"; };
log = { level = "info"; };
CONF

say "starting outbox-relay (its log follows, prefixed 'relay |')"
"$build/outbox-relay" -c "$tb/relay.conf" 2> >(sed -u 's/^/relay | /' >&2) &
relay_pid=$!
for _ in $(seq 100); do
        psql -X -qAt -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'outbox-relay'" | grep -q '^1$' && break
        sleep 0.1
done

say "writing 12 events through outbox_enqueue(), in 4 transactions"
for order in 1001 1002 1003 1004; do
        psql -X -q -v ON_ERROR_STOP=1 >/dev/null <<SQL
BEGIN;
-- the business write and its events commit together
SELECT outbox_enqueue('$topic', 'order-$order', jsonb_build_object('order', $order, 'event', 'created'),
                      '{"content-type": "application/json", "source": "demo"}');
SELECT outbox_enqueue('$topic', 'order-$order', jsonb_build_object('order', $order, 'event', 'paid'),
                      '{"content-type": "application/json", "source": "demo"}');
SELECT outbox_enqueue('$topic', 'order-$order', jsonb_build_object('order', $order, 'event', 'shipped'),
                      '{"content-type": "application/json", "source": "demo"}');
COMMIT;
SQL
        sleep 0.3
done

say "the events in Kafka (topic $topic): per key in outbox order"
"$build/tests/kafka-tail" "$KAFKA_BOOTSTRAP" "$topic" 12 30

say "what is left in the outbox (finish = delete)"
psql -X -c "SELECT count(*) AS pending FROM outbox"

say "stopping the relay (SIGTERM: drain, commit, exit 0)"
kill -TERM "$relay_pid"
wait "$relay_pid" && echo "relay exited with status 0"
relay_pid=
