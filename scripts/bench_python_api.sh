#!/usr/bin/env bash
# pagoda.LLM.generate vs `pagoda bench throughput` on the same work (bench/python_api_throughput.py),
# with the Python module of a build folder (target pagoda_python) and that build's binary.
#   scripts/bench_python_api.sh [--build DIR] [ARGS of bench/python_api_throughput.py...]
# Default model: the SmolLM2 default; default 6 rounds (alternating which side goes first) of 64 prompts x 128 in / 64 out.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
if [ "${1:-}" = "--build" ]; then build=$2; shift 2; fi
py=python3; [ -x .venv-test/bin/python ] && py=.venv-test/bin/python
[ -f "$build/python/pagoda/__init__.py" ] || { echo "bench_python_api: build target pagoda_python in $build first" >&2; exit 1; }
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) cores; other jobs on the machine affect both figures alike)"
PYTHONPATH="$build/python" exec "$py" bench/python_api_throughput.py --binary "$build/pagoda" \
  --model models/SmolLM2-135M-Instruct.Q4_1.gguf "$@"
