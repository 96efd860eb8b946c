#!/usr/bin/env bash
# Runs Pagoda's CUDA tests and benchmarks on a GPU machine, from the package scripts/gpu_pack.sh
# made (.gpu/pack.tar.xz). Meant for the device tool, one call per stage:
#   run(command="scripts/gpu_run.sh check", carry=[".gpu"])
#   run(command="scripts/gpu_run.sh bench", carry=[".gpu"])
# Stages (several may be given; each step runs under a deadline so the call ends in time):
#   check   GPU references (tools/make_gpu_references.py), the GPU test tier (ops, model parity,
#           engine), a stories260K generation, a Llama-3.2-1B-shaped smoke benchmark
#   tests   GPU references + the whole GPU test tier
#   bench   Llama-3-8B and Llama-3.2-1B-shaped random BF16 models (SHAPES to choose): pagoda bench
#           (decode at batch 1/8/64 with graphs on and off, prefill 8192), offline throughput
#           (1000 requests of 128/128 and of 1000/1000) and the transformers baseline
#           (tools/hf_baseline.py, batch 64, same lengths) in the same call
# Everything is logged under $OUT (logs.tgz, summary.txt, *.json); the end of summary.txt is printed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/pagoda-out}
mkdir -p "$OUT"
LOGS=/tmp/pagoda-logs
mkdir -p "$LOGS"
SUMMARY=$OUT/summary.txt
START=$(date +%s)
BUDGET=${PAGODA_GPU_BUDGET_S:-560}
PG=/tmp/pg
if [ ! -x $PG/bin/pagoda ]; then
  mkdir -p $PG && tar -xJf .gpu/pack.tar.xz -C $PG || { echo "no .gpu/pack.tar.xz (carry .gpu)"; exit 1; }
fi
export LD_LIBRARY_PATH=$PG/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PAGODA_MODELS_DIR=$PG/models PAGODA_SHARED_DIR=$PG/shared PAGODA_TESTDATA_DIR=$PWD/testdata
export PAGODA_BINARY=$PG/bin/pagoda PAGODA_GPU_REF_DIR=/tmp/gpuref PYTHONUNBUFFERED=1
PAGODA=$PG/bin/pagoda
TESTS=$PG/bin/pagoda_gpu_tests
SHM=/dev/shm
[ -w /dev/shm ] || SHM=/tmp

log() { echo "$*" | tee -a "$SUMMARY"; }
# step NAME MAX_SECONDS CMD...: runs CMD with a timeout (capped by the call's remaining budget),
# full output to $LOGS/NAME.log, the rc and the last lines to the summary.
step() {
  local name=$1 max=$2
  shift 2
  local left=$((BUDGET - ($(date +%s) - START)))
  local t=$((max < left ? max : left))
  if [ "$t" -le 5 ]; then
    log "=== $name: skipped (no time left)"
    return 124
  fi
  local t0=$(date +%s)
  timeout --kill-after=5 "$t" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  log "=== $name rc=$rc $(($(date +%s) - t0))s (limit ${t}s): $*"
  grep -E "^\[( *FAILED|  PASSED|  SKIPPED) \]|Failure|rror|\[gpu-parity\].*bf16|\[cpu-vs|\[cuda-|\[kbench|CUDA check|PAGODA_CHECK" "$LOGS/$name.log" | head -n 60 >>"$SUMMARY"
  tail -n "${TAILN:-6}" "$LOGS/$name.log" >>"$SUMMARY"
  return $rc
}
finish() {
  tar -C "$LOGS" -czf "$OUT/logs.tgz" . 2>/dev/null
  log "=== total $(($(date +%s) - START))s"
  tail -c 11000 "$SUMMARY"
}
trap finish EXIT

stage_check() {
  step env 30 bash -c 'nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.mem,driver_version --format=csv; nproc; free -g; df -h /dev/shm /tmp; uname -r; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"'
  step gpuref 120 python3 tools/make_gpu_references.py --out /tmp/gpuref
  if ! step ops 150 $TESTS --gtest_filter='CudaOps.*'; then
    local failed
    failed=$(grep -oE '^\[  FAILED  \] CudaOps\.[A-Za-z0-9_]+' "$LOGS/ops.log" | awk '{print $4}' | sort -u | paste -sd: -)
    [ -n "$failed" ] || failed='CudaOps.*'
    TAILN=30 step ops_memcheck 150 compute-sanitizer --tool memcheck --print-limit 10 $TESTS --gtest_filter="$failed"
  fi
  step parity 150 $TESTS --gtest_filter='CudaParity.*'
  step engine 200 $TESTS --gtest_filter='CudaEngine.*'
  step stories 30 $PAGODA generate --device cuda -m $PG/shared/models/stories260K/stories260K.gguf -p "Once upon a time" -n 40 --temperature 0
  step make1b 90 python3 tools/make_random_llama.py llama3.2-1b $SHM/llama3.2-1b
  TAILN=14 step bench1b 150 $PAGODA bench -m $SHM/llama3.2-1b --device cuda -p 2048 -n 64 -b 1,8,64 --compare-graphs -r 2 \
    --requests 256 --input-len 128 --output-len 128
}

