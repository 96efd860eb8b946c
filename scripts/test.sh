#!/usr/bin/env bash
# Builds Pagoda with its tests and runs them all (the README's test command ends here).
# Usage: scripts/test.sh [ctest args...]   e.g. scripts/test.sh -L unit
set -euo pipefail
cd "$(dirname "$0")/.."
build=${PAGODA_BUILD_DIR:-build}
jobs=$(nproc)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGODA_BUILD_TESTS=ON >/dev/null
cmake --build "$build" -j "$jobs"
cd "$build"
ctest --output-on-failure -j "$jobs" --timeout 900 "$@"
