#!/usr/bin/env bash
# Builds the pagoda binary (Release, no tests) and runs the main job on the default model:
# a chat completion with SmolLM2-135M-Instruct (Q4_1, fetched by scripts/setup.sh). Needs only what scripts/setup.sh installs: no tests,
# no micro-benchmarks.
#   scripts/run.sh                         # default prompt
#   scripts/run.sh "Why is the sky blue?"  # your prompt
#   PAGODA_MODEL=path/to/model.gguf scripts/run.sh "..."
set -euo pipefail
cd "$(dirname "$0")/.."
build=${PAGODA_BUILD_DIR:-build}
model=${PAGODA_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
prompt=${1:-"Write a haiku about a lighthouse."}
[ -f "$model" ] || { echo "missing $model: run scripts/setup.sh" >&2; exit 1; }
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGODA_BUILD_TESTS=OFF -DPAGODA_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target pagoda_cli
"$build/pagoda" info --model "$model"
echo
"$build/pagoda" generate --model "$model" --chat --prompt "$prompt" -n 200 --temperature 0.7 --seed 42
