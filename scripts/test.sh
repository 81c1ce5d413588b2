#!/usr/bin/env bash
# test.sh -- The whole test suite: installs what is missing, builds with -Werror, starts a private
# PostgreSQL and a real Kafka broker, runs unit + integration tests, then all of them again with
# the relay and the tests built with AddressSanitizer + UndefinedBehaviorSanitizer (a relay that
# leaks or trips UBSan exits non-zero, which the tests assert). Ends with "N passed, N failed".
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build/test}
asan=${ASAN_BUILD_DIR:-build/asan}
passed=0
failed=0

step() { printf '\n=== %s\n' "$*"; }
fatal() { echo "test.sh: $*" >&2; echo "$passed passed, $((failed + 1)) failed"; exit 1; }

# Adds a meson run's per-test-case counts (cmocka speaks TAP, so each case counts).
count() {
        local dir=$1 rc=$2 t f e s
        local xml="$dir/meson-logs/testlog.junit.xml"
        [ -f "$xml" ] || { failed=$((failed + 1)); return; }
        read -r t e f < <(sed -n 's/.*<testsuites tests="\([0-9]*\)" errors="\([0-9]*\)" failures="\([0-9]*\)".*/\1 \2 \3/p' "$xml")
        s=$(grep -o 'skipped="[0-9]*"' "$xml" | grep -o '[0-9][0-9]*' | awk '{n += $1} END {print n + 0}')
        t=${t:-0} e=${e:-0} f=${f:-0} s=${s:-0}
        # A skipped test is a failure here: nothing may silently not run.
        passed=$((passed + t - e - f - s))
        failed=$((failed + e + f + s))
        # A test program that died before reporting its cases still fails the run.
        if [ "$rc" -ne 0 ] && [ $((e + f + s)) -eq 0 ]; then failed=$((failed + 1)); fi
}

step "dependencies"
scripts/install-deps.sh || fatal "installing dependencies failed"

step "build ($build, -Werror)"
rm -rf "$build"
meson setup "$build" -Dwerror=true -Dtests=enabled -Dsystemd=enabled >/dev/null || fatal "meson setup failed"
ninja -C "$build" || fatal "build failed"

step "test bed: PostgreSQL + Kafka"
tb=$(mktemp -d /tmp/outbox-relay-testbed.XXXXXX)
trap 'scripts/testbed.sh stop "$tb" || true; rm -rf "$tb"' EXIT
scripts/testbed.sh start "$tb" || fatal "the test bed did not start: integration tests cannot run"
# shellcheck disable=SC1091
. "$tb/env"
echo "Kafka version started: $KAFKA_VERSION (bootstrap $KAFKA_BOOTSTRAP); PostgreSQL on port $PGPORT"

step "unit + integration tests"
meson test -C "$build" --suite unit --suite integration --print-errorlogs --num-processes 1
count "$build" $?

step "unit and integration tests again, everything built with AddressSanitizer + UndefinedBehaviorSanitizer"
rm -rf "$asan"
meson setup "$asan" -Dwerror=true -Dtests=enabled -Db_sanitize=address,undefined -Db_lundef=false \
        -Dbuildtype=debug >/dev/null || fatal "meson setup (asan) failed"
ninja -C "$asan" >/dev/null || fatal "asan build failed"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        meson test -C "$asan" --suite unit --suite integration --print-errorlogs --num-processes 1
count "$asan" $?

echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
