#!/usr/bin/env bash
# testbed.sh -- Starts and stops a private PostgreSQL 15 and a real Kafka broker (KRaft) for tests.
#
#   testbed.sh start DIR        start both in DIR, write DIR/env (source it), wait until ready
#   testbed.sh stop DIR         stop both, leaving no process behind
#   testbed.sh pg-restart DIR   pg_ctl restart -m fast (same port and data)
#   testbed.sh kafka-stop DIR / kafka-start DIR   stop / start the broker (same ports and data)
#   testbed.sh pgbouncer-start DIR / pgbouncer-stop DIR   a PgBouncer in transaction mode in front
#                               of the PostgreSQL (its port in DIR/pgbouncer/port)
#
# Kafka jars come from Maven Central once and are cached in $OUTBOX_RELAY_CACHE
# (default ~/.cache/outbox-relay); later runs reuse them.
set -euo pipefail

KAFKA_VERSION=${KAFKA_VERSION:-4.1.1}
SLF4J_VERSION=2.0.17
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
CACHE=${OUTBOX_RELAY_CACHE:-${HOME:-/root}/.cache/outbox-relay}
KAFKA_LIBS="$CACHE/kafka-$KAFKA_VERSION/libs"
SRCDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die() { echo "testbed: $*" >&2; exit 1; }
say() { echo "testbed: $*" >&2; }

