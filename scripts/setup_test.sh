#!/usr/bin/env bash
# Pagoda setup for the test suite (the README's test command; .ci/run calls it): everything
# scripts/setup.sh installs, plus the test tooling: GoogleTest, Google Benchmark, clang (fuzz
# targets), curl, Prometheus and Chromium (requirements/apt-test.txt), pybind11 and the Python
# headers for the Python package's tests (requirements/apt-python.txt), the Python test venv
# (.venv-test) and the tiny test models (models/tiny, made from ../shared/models/stories260K's
# vocabulary). Idempotent; safe to re-run. Usage: scripts/setup_test.sh [--with-peer]
#   --with-peer   also build llama-cpp-python (the benchmark peer) into .venv-peer
set -euo pipefail
cd "$(dirname "$0")/.."

want_peer=0
for a in "$@"; do
  case "$a" in
    --with-peer) want_peer=1 ;;
    *) echo "setup_test: unknown option $a" >&2; exit 2 ;;
  esac
done

bash scripts/apt_install.sh requirements/apt-run.txt requirements/apt-python.txt requirements/apt-test.txt
bash scripts/fetch_models.sh
bash scripts/setup_python.sh
bash scripts/make_test_models.sh
if [ "$want_peer" = 1 ]; then
  bash scripts/setup_peer.sh
fi
echo "setup_test: done"