# The test tier again (fast), so a benchmark call also validates the code it measures.
stage_tests() {
  step gpuref 120 python3 tools/make_gpu_references.py --out /tmp/gpuref
  step tests 200 $TESTS
}

# Ops, f32 parity and the engine tests on the tiny model only (no references to make): ~30 s.
stage_quicktests() {
  step quicktests 120 $TESTS --gtest_filter='CudaOps.*:CudaParity.F32*:CudaParity.Cpu*:CudaEngine.*'
}

bench_model() {  # SHAPE
  local shape=$1 m=$SHM/$1
  [ -d $m ] || step make_$shape 150 python3 tools/make_random_llama.py $shape $m
  TAILN=14 step bench_$shape 150 $PAGODA bench -m $m --device cuda -p 8192 -n 128 -b 1,8,64 --compare-graphs -r 3
  TAILN=4 step tp128_$shape 120 $PAGODA bench -m $m --device cuda -p 0 -n 0 --requests 1000 --input-len 128 --output-len 128 --max-num-seqs 256
  TAILN=4 step hf_$shape 200 python3 tools/hf_baseline.py $shape --runs=64:128:128,64:1000:1000
  TAILN=4 step tp1000_$shape 240 $PAGODA bench -m $m --device cuda -p 0 -n 0 --requests 1000 --input-len 1000 --output-len 1000 --max-num-seqs 256
}

# The last call: references, every GPU test plus the kernel benchmarks, then pagoda's benchmarks
# on both shapes (the transformers baseline is measured by `bench`; reuse its numbers).
stage_final() {
  step gpuref 100 python3 tools/make_gpu_references.py --out /tmp/gpuref
  PAGODA_GPU_KERNEL_BENCH=1 TAILN=3 step tests 150 $TESTS
  local m8=$SHM/llama3-8b m1=$SHM/llama3.2-1b
  step make_8b 100 python3 tools/make_random_llama.py llama3-8b $m8
  TAILN=14 step bench_8b 90 $PAGODA bench -m $m8 --device cuda -p 8192 -n 128 -b 1,8,64 --compare-graphs -r 3
  TAILN=6 step pp64_8b 60 $PAGODA bench -m $m8 --device cuda -p 8192 -n 0 -r 3 --prefill-tile 64
  TAILN=8 step tp1000_8b 220 $PAGODA bench -m $m8 --device cuda -p 0 -n 0 --requests 1000 --input-len 1000 --output-len 1000 --max-num-seqs 256
  TAILN=4 step tp128_8b 60 $PAGODA bench -m $m8 --device cuda -p 0 -n 0 --requests 1000 --input-len 128 --output-len 128 --max-num-seqs 256
  rm -rf $m8
  step make_1b 60 python3 tools/make_random_llama.py llama3.2-1b $m1
  TAILN=14 step bench_1b 60 $PAGODA bench -m $m1 --device cuda -p 8192 -n 128 -b 1,8,64 --compare-graphs -r 3
  TAILN=8 step tp1000_1b 90 $PAGODA bench -m $m1 --device cuda -p 0 -n 0 --requests 1000 --input-len 1000 --output-len 1000 --max-num-seqs 256
  TAILN=4 step tp128_1b 40 $PAGODA bench -m $m1 --device cuda -p 0 -n 0 --requests 1000 --input-len 128 --output-len 128 --max-num-seqs 256
}

stage_bench() {
  step env 30 bash -c 'nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.mem,driver_version --format=csv'
  for shape in ${SHAPES:-llama3-8b llama3.2-1b}; do bench_model $shape; done
}

for s in "$@"; do
  case "$s" in
    check) stage_check ;;
    bench) stage_bench ;;
    tests) stage_tests ;;
    quicktests) stage_quicktests ;;
    final) stage_final ;;
    *) log "unknown stage $s" ;;
  esac
done
