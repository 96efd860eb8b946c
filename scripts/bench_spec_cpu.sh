#!/usr/bin/env bash
# Batch-1 speculative decoding on the CPU: plain vs speculative greedy decoding of one prompt,
# alternating runs (the machine's load drifts), the outputs compared token for token.
#   scripts/bench_spec_cpu.sh TARGET.gguf PROMPT_FILE TOKENS REPEATS -- SPEC_OPTIONS...
# e.g. (the Qwen2.5-Coder pair of scripts/fetch_qwen_coder.sh):
#   scripts/bench_spec_cpu.sh models/qwen2.5-coder-1.5b.gguf bench/prompts/code_completion.txt 128 3 -- \
#       --spec-method draft --spec-model models/qwen2.5-coder-0.5b-instruct.gguf
#   scripts/bench_spec_cpu.sh models/qwen2.5-coder-1.5b.gguf bench/prompts/edit_code.txt 200 3 -- --spec-method ngram
# Prints each run's decode tok/s (pagoda generate's figure: tokens after the first over the time
# after the first) and acceptance, then the medians and their ratio. On a machine shared with other
# work the wall-clock figures drift; the CPU time per generated token (user + sys of the process,
# less a 1-token run's, over the tokens after the first; 1 thread: THREADS=1) is the load-robust
# figure of the work done, printed beside them. PAGODA (default build/pagoda) and THREADS (default:
# all cores) override.
set -euo pipefail
target=$1 prompt_file=$2 tokens=$3 repeats=$4
shift 4
[ "${1:-}" = "--" ] && shift
bin=${PAGODA:-build/pagoda}
threads=${THREADS:-0}
prompt=$(cat "$prompt_file")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
plain=() spec=() cpu_plain=() cpu_spec=()
cpu_of() {  # cpu seconds of: pagoda generate ... -n N
  /usr/bin/time -f "%U %S" -o "$tmp/time" "$@" > /dev/null 2>&1
  awk '{print $1 + $2}' "$tmp/time"
}
for i in $(seq 1 "$repeats"); do
  for mode in plain spec; do
    args=()
    [ $mode = spec ] && args=("$@")
    "$bin" generate -m "$target" -t "$threads" --prompt "$prompt" -n "$tokens" --temperature 0 --ids "${args[@]}" \
      > "$tmp/$mode.ids" 2> "$tmp/$mode.err"
    rate=$(grep -o 'generated [0-9]* tokens, [0-9.]* tok/s' "$tmp/$mode.err" | awk '{print $4}')
    acc=$(grep -o 'acceptance .*' "$tmp/$mode.err" || true)
    echo "run $i $mode: $rate tok/s ${acc}"
    c1=$(cpu_of "$bin" generate -m "$target" -t "$threads" --prompt "$prompt" -n 1 --temperature 0 "${args[@]}")
    cn=$(cpu_of "$bin" generate -m "$target" -t "$threads" --prompt "$prompt" -n "$tokens" --temperature 0 "${args[@]}")
    cpt=$(awk -v a="$cn" -v b="$c1" -v n="$tokens" 'BEGIN {printf "%.4f", (a - b) / (n - 1)}')
    echo "run $i $mode: $cpt cpu s/token"
    if [ $mode = plain ]; then plain+=("$rate"); cpu_plain+=("$cpt"); cp "$tmp/plain.ids" "$tmp/ref.ids"; else spec+=("$rate"); cpu_spec+=("$cpt"); fi
    if [ $mode = spec ] && ! cmp -s "$tmp/ref.ids" "$tmp/spec.ids"; then
      echo "OUTPUT DIFFERS from plain decoding:"; cat "$tmp/ref.ids" "$tmp/spec.ids"; exit 1
    fi
  done
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
mp=$(median "${plain[@]}") ms=$(median "${spec[@]}")
cp_=$(median "${cpu_plain[@]}") cs=$(median "${cpu_spec[@]}")
echo "identical greedy output in every run; median plain $mp tok/s, speculative $ms tok/s, ratio $(awk -v a="$ms" -v b="$mp" 'BEGIN {printf "%.2f", a / b}')"
echo "cpu time per token: median plain $cp_ s, speculative $cs s, ratio (plain / speculative) $(awk -v a="$cp_" -v b="$cs" 'BEGIN {printf "%.2f", a / b}')"
