#!/usr/bin/env bash
# The benchmark peer: llama.cpp through the llama-cpp-python package, built from source with clang
# for this machine (GGML_NATIVE) into .venv-peer. Takes a while on 2 cores; idempotent.
# Also the gguf package (tools/quant_compare.py dequantizes with it).
# Usage: scripts/setup_peer.sh   then   .venv-peer/bin/python scripts/peer_bench.py MODEL.gguf
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-peer
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
if ! "$venv/bin/python" -c "import llama_cpp" 2>/dev/null; then
  "$venv/bin/python" -m pip install -q --upgrade pip
  CC=clang CXX=clang++ CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_OPENMP=OFF" CMAKE_BUILD_PARALLEL_LEVEL=2 \
    "$venv/bin/python" -m pip install -q --no-cache-dir "llama-cpp-python==0.3.36"
fi
"$venv/bin/python" -c "import gguf" 2>/dev/null || "$venv/bin/python" -m pip install -q "gguf==0.19.0"
"$venv/bin/python" -c "import llama_cpp; print('setup_peer: llama_cpp', llama_cpp.__version__)"
