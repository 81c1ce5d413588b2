#!/usr/bin/env bash
# test.sh -- The whole test suite: installs what is missing, builds with -Werror, starts a private
# PostgreSQL and a real Kafka broker, runs unit + integration tests, the unit tests again under
# valgrind, the libFuzzer harnesses for a bounded time (scripts/fuzz.sh), then the tests again with
# the relay and the tests built with AddressSanitizer + UndefinedBehaviorSanitizer (a relay that
# leaks or trips UBSan exits non-zero, which the tests assert). Each run is counted on its own by
# scripts/tally.py (cases passed / failed / not run, programs ok / failed); the summary lists the
# steps and runs, and the last line, "total: N passed, N failed", adds them all up: a failed case,
# a case the plan announced that never reported, and a program that failed, timed out, was
# skipped or did not run each count as one failure.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build/test}
asan=${ASAN_BUILD_DIR:-build/asan}
selftest=${SELFTEST_BUILD_DIR:-build/selftest}
passed=0
failed=0
summary=()

# Each step says when it began (seconds since the start): where the CI's 15 minutes go.
step() { printf '\n=== [%ds] %s\n' "$SECONDS" "$*"; }

# The summary, then the one closing line.
finish() {
        echo
        printf '%s\n' "${summary[@]}"
        echo "time: ${SECONDS}s"
        echo "total: $passed passed, $failed failed"
}
fatal() {
        [ -z "${fuzz_pid:-}" ] || kill "$fuzz_pid" 2>/dev/null
        echo "test.sh: $*" >&2
        summary+=("stopped: $*")
        failed=$((failed + 1))
        finish
        exit 1
}

# counted NAME COMMAND... -- a step that counts as one pass or one failure
counted() {
        local name=$1
        shift
        if "$@"; then
                passed=$((passed + 1))
                summary+=("$name: ok")
        else
                failed=$((failed + 1))
                summary+=("$name: FAILED")
        fi
}

# tally LABEL DIR RC [SUITE ARGS] -- adds one meson run of the unit and integration suites (RC: its
# exit status; SUITE ARGS: more --no-suite arguments, as given to that run)
tally() {
        local label=$1 dir=$2 rc=$3 out p f
        shift 3
        rm -f "$dir/tally.counts"
        out=$(/usr/bin/python3 scripts/tally.py --label "$label" --suite unit --suite integration "$@" --rc "$rc" \
                --counts "$dir/tally.counts" "$dir")
        printf '%s\n' "$out"
        if [ -n "$out" ] && read -r p f <"$dir/tally.counts"; then
                passed=$((passed + p))
                failed=$((failed + f))
                summary+=("$(printf '%s\n' "$out" | tail -n 1)")
        else
                failed=$((failed + 1))
                summary+=("$label: FAILED, the tally of $dir did not finish")
        fi
}

step "dependencies"
scripts/install-deps.sh || fatal "installing dependencies failed"

step "format (.clang-format, STYLE §12)"
counted "format check" scripts/format.sh --check

step "the sample Prometheus configuration and alert rules (examples/prometheus) pass promtool"
counted "promtool check" bash -c 'cd examples/prometheus && promtool check config prometheus.yml'

step "self-test of the tally: a crash and a hang must count as failures"
counted "tally self-test" tests/selftest/run.sh "$selftest"

step "build ($build, -Werror)"
rm -rf "$build"
meson setup "$build" -Dwerror=true -Dtests=enabled -Dsystemd=enabled >/dev/null || fatal "meson setup failed"
ninja -C "$build" || fatal "build failed"

step "the Debian package: built, lintian, installed into a throw-away root and checked (tests/package)"
counted "package check" tests/package/check.sh

step "test bed: PostgreSQL + Kafka"
tb=$(mktemp -d /tmp/outbox-relay-testbed.XXXXXX)
trap 'scripts/testbed.sh stop "$tb" || true; rm -rf "$tb"' EXIT
scripts/testbed.sh start "$tb" || fatal "the test bed did not start: integration tests cannot run"
# shellcheck disable=SC1091
. "$tb/env"
echo "Kafka version started: $KAFKA_VERSION (bootstrap $KAFKA_BOOTSTRAP); PostgreSQL on port $PGPORT"
# Each relay a test starts gets a directory (its config and log); they go inside the test bed,
# which is removed on exit, instead of piling up in /tmp (about 120 a run).
export OUTBOX_TEST_TMPDIR="$tb/relays"
mkdir -p "$OUTBOX_TEST_TMPDIR"

step "unit + integration tests"
rm -f "$build/meson-logs/testlog.json"
meson test -C "$build" --suite unit --suite integration --print-errorlogs --num-processes 1
tally "plain run" "$build" $?
# The one-line results of the chaos test (tests/chaos/README.md), the row fuzz and the inbox test,
# whatever the outcome.
grep -hE '^(chaos: seed .*events|row fuzz: [0-9]+ rows|inbox (concurrency|prune|e2e): )' \
        "$build/meson-logs/testlog.txt" || true

# The fuzzing needs no server and one core: it runs in the background while the unit tests run
# under valgrind and the sanitizer build is made (the CI machine has two cores), and is counted
# before the sanitizer run starts its relays.
step "fuzzing in the background: the libFuzzer harnesses (tests/fuzz) with ASan+UBSan, ${FUZZ_SECONDS:=10} s each"
fuzz_log="$tb/fuzz.log"
scripts/fuzz.sh "$FUZZ_SECONDS" >"$fuzz_log" 2>&1 &
fuzz_pid=$!

step "unit tests again under valgrind (--leak-check=full): a leak or an invalid access fails the case"
rm -f "$build/meson-logs/testlog.json" "$build/meson-logs/testlog-valgrind.json"
meson test -C "$build" --suite unit --print-errorlogs --num-processes 1 \
        --wrapper 'valgrind --leak-check=full --error-exitcode=1 --quiet'
rc=$?
# With a wrapper meson names its log after it (testlog-valgrind.json); the tally reads testlog.json.
cp "$build/meson-logs/testlog-valgrind.json" "$build/meson-logs/testlog.json" 2>/dev/null
tally "valgrind run" "$build" $rc --no-suite integration

step "unit and integration tests again, everything built with AddressSanitizer + UndefinedBehaviorSanitizer"
# Every unit test and every integration program but those of suite 'long' (the fault suites
# test_faults, test_promises, test_sharing, test_batch_faults, test_mock_faults, test_systemd,
# test_memory, test_http, test_inbox, and the chaos test, which the plain run has just passed): the whole
# suite twice would not fit the CI's 15 minutes. The HTTP listener still runs under the
# sanitizers in every relay the other programs start (each listens on a port of its own); the
# requests test_http makes are in the plain run only.
rm -rf "$asan"
meson setup "$asan" -Dwerror=true -Dtests=enabled -Db_sanitize=address,undefined -Db_lundef=false \
        -Dbuildtype=debug -Dbench=disabled >/dev/null || fatal "meson setup (asan) failed"
out=$(ninja -C "$asan" 2>&1) || { printf '%s\n' "$out" | tail -n 40; fatal "asan build failed"; }
echo "the fuzzing's output:"
counted "fuzzing" wait "$fuzz_pid"
cat "$fuzz_log"
rm -f "$asan/meson-logs/testlog.json"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        meson test -C "$asan" --suite unit --suite integration --no-suite long --print-errorlogs --num-processes 1
tally "asan run" "$asan" $? --no-suite long

finish
[ "$failed" -eq 0 ]
