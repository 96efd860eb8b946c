#!/usr/bin/env bash
# Regenerates the random-weight tiny models (models/tiny/, git-ignored) with the test venv and
# verifies each file's sha256 against testdata/reference/models.json, i.e. that they are exactly
# the models the committed reference logits were computed from. Fails loudly otherwise. Then
# writes the packed-integer checkpoints of some of them (models/tiny/quant/: GPTQ, AWQ,
# compressed-tensors; tools/make_quantized_checkpoint.py), whose tests need no stored references,
# and the EAGLE-3 heads (models/tiny/eagle3-*; tools/make_draft_heads.py).
# Takes a few seconds; scripts/setup_test.sh runs it. Usage: scripts/make_test_models.sh [--out DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
py="$root/.venv-test/bin/python"
[ -x "$py" ] || { echo "make_test_models: missing $py: run scripts/setup_python.sh" >&2; exit 1; }
out="$root/models/tiny"
args=("$@")
for ((i = 0; i < ${#args[@]}; ++i)); do
  [ "${args[$i]}" = --out ] && out="${args[$((i + 1))]}"
done
"$py" "$root/tools/make_tiny_models.py" --check --shared "${PAGODA_SHARED_DIR:-$root/../shared}" "$@"
"$py" "$root/tools/make_quantized_checkpoint.py" --src "$out" --out "$out/quant" > /dev/null
# Random-weight EAGLE-3 heads for the tiny llama, in the released layout, and malformed copies.
"$py" "$root/tools/make_draft_heads.py" --out "$out"
