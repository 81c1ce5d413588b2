#!/usr/bin/env bash
# run.sh -- Self-test of scripts/tally.py: runs the fake TAP programs of this directory through
# `meson test` and asserts the tally counts a crash and a hang as failures. Exit 0 when it does.
#
#   tests/selftest/run.sh [BUILD_DIR]      (default build/selftest)
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${1:-build/selftest}
bad=0

# check WHAT GOT_RC WANT_RC GOT_LINE WANT_LINE
check() {
        if [ "$2" -eq "$3" ] && [ "$4" = "$5" ]; then
                echo "selftest: ok: $1"
        else
                echo "selftest: WRONG: $1: got exit $2, '$4'; want exit $3, '$5'"
                bad=1
        fi
}

# tally ARGS... -- the tally's last line; its exit status in $trc
tally() {
        local out
        out=$(/usr/bin/python3 scripts/tally.py --label selftest "$@")
        trc=$?
        printf '%s\n' "$out" | sed 's/^/  | /'
        last=$(printf '%s\n' "$out" | tail -n 1)
}

rm -rf "$build"
meson setup "$build" tests/selftest >/dev/null || { echo "selftest: meson setup failed"; exit 1; }

# All three: 2 + 1 + 0 cases passed; the crash and the hang failed; cases 2 and 3 of 3 and 1 and 2
# of 2 never reported. The closing total: 3 passed, 4 not run + 2 programs = 6 failed.
meson test -C "$build" --num-processes 1 --suite selftest >"$build/meson-test.out" 2>&1
rc=$?
[ "$rc" -ne 0 ] || { echo "selftest: meson test passed a crash and a hang"; bad=1; }
tally --rc "$rc" --suite selftest --counts "$build/counts" "$build"
check "a crash and a hang fail the run" "$trc" 1 \
        "$last" "selftest: 3 cases passed, 0 failed, 4 not run (programs: 1 ok, 2 failed)"
check "the closing total counts them" 0 0 "$(cat "$build/counts")" "3 6"

# The hang left out of the run (as a deleted test would be): it counts as a failed program.
meson test -C "$build" --num-processes 1 pass_two crash_in_case_2 >"$build/meson-test.out" 2>&1
rc=$?
tally --rc "$rc" --suite selftest "$build"
check "a program that did not run fails the run" "$trc" 1 \
        "$last" "selftest: 3 cases passed, 0 failed, 2 not run (programs: 1 ok, 2 failed)"

# A failed case, a skipped case, a skipped program: all failures.
meson test -C "$build" --num-processes 1 --suite other >"$build/meson-test.out" 2>&1
rc=$?
tally --rc "$rc" --suite other "$build"
check "failed and skipped cases and a skipped program fail the run" "$trc" 1 \
        "$last" "selftest: 1 cases passed, 2 failed, 0 not run (programs: 0 ok, 2 failed)"

# Only the passing one, and only it expected: nothing failed.
meson test -C "$build" --num-processes 1 --suite good >"$build/meson-test.out" 2>&1
rc=$?
tally --rc "$rc" --suite good "$build"
check "a clean run passes" "$trc" 0 \
        "$last" "selftest: 2 cases passed, 0 failed, 0 not run (programs: 1 ok, 0 failed)"

exit "$bad"
