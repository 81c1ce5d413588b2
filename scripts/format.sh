#!/usr/bin/env bash
# format.sh -- Formats the C sources with the project's .clang-format; --check only reports (exit 1
# when a file differs), as CI runs it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mapfile -t files < <(git ls-files '*.c' '*.h')
if [ "${1:-}" = "--check" ]; then
        bad=()
        for f in "${files[@]}"; do
                clang-format --style=file "$f" | cmp -s - "$f" || bad+=("$f")
        done
        if [ ${#bad[@]} -gt 0 ]; then
                echo "format: ${#bad[@]} file(s) differ from .clang-format (run scripts/format.sh):" >&2
                for f in "${bad[@]}"; do
                        echo "  $f" >&2
                        clang-format --style=file "$f" | diff -u "$f" - | head -20 >&2 || true
                done
                exit 1
        fi
        echo "format: ${#files[@]} files match .clang-format ($(clang-format --version | sed 's/.*version //'))"
        exit 0
fi
clang-format --style=file -i "${files[@]}"
