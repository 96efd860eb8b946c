#!/usr/bin/env bash
# Runs one Python test file with the test venv (CTest calls this for tests/**/*_test.py).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
py="$root/.venv-test/bin/python"
[ -x "$py" ] || { echo "missing $py: run scripts/setup_test.sh" >&2; exit 1; }
exec "$py" -m pytest -q -x -p no:cacheprovider "$@"
