#!/usr/bin/env bash
# fuzz.sh -- Builds the libFuzzer harnesses of tests/fuzz with clang, ASan and UBSan, and runs each
# for a bounded time from its seed corpus (tests/fuzz/corpus/NAME, read only: what a run finds
# goes to a scratch corpus). A crash, leak, timeout or sanitizer report fails the run; the input
# that caused it is kept as BUILD/artifacts/crash-… and printed: add it to the harness's corpus
# once fixed, so every later run tries it first.
#
#   scripts/fuzz.sh [SECONDS_PER_HARNESS]      # default 30
#
# Environment: FUZZ_BUILD_DIR [build/fuzz], FUZZ_HARNESSES ["fuzz_config fuzz_row fuzz_input"].
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs=${1:-30}
build=${FUZZ_BUILD_DIR:-build/fuzz}
harnesses=${FUZZ_HARNESSES:-fuzz_config fuzz_row fuzz_input}

command -v clang >/dev/null || { echo "fuzz.sh: clang is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
rm -rf "$build"
CC=clang meson setup "$build" -Dfuzz=enabled -Dtests=disabled -Dbench=disabled -Dsystemd=disabled \
        -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug -Dwerror=true >/dev/null ||
        { echo "fuzz.sh: meson setup failed" >&2; exit 1; }
# Quiet when it works; its whole output when it does not (a failure must say why).
out=$(ninja -C "$build" 2>&1) || { printf '%s\n' "$out" | tail -n 40; echo "fuzz.sh: the build failed" >&2; exit 1; }
mkdir -p "$build/artifacts"
failed=0
for h in $harnesses; do
        seeds=tests/fuzz/corpus/${h#fuzz_}
        scratch="$build/corpus-$h"
        mkdir -p "$scratch"
        echo "fuzz.sh: $h for ${secs}s from $(find "$seeds" -type f | wc -l) seeds"
        if LSAN_OPTIONS=suppressions=$PWD/tests/fuzz/lsan.supp ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
                "$build/tests/fuzz/$h" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
                -print_final_stats=1 -artifact_prefix="$build/artifacts/$h-" "$scratch" "$seeds" \
                >"$build/$h.log" 2>&1; then
                grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb|^#[0-9]+.*DONE' "$build/$h.log" | sed "s/^/  $h: /"
        else
                failed=$((failed + 1))
                tail -n 40 "$build/$h.log"
                echo "fuzz.sh: $h FAILED; the input is in $build/artifacts/ (add it to $seeds once fixed):" >&2
                ls -1 "$build/artifacts/" | grep "^$h-" | sed 's/^/  /' >&2
        fi
done
[ "$failed" -eq 0 ]