# Runs a PostgreSQL server binary as the unprivileged owner (they refuse to run as root).
as_pg() {
        if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# Any TCP socket on the port, listening or connected: a client's local port is taken as well.
port_in_use() { ss -Htan "sport = :$1" 2>/dev/null | grep -q .; }

# A port below the kernel's ephemeral range, so no outgoing connection can take it between the
# check and the server's bind (a PostgreSQL start failed with "Address already in use" on a
# port picked inside that range).
free_port() {
        local p low
        low=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
        [ "$low" -gt 12000 ] 2>/dev/null || low=32768
        for _ in $(seq 200); do
                p=$((10000 + RANDOM % (low - 10000)))
                port_in_use "$p" || { echo "$p"; return; }
        done
        die "no free port found"
}

fetch_kafka() {
        if [ -f "$KAFKA_LIBS/.complete" ]; then
                say "using cached Kafka $KAFKA_VERSION jars from $KAFKA_LIBS"
                return
        fi
        say "downloading Kafka $KAFKA_VERSION jars from Maven Central into $KAFKA_LIBS"
        local tmp
        tmp=$(mktemp -d)
        cat > "$tmp/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>outbox-relay.testbed</groupId><artifactId>kafka-broker-libs</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>$SLF4J_VERSION</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId><version>$SLF4J_VERSION</version></dependency>
  </dependencies>
</project>
POM
        mvn -B -q -Dstyle.color=never -f "$tmp/pom.xml" org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
                -DincludeScope=runtime -DoutputDirectory="$tmp/libs" ||
                die "fetching Kafka jars from Maven Central failed"
        [ -f "$tmp/libs/kafka_2.13-$KAFKA_VERSION.jar" ] || die "kafka_2.13-$KAFKA_VERSION.jar missing after download"
        mkdir -p "$(dirname "$KAFKA_LIBS")"
        rm -rf "$KAFKA_LIBS"
        mv "$tmp/libs" "$KAFKA_LIBS"
        touch "$KAFKA_LIBS/.complete"
        rm -rf "$tmp"
}

pg_start() {
        local dir=$1 port
        port=$(free_port)
        mkdir -p "$dir/pg/sock"
        [ "$(id -u)" -eq 0 ] && chown -R postgres:postgres "$dir/pg"
        as_pg "$PGBIN/initdb" -D "$dir/pg/data" -A trust -U postgres --nosync -E UTF8 >"$dir/pg/initdb.log" 2>&1 ||
                { cat "$dir/pg/initdb.log" >&2; die "initdb failed"; }
        cat >>"$dir/pg/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir/pg/sock'
max_connections = 100
shared_buffers = 256MB
fsync = off
synchronous_commit = off
full_page_writes = off
CONF
        echo "$port" >"$dir/pg/port"
        pg_ctl_start "$dir"
        as_pg "$PGBIN/psql" -q -X -v ON_ERROR_STOP=1 -h "$dir/pg/sock" -p "$port" -U postgres -d postgres \
                -c "CREATE DATABASE outbox" >/dev/null
        for f in "$SRCDIR"/sql/[0-9]*.sql; do
                PGOPTIONS="-c client_min_messages=warning" as_pg "$PGBIN/psql" -q -X -v ON_ERROR_STOP=1 -h "$dir/pg/sock" -p "$port" -U postgres -d outbox \
                        -f "$f" >/dev/null || die "applying $(basename "$f") failed"
        done
        say "PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}') started on 127.0.0.1:$port (socket $dir/pg/sock)"
}

pg_ctl_start() {
        local dir=$1
        as_pg "$PGBIN/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/server.log" -w -t 60 start >/dev/null ||
                { cat "$dir/pg/server.log" >&2; die "PostgreSQL did not start"; }
}

pg_stop() {
        local dir=$1
        [ -f "$dir/pg/data/postmaster.pid" ] || return 0
        as_pg "$PGBIN/pg_ctl" -D "$dir/pg/data" -m fast -w -t 60 stop >/dev/null 2>&1 || true
}

kafka_format() {
        local dir=$1 port cport
        port=$(free_port)
        cport=$(free_port)
        while [ "$cport" = "$port" ]; do cport=$(free_port); done
        mkdir -p "$dir/kafka/data"
        cat >"$dir/kafka/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/kafka/data
num.partitions=3
auto.create.topics.enable=true
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=2
log.flush.interval.messages=9223372036854775807
PROPS
        echo "$port" >"$dir/kafka/port"
        local cid
        cid=$(java -cp "$KAFKA_LIBS/*" kafka.tools.StorageTool random-uuid 2>/dev/null) || die "kafka StorageTool failed"
        java -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$KAFKA_LIBS/*" kafka.tools.StorageTool format \
                --standalone -t "$cid" -c "$dir/kafka/server.properties" >"$dir/kafka/format.log" 2>&1 ||
                { cat "$dir/kafka/format.log" >&2; die "formatting Kafka storage failed"; }
}

kafka_start() {
        local dir=$1 port pid
        port=$(cat "$dir/kafka/port")
        # slf4j-simple at WARN, except the broker's state transitions: the readiness signal.
        setsid java -Xms512m -Xmx512m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
                -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
                -Dorg.slf4j.simpleLogger.log.kafka.server.BrokerServer=info \
                -cp "$KAFKA_LIBS/*" kafka.Kafka "$dir/kafka/server.properties" \
                >>"$dir/kafka/server.log" 2>&1 </dev/null &
        pid=$!
        echo "$pid" >"$dir/kafka/pid"
        local waited=0
        until grep -q 'Transition from STARTING to STARTED' "$dir/kafka/server.log" 2>/dev/null &&
                port_in_use "$port"; do
                if ! kill -0 "$pid" 2>/dev/null; then
                        tail -50 "$dir/kafka/server.log" >&2
                        die "Kafka broker exited during start-up"
                fi
                if [ $waited -ge 600 ]; then
                        tail -50 "$dir/kafka/server.log" >&2
                        kafka_stop "$dir"
                        die "Kafka broker not ready within 60s"
                fi
                sleep 0.1
                waited=$((waited + 1))
        done
        # The next start waits for its own STARTED line.
        echo "--- started ---" >>"$dir/kafka/server.log"
        sed -i 's/Transition from STARTING to STARTED/Transition to STARTED (seen)/' "$dir/kafka/server.log"
        say "Kafka $KAFKA_VERSION (KRaft, combined mode) started on 127.0.0.1:$port, pid $pid"
}

kafka_stop() {
        local dir=$1 pid
        [ -f "$dir/kafka/pid" ] || return 0
        pid=$(cat "$dir/kafka/pid")
        if kill -0 "$pid" 2>/dev/null; then
                kill -TERM "$pid" 2>/dev/null || true
                for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
                kill -0 "$pid" 2>/dev/null && { say "Kafka did not stop in 30s, killing it"; kill -KILL "$pid" 2>/dev/null || true; }
                for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        fi
        rm -f "$dir/kafka/pid"
}

# A connection pooler in transaction mode, the setup the relay cannot share work through (its
# session locks and prepared statements need a session of their own): the test that the relay
# says so starts it. Trust authentication, like the server behind it.
PGBOUNCER=${PGBOUNCER:-/usr/sbin/pgbouncer}
pgbouncer_start() {
        local dir=$1 port
        [ -x "$PGBOUNCER" ] || die "$PGBOUNCER not found (run scripts/install-deps.sh)"
        pgbouncer_stop "$dir" # one a failed test left behind
        port=$(free_port)
        mkdir -p "$dir/pgbouncer"
        echo '"postgres" ""' >"$dir/pgbouncer/userlist.txt"
        cat >"$dir/pgbouncer/pgbouncer.ini" <<INI
[databases]
outbox = host=127.0.0.1 port=$(cat "$dir/pg/port") dbname=outbox
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/pgbouncer/userlist.txt
pool_mode = transaction
default_pool_size = 4
ignore_startup_parameters = extra_float_digits,options
logfile = $dir/pgbouncer/pgbouncer.log
pidfile = $dir/pgbouncer/pgbouncer.pid
INI
        [ "$(id -u)" -eq 0 ] && chown -R postgres:postgres "$dir/pgbouncer"
        as_pg "$PGBOUNCER" -d -q "$dir/pgbouncer/pgbouncer.ini" ||
                { tail -20 "$dir/pgbouncer/pgbouncer.log" >&2; die "pgbouncer did not start"; }
        # Its own pid file, and its port taken: the PgBouncer just started is the one listening.
        for _ in $(seq 100); do
                [ -s "$dir/pgbouncer/pgbouncer.pid" ] && kill -0 "$(cat "$dir/pgbouncer/pgbouncer.pid")" 2>/dev/null &&
                        port_in_use "$port" && break
                sleep 0.1
        done
        port_in_use "$port" || { tail -20 "$dir/pgbouncer/pgbouncer.log" >&2; pgbouncer_stop "$dir"; die "pgbouncer not listening on $port"; }
        echo "$port" >"$dir/pgbouncer/port"
        say "PgBouncer $("$PGBOUNCER" --version | awk 'NR==1{print $2}') (transaction mode) started on 127.0.0.1:$port"
}

pgbouncer_stop() {
        local dir=$1 pid
        [ -f "$dir/pgbouncer/pgbouncer.pid" ] || return 0
        pid=$(cat "$dir/pgbouncer/pgbouncer.pid")
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
                kill -INT "$pid" 2>/dev/null || true
                for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
                kill -0 "$pid" 2>/dev/null && { say "PgBouncer did not stop in 10s, killing it"; kill -KILL "$pid" 2>/dev/null || true; }
                for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        fi
        rm -f "$dir/pgbouncer/pgbouncer.pid"
}

write_env() {
        local dir=$1
        cat >"$dir/env" <<ENV
export TESTBED_DIR='$dir'
export PGHOST='127.0.0.1'
export PGPORT='$(cat "$dir/pg/port")'
export PGUSER='postgres'
export PGDATABASE='outbox'
export KAFKA_BOOTSTRAP='127.0.0.1:$(cat "$dir/kafka/port")'
export KAFKA_VERSION='$KAFKA_VERSION'
ENV
        [ "$(id -u)" -eq 0 ] && chmod 755 "$dir"
        return 0
}

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || die "usage: testbed.sh start|stop|pg-restart|kafka-stop|kafka-start|pgbouncer-start|pgbouncer-stop DIR"

case "$cmd" in
start)
        mkdir -p "$dir"
        dir=$(cd "$dir" && pwd)
        [ "$(id -u)" -eq 0 ] && chmod 755 "$dir"
        command -v java >/dev/null || die "java not found (run scripts/install-deps.sh)"
        [ -x "$PGBIN/postgres" ] || die "$PGBIN/postgres not found (run scripts/install-deps.sh)"
        fetch_kafka
        pg_start "$dir"
        kafka_format "$dir"
        kafka_start "$dir" || { pg_stop "$dir"; exit 1; }
        write_env "$dir"
        ;;
stop)
        pgbouncer_stop "$dir"
        kafka_stop "$dir"
        pg_stop "$dir"
        # Prove nothing is left behind.
        left=$(pgrep -f -- "$dir/" || true)
        [ -z "$left" ] || { ps -o pid,args -p $left >&2; die "processes left behind"; }
        say "stopped; no process left"
        ;;
pg-restart)
        as_pg "$PGBIN/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/server.log" -m fast -w -t 60 restart >/dev/null ||
                die "PostgreSQL restart failed"
        ;;
pg-stop) pg_stop "$dir" ;;
pg-start) pg_ctl_start "$dir" ;;
kafka-stop) kafka_stop "$dir" ;;
kafka-start) kafka_start "$dir" ;;
pgbouncer-start) pgbouncer_start "$dir" ;;
pgbouncer-stop) pgbouncer_stop "$dir" ;;
*) die "unknown command '$cmd'" ;;
esac
