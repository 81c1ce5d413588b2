#!/usr/bin/env bash
# soak.sh -- The chaos test (tests/chaos/chaos.c) for hours: seed after seed, each run
# CHAOS_SECONDS (300) of faults under load, every run's line appended to a results file, and a
# total at the end. Not part of CI (scripts/test.sh runs two short seeds).
#
#   tests/chaos/soak.sh HOURS [RESULTS_FILE]       # default results: build/soak/results.txt
#
# Builds into build/soak, starts its own test bed (scripts/testbed.sh) and stops it on exit.
# Seeds are consecutive from SOAK_FIRST_SEED (default: the clock), so any run can be replayed:
#   CHAOS_SEED=N CHAOS_SECONDS=300 build/soak/tests/chaos/chaos   (with the test bed's env)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
hours=${1:?usage: tests/chaos/soak.sh HOURS [RESULTS_FILE]}
build=${SOAK_BUILD_DIR:-build/soak}
results=${2:-$build/results.txt}
seconds=${CHAOS_SECONDS:-300}
seed=${SOAK_FIRST_SEED:-$(date +%s)}

meson setup "$build" -Dwerror=true -Dtests=enabled >/dev/null 2>&1 || meson setup --reconfigure "$build" >/dev/null ||
        { echo "soak: meson setup failed" >&2; exit 1; }
ninja -C "$build" >/dev/null || { echo "soak: the build failed" >&2; exit 1; }
tb=$(mktemp -d /tmp/outbox-relay-soak.XXXXXX)
trap 'scripts/testbed.sh stop "$tb" >/dev/null 2>&1; rm -rf "$tb"' EXIT
scripts/testbed.sh start "$tb" || { echo "soak: the test bed did not start" >&2; exit 1; }
# shellcheck disable=SC1091
. "$tb/env"
export OUTBOX_TEST_TMPDIR="$tb/relays" OUTBOX_RELAY_BIN="$root/$build/outbox-relay"
export OUTBOX_RELAY_SRCDIR="$root" OUTBOX_RELAY_BUILD_DIR="$root/$build" CHAOS_SECONDS="$seconds"
mkdir -p "$(dirname "$results")"
echo "# soak started $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $hours h, $seconds s of faults a run, $(git describe --always --dirty 2>/dev/null)" >>"$results"
end=$(($(date +%s) + $(awk -v h="$hours" 'BEGIN { printf "%d", h * 3600 }')))
runs=0 failed=0
while [ "$(date +%s)" -lt "$end" ]; do
        rm -rf "$OUTBOX_TEST_TMPDIR"
        mkdir -p "$OUTBOX_TEST_TMPDIR"
        log="$build/soak-$seed.log"
        if CHAOS_SEED=$seed "$build/tests/chaos/chaos" >"$log.tap" 2>"$log"; then
                grep '^chaos: seed .*events' "$log" >>"$results"
                rm -f "$log" "$log.tap"
        else
                failed=$((failed + 1))
                { grep '^chaos: seed .*events' "$log" || echo "chaos: seed $seed: FAILED (no result line)"; } >>"$results"
                echo "soak: seed $seed FAILED, its log is $log" | tee -a "$results" >&2
        fi
        runs=$((runs + 1))
        seed=$((seed + 1))
done
# totals over this soak's lines
awk -v since="$(grep -n '^# soak started' "$results" | tail -n 1 | cut -d: -f1)" '
        NR > since && /^chaos: seed .*events/ {
                runs++
                match($0, /events [0-9]+/); events += substr($0, RSTART + 7, RLENGTH - 7)
                match($0, /lost [0-9]+/); lost += substr($0, RSTART + 5, RLENGTH - 5)
                match($0, /order violations [0-9]+/); order += substr($0, RSTART + 17, RLENGTH - 17)
                match($0, /SIGTERM: [0-9]+/); term += substr($0, RSTART + 9, RLENGTH - 9)
                match($0, /duplicates [0-9]+/); dup += substr($0, RSTART + 11, RLENGTH - 11)
                n = split($0, parts, /faults: /); split(parts[2], f, /;/); nf = split(f[1], kinds, /, /)
                for (i = 1; i <= nf; i++) { split(kinds[i], kv, / /); faults += kv[2] }
        }
        END { printf "# soak total: %d runs, %d events, %d faults, lost %d, order violations %d, SIGTERM duplicates %d, duplicates %d\n", runs, events, faults, lost, order, term, dup }
' "$results" | tee -a "$results"
echo "# soak ended $(date -u '+%Y-%m-%d %H:%M:%S UTC'): $runs runs, $failed failed" | tee -a "$results"
[ "$failed" -eq 0 ]
