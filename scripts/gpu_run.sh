#!/usr/bin/env bash
# Runs Pagoda's CUDA tests and benchmarks on a GPU machine, from the package scripts/gpu_pack.sh
# made (.gpu/pack.tar.xz). Meant for the device tool, one call per stage:
#   run(command="scripts/gpu_run.sh check", carry=[".gpu"])
#   run(command="scripts/gpu_run.sh bench", carry=[".gpu"])
# Stages (several may be given; each step runs under a deadline so the call ends in time):
#   check   GPU references (tools/make_gpu_references.py), the GPU test tier (ops, model parity,
#           engine), a stories260K generation, a Llama-3.2-1B-shaped smoke benchmark
#   tests   GPU references + the whole GPU test tier
#   gateway the gateway's overhead (scripts/bench_gateway.sh: 64 streams, sequential runs for
#           throughput and CPU per token, paired interleaved runs for TTFT, 5 rounds) with worker
#           (2 cores), gateway (2 I/O threads on 2 cores) and client on cores of their own: a CPU
#           worker on stories260K, a CUDA worker on the random Llama-3.2-1B shape with a 512-token
#           vocabulary (stories260K's tokenizer; model 1bv512), a CUDA worker on stories260K (~60k
#           tokens/s: the gateway's worst case); about 135 s (+ ~30 s making the 1B model if absent;
#           a baseline arm adds ~40 %). Needs pagoda-gateway in the pack
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
# Unpacked once per package: a warm machine keeps /tmp/pg between calls, a new package replaces it.
pack_id=$(md5sum .gpu/pack.tar.xz 2>/dev/null | cut -c1-32)
if [ -z "$pack_id" ]; then echo "no .gpu/pack.tar.xz (carry .gpu)"; exit 1; fi
if [ "$(cat $PG/.pack_id 2>/dev/null)" != "$pack_id" ]; then
  rm -rf $PG && mkdir -p $PG && tar -xJf .gpu/pack.tar.xz -C $PG && echo "$pack_id" > $PG/.pack_id ||
    { echo "cannot unpack .gpu/pack.tar.xz"; exit 1; }
fi
# The tiny test models, when the package does not carry them (gpu_pack.sh): made here, every
# file's sha256 checked against testdata/reference/models.json (the script fails otherwise).
export PYTHONPATH=$PG/site${PYTHONPATH:+:$PYTHONPATH}
if [ ! -d $PG/models/tiny ]; then
  mkdir -p $PG/models
  python3 tools/make_tiny_models.py --check --shared $PG/shared --out $PG/models/tiny >/tmp/make_tiny_models.log 2>&1 &&
    python3 tools/make_quantized_checkpoint.py --src $PG/models/tiny --out $PG/models/tiny/quant >>/tmp/make_tiny_models.log 2>&1 &&
    python3 tools/make_draft_heads.py --out $PG/models/tiny >>/tmp/make_tiny_models.log 2>&1 ||
    { echo "tiny models: not made or not identical (the GPU tests that read them fail):"; tail -5 /tmp/make_tiny_models.log; }
fi
# cuSPARSELt (2:4 sparse GEMMs, backend/cuda/sparse_2of4.h): the GPU image's pip package (PyTorch's).
cusparselt_dir=$(python3 -c 'import glob, os, site; d = [os.path.dirname(p) for s in site.getsitepackages() for p in glob.glob(s + "/nvidia/*/lib/libcusparseLt.so.0") + glob.glob(s + "/nvidia/cusparselt/lib/libcusparseLt.so.0")]; print(d[0] if d else "")' 2>/dev/null)
# NCCL (tensor parallelism, runtime/cuda_comm.h): the toolkit's, else PyTorch's pip package.
nccl_dir=$(python3 -c 'import glob, os, site; d = [os.path.dirname(p) for s in site.getsitepackages() for p in glob.glob(s + "/nvidia/nccl/lib/libnccl.so.2")]; print(d[0] if d else "")' 2>/dev/null)
export LD_LIBRARY_PATH=$PG/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib${cusparselt_dir:+:$cusparselt_dir}${nccl_dir:+:$nccl_dir}:${LD_LIBRARY_PATH:-}
export PAGODA_MODELS_DIR=$PG/models PAGODA_SHARED_DIR=$PG/shared PAGODA_TESTDATA_DIR=$PWD/testdata
export PAGODA_BINARY=$PG/bin/pagoda PAGODA_GPU_REF_DIR=/tmp/gpuref PYTHONUNBUFFERED=1
PAGODA=$PG/bin/pagoda
TESTS=$PG/bin/pagoda_gpu_tests
KBENCH=$PG/bin/pagoda_cuda_kernel_bench
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

# The large-model stages (offload70b, mixtral, a3b, int4_70b).
source scripts/gpu_stages_large.sh

stage_check() {
  step env 30 bash -c 'nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.mem,driver_version --format=csv; nproc; free -g; df -h /dev/shm /tmp; uname -r; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"'
  step gpuref 120 python3 tools/make_gpu_references.py --out /tmp/gpuref
  if ! step ops 150 $TESTS --gtest_filter='CudaOps.*:CudaAttention.*:Backends/OpCase.*'; then
    local failed
    failed=$(grep -oE '^\[  FAILED  \] Cuda(Ops|Attention)\.[A-Za-z0-9_]+' "$LOGS/ops.log" | awk '{print $4}' | sort -u | paste -sd: -)
    [ -n "$failed" ] || failed='CudaOps.*:CudaAttention.*:Backends/OpCase.*'
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
  step quicktests 120 $TESTS --gtest_filter="${QUICK_FILTER:-CudaOps.*:CudaAttention.*:Backends/OpCase.*:CudaParity.F32*:CudaParity.Cpu*:CudaEngine.*}"
}

bench_model() {  # SHAPE
  local shape=$1 m=$SHM/$1
  [ -d $m ] || step make_$shape 150 python3 tools/make_random_llama.py $shape $m
  TAILN=14 step bench_$shape 150 $PAGODA bench -m $m --device cuda -p 8192 -n 128 -b 1,8,64 --compare-graphs -r 3
  TAILN=4 step tp128_$shape 120 $PAGODA bench -m $m --device cuda -p 0 -n 0 --requests 1000 --input-len 128 --output-len 128 --max-num-seqs 256
  TAILN=4 step hf_$shape 200 python3 tools/hf_baseline.py $shape --runs=64:128:128,64:1000:1000
  TAILN=4 step tp1000_$shape 240 $PAGODA bench -m $m --device cuda -p 0 -n 0 --requests 1000 --input-len 1000 --output-len 1000 --max-num-seqs 256
}

# Building blocks of a call (run in the order given on the command line; each step has its own
# deadline, capped by what is left of PAGODA_GPU_BUDGET_S):
#   env       GPU name, clocks, driver
#   alltests  GPU references and every GPU test
#   m8b m1b   (m8bpeaked: the peaked 8B of spec8b, same shape and work) make the random BF16 model; pagoda bench: prefill 8192 (query tile 128, then 64),
#             decode tg128 at batch 1/8/64 with graphs on and off; offline throughput 1000 x 128/128
#             (one run per --max-num-seqs in TP128_SEQS, default 256; TP_KV: the KV dtype)
#   tp128_8b tp128_1b  only the 1000 x 128/128 runs of m8b / m1b (TP128_SEQS, TP_KV)
#   hf8b hf1b transformers generate() baseline, batch 64, 128/128 and 1000/1000 (tools/hf_baseline.py)
#   tp8b tp1b offline throughput 1000 x 1000/1000 (progress lines every 10 s); TP_SEQS: one run per
#             --max-num-seqs in the list (default 256); TP_KV: the KV dtype (e.g. f8_e4m3); TP_QUANT:
#             --quantization (e.g. fp8: FP8 W8A8)
#   prof8b    per-op GPU time (--cuda-profile): decode b1/b64, prefill 8192, a 256-request wave
#   wave8b    (wavesimt8b: with PAGODA_ROW_ATTENTION=simt) one wave of 256 requests of 1000 in / 300 out (a quick proxy for tp8b)
#   decode8b  batch-1 decode only (decodesimt8b / decodemma8b: with PAGODA_ROW_ATTENTION=simt / mma;
#             decode1b: the default on the 1B shape)
#   smallb8b  tg128 at batch 1-4 with the GEMV up to 1, 4 and 2 rows (PAGODA_GEMV_MAX_ROWS; needs
#             the 8B model: run after m8b or decode8b)
#   kbench    the CUDA kernel benchmarks (pagoda_cuda_kernel_bench, bench/cuda/)
#   kbenchverify  only a verification step's kernels (matmuls at 1-8 rows, 5-row attention)
#   qkbench   only the qgemv section of the kernel bench: the int8 GEMV over Q4_0 / Q4_K / Q8_0 / Q6_K
#             weights on the 8B shapes at M = 1, 2, 8 (weights cold, % of the copy bandwidth) and the
#             q8 activation kernels (rms_norm_q8 fused vs rms_norm + quantize_activations_q8); ~10 s
#   q8tests   the quantized-matmul GPU tests (CudaQuant.*, incl. rms_norm_q8 bit for bit against the
#             two kernels) and the native-quant model parity (the fused norm on every decode step); ~40 s
#   cleanuptests  the suites over the shared kernel helpers and the draft-head plan (CudaFp8.*,
#             CudaQuant.*, CudaMoe.*, CudaOps.*, the op cases, CudaDraftHeads.*, CudaEngine.*, the f32
#             parity): the quicktests set plus FP8, quantized, MoE and draft-head tests; ~90 s (estimate)
#   trace8b trace1b  block trace of an eager tg step, one per SWEEP entry (stage_trace)
#   ncu       Nsight Compute sections for kernel-bench launches (NCU_KERNELS, NCU_SKIP, NCU_COUNT,
#             NCU_ONLY, NCU_TAG)
#   spectests the verification-graph and speculative-decoding GPU tests (CudaStepGraphs.*, the n-gram
#             and draft-model greedy-identity engine tests); SPEC_REFS=1 makes the GPU references
#             first (their bf16 cases)
#   spec8b specdraft8b  speculative decoding speedup vs acceptance on the 8B shape (pagoda bench spec;
#             free drafting, or the 1B shape as draft model on the same GPU): batch 1 and 64, on
#             the peaked random 8B (make_random_llama.py --peaked), in the default (fast) kernels
#   serve     `pagoda serve --device cuda` answers a completion; `pagoda bench throughput --device
#             cuda` (the Engine path, 256 x 64/64), both on stories260K (random models have no tokenizer)
#   moe       mixture of experts (backend/cuda/moe.cu, moe_gemm.cu): a random OLMoE-1B-7B-shaped BF16 model
#             (tools/make_random_moe.py; MOE_SHAPE, MOE_LAYERS), pagoda bench prefill 512 and tg128
#             at batch 1 and 8; "bw %" counts the bytes a step reads (the selected experts only);
#             MOE_PROFILE=1: then the per-op profile of batch-1 decode (~30 s more)
#   moetests  GPU references + the MoE GPU tests (CudaMoe.*, CudaParity.*, the MoE engine test)
#   mixtral a3b int4_70b  random weights made at load (--load-format dummy, stage_dummy_bench):
#             Mixtral-8x7B bf16 (93 GB: needs an H200), Qwen3-30B-A3B bf16, Llama-3-70B INT4 (on line)
#   a3bpeer   Qwen3-30B-A3B BF16 GGUF on Pagoda and llama.cpp CUDA (after peerstart; stage_a3bpeer)
#   corpus    the structured-output corpora on `serve --device cuda`, every answer checked (stage_corpus)
#   cold8b    cold start of the 8B shape from /dev/shm: pagoda generate -n 1 (launch to first token,
#             BF16 and F16 GGUF) against llama-bench -p 0 -n 1, and serve's launch to /health 200
#             (lazy and start-up graph capture); needs peerstart earlier in the call (stage_cold8b)
#   ngltests  the layer split's GPU tests (CudaLayerSplit.*; GPU references made if absent), ~60 s
#   ngl8b     CPU + GPU layer split on the 8B F16 GGUF of peerstart: pagoda bench --n-gpu-layers 16
#             and llama-bench -ngl 16, pp512 + tg128, two alternating rounds (stage_ngl8b; ~200 s
#             after the peer is ready)
#   offload8b weight offload on the 8B shape (stage_offload8b): pagoda bench resident, then with
#             --cpu-offload-gb OFFLOAD_GB (default 8.1: a 10 GB device budget at batch 1), decode
#             tg16 at batch 1 and 64 against the host -> device bound; offline throughput in a 10 GB
#             budget (--gpu-memory-utilization, auto offload). ~250 s with the model made
#   fp8       FP8 W8A8: the CudaFp8.* GPU tests, then the 8B shape with --quantization fp8 against
#             bf16: prefill 8192 (ratio to the FP8 GEMM rate), tg128 b1/8/64, 1000 x 128/128 (stage_fp8)
#   onlinequant  --quantization int4|int8|fp8 on CUDA: perplexity and KL of the tiny Llama-3 f16 GGUF
#             against its own CUDA f16 run (the CPU's figures: tests/e2e/quantization_cli_test.py),
#             then the Llama-3.2-1B shape quantized on line: prefill 512 and tg128 at batch 1 and 8
#             against bf16 (stage_onlinequant; about 170 s with the 1B model made)
#   structured  prompt logprobs (CUDA vs CPU), the structured-output corpora on `serve --device cuda`,
#             JSON-schema-constrained vs unconstrained batch-64 decode (stage_structured)
#   sbench    the GPU test of structured outputs with speculation, then the constrained-vs-
#             unconstrained batch-64 decode benchmarks of `structured` (stage_sbench, ~5 min)
#   sgpt2     the structured-output tail at GPT-2's vocabulary: `pagoda bench masks` on the host's
#             cores (two runs, ~10 s each), then the 1B shape constrained vs unconstrained in 8
#             alternating rounds (stage_sgpt2; ~2.5 min, +~1.5 min making the 1B model if absent)
stage_offload8b() {
  ensure_model 8b
  local m=$(model_dir 8b) total util
  TAILN=8 step offload_resident_8b 60 $PAGODA bench -m $m --device cuda -p 512 -n 16 -b 1,64 -r 1
  TAILN=10 step offload_bench_8b 120 $PAGODA bench -m $m --device cuda -p 512 -n 16 -b 1,64 -r 2 --cpu-offload-gb ${OFFLOAD_GB:-8.1}
  total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  util=$(awk "BEGIN { printf \"%.4f\", 10000 / ($total * 1.048576) }")
  TAILN=12 step offload_budget10g_8b 120 $PAGODA bench -m $m --device cuda -p 0 -n 0 --requests 64 --input-len 128 \
    --output-len 16 --max-num-seqs 64 --gpu-memory-utilization $util
}
stage_onlinequant() {
  local f=$PAGODA_MODELS_DIR/tiny/llama3/model-f16.gguf q m
  TAILN=3 step oq_base 30 $PAGODA perplexity $f -f README.md -c 64 --chunks 4 --device cuda --kv-dtype f32 --save-logits /tmp/oq.kl --json
  for q in int4 int8 fp8; do
    TAILN=14 step oq_$q 30 $PAGODA perplexity $f -f README.md -c 64 --chunks 4 --device cuda --kv-dtype f32 --quantization $q --kl-base /tmp/oq.kl --json
  done
  ensure_model 1b
  m=$(model_dir 1b)
  for q in none int4 int8; do
    TAILN=8 step oq_bench1b_$q 60 $PAGODA bench -m $m --device cuda --quantization $q -p 512 -n 128 -b 1,8 -r 3
  done
}
# FP8 W8A8 (DType::kF8E4M3Rows on the device): the FP8 GPU tests (CudaFp8.*: activation
# quantization, the FP8 GEMV and the cuBLASLt FP8 GEMM against their references, models against
# their bf16-dequantized forward at batch 1/4/16), then the 8B shape quantized on line
# (--quantization fp8) against bf16 in the same call: pagoda bench prefill 8192 (the FP8 run's
# compute peak is the cuBLASLt FP8 GEMM at 8192^3 measured in the same process) and tg128 at batch
# 1/8/64; offline throughput 1000 x 128/128 with FP8 (bf16's: m8b / tp128_8b). About 220 s with the
# 8B model made (+~90 s making it).
stage_fp8() {
  step fp8tests 90 $TESTS --gtest_filter='CudaFp8.*'
  ensure_model 8b
  local m=$(model_dir 8b)
  TAILN=14 step fp8_bench_8b 100 $PAGODA bench -m $m --device cuda --quantization fp8 -p 8192 -n 128 -b 1,8,64 -r 2
  TAILN=12 step fp8_bf16_bench_8b 70 $PAGODA bench -m $m --device cuda -p 8192 -n 128 -b 1,8,64 -r 2
  TAILN=4 step fp8_tp128_8b 90 $PAGODA bench -m $m --device cuda --quantization fp8 -p 0 -n 0 --requests 1000 \
    --input-len 128 --output-len 128 --max-num-seqs 256
  # cuBLASLt without outer-vector FP8 kernels for a shape: the fallback's warning
  grep -h "outer-vector scales for" "$LOGS"/fp8_*.log 2>/dev/null | head -n 2 >>"$SUMMARY"
}
# FP8 decode at 1-8 rows with the FP8 GEMV taking up to R rows (R = 1, 2, 4, 8; more rows take
# cuBLASLt's FP8 GEMM): where the GEMV stops paying (on the H100 at 8 rows it ran at 0.71x bf16).
# ~70 s after the model exists.
stage_fp8rows() {
  local m r
  ensure_model 8b
  m=$(model_dir 8b)
  for r in 1 2 4 8; do
    TAILN=6 step fp8rows_$r 60 $PAGODA bench -m $m --device cuda --quantization fp8 -p 0 -n 64 -b 1,2,4,8 -r 2 \
      --cuda-quant-gemv-max-rows $r
  done
}
stage_alltests() {
  step gpuref 140 python3 tools/make_gpu_references.py --out /tmp/gpuref
  TAILN=3 step tests 260 $TESTS
}
# 8bpeaked: the 8B shape with a peaked next-token distribution (make_random_llama.py --peaked: a
# greedy continuation that survives a change of kernels, for the speculative-decoding replay).
# 1bv512: the Llama-3.2-1B shape with stories260K's 512-token vocabulary (served with that
# tokenizer, every generated id has a text piece, so a stream has an event per token).
model_dir() { case $1 in 8b) echo $SHM/llama3-8b ;; 1b) echo $SHM/llama3.2-1b ;; 1bv512) echo $SHM/llama3.2-1b-v512 ;; 8bpeaked) echo $SHM/llama3-8b-peaked ;; 8b2of4) echo $SHM/llama3-8b-2of4 ;; esac; }
model_shape() { case $1 in 8b|8bpeaked|8b2of4) echo llama3-8b ;; 1b|1bv512) echo llama3.2-1b ;; esac; }
model_flags() { case $1 in 8bpeaked) echo --peaked ;; 1bv512) echo --vocab-size 512 ;; 8b2of4) echo --sparse-2of4 ;; esac; }
ensure_model() {
  [ -f "$(model_dir $1)/config.json" ] ||
    step make_$1 150 python3 tools/make_random_llama.py "$(model_shape $1)" "$(model_dir $1)" $(model_flags $1)
}
stage_model() {  # 8b | 1b
  local m
  ensure_model $1
  m=$(model_dir $1)
  TAILN=14 step bench_$1 90 $PAGODA bench -m $m --device cuda -p 8192 -n 128 -b 1,8,64 --compare-graphs -r 3
  [ "${PP64:-1}" = 1 ] && TAILN=6 step pp64_$1 60 $PAGODA bench -m $m --device cuda -p 8192 -n 0 -r 3 --prefill-tile 64
  stage_tp128 $1
}
# Offline throughput, 1000 requests of LEN in / LEN out, one run per --max-num-seqs in SEQS
# (TP_KV: the KV dtype; TP_QUANT: --quantization, e.g. fp8). Usage: stage_throughput SHAPE LEN "SEQS" LIMIT_S TAILN
stage_throughput() {
  local m seqs
  ensure_model $1
  m=$(model_dir $1)
  for seqs in $3; do
    TAILN=$5 step tp$2_$1_${TP_KV:-bf16}${TP_QUANT:+_$TP_QUANT}_$seqs $4 $PAGODA bench -m $m --device cuda -p 0 -n 0 --requests 1000 --input-len $2 --output-len $2 --max-num-seqs $seqs ${TP_KV:+--kv-dtype $TP_KV} ${TP_QUANT:+--quantization $TP_QUANT}
  done
}
# The 8B prefill of 8192 tokens with the default prefill attention (wgmma on compute capability 9.0)
# and with the mma.sync kernel, alternated twice (decisions.md D84). ~90 s after the model exists.
stage_prefill_ab() {
  local m i
  ensure_model 8b
  m=$(model_dir 8b)
  for i in 1 2; do
    TAILN=3 step pf_auto_$i 60 $PAGODA bench -m $m --device cuda -p 8192 -n 0 -r 3
    TAILN=3 step pf_mma_$i 60 $PAGODA bench -m $m --device cuda -p 8192 -n 0 -r 3 --cuda-prefill-attention mma
  done
}
# 2:4 sparsity: the GPU tests of the sparse path; the kernel bench's sparse section (the dense GEMV
# vs our 2:4 GEMV at 1..8 rows, cuBLASLt vs cuSPARSELt at 16..8192); the 8B shape pruned to 2:4
# (make_random_llama.py --sparse-2of4) with the sparse GEMMs (--cuda-sparsity auto) against the
# dense ones on the same checkpoint (--cuda-sparsity off), alternated SPARSE_REPS times (1): prefill
# 8192 and decode at batch 1 / 8 / 64; with SPARSE_TP=1 also 1000 x 128/128 both ways. ~7 min.
stage_sparse() {
  local m i mode
  TAILN=12 step sparsetests 120 $TESTS --gtest_filter='CudaSparse.*'
  PAGODA_KBENCH_ONLY=sparse TAILN=60 step sparsekbench 150 $KBENCH
  ensure_model 8b2of4
  m=$(model_dir 8b2of4)
  for i in $(seq 1 ${SPARSE_REPS:-1}); do
    for mode in auto off; do
      TAILN=8 step sparse_${mode}_$i 90 $PAGODA bench -m $m --device cuda -p 8192 -n 128 -b 1,8,64 -r 3 --cuda-sparsity $mode
    done
  done
  [ "${SPARSE_TP:-0}" = 1 ] && for mode in auto off; do
    TAILN=4 step sparse_tp128_$mode 60 $PAGODA bench -m $m --device cuda -p 0 -n 0 --requests 1000 --input-len 128 --output-len 128 --max-num-seqs 256 --cuda-sparsity $mode
  done
}
# Tensor parallelism through the engine on one GPU: rank 0 and `pagoda tp-worker` processes with the
# host-staged communicator (PAGODA_TP_COMM=staged: NCCL refuses two ranks on one device), greedy
# `generate` at 2 and 4 ranks against one rank (stories260K on the f32 path: the same text; the tiny
# Llama-3 in bf16: printed), and `bench` at 2 ranks. ~1 min. The engine refuses CUDA ranks until the
# DISABLED_ CudaTensorParallel tests pass (D78): until then this stage shows that refusal.
stage_tp_e2e() {
  local m want got n
  for m in $PG/shared/models/stories260K/stories260K.gguf $PG/models/tiny/llama3/model-f16.gguf; do
    want=$($PAGODA generate -m $m --device cuda -p "Once upon a time" -n 32 --temperature 0 2>>$LOGS/tpe2e.log)
    for n in 2 4; do
      got=$(PAGODA_TP_COMM=staged timeout 120 $PAGODA generate -m $m --device cuda -p "Once upon a time" -n 32 \
            --temperature 0 --tensor-parallel-size $n 2>>$LOGS/tpe2e.log)
      if [ "$got" = "$want" ]; then log "[cuda-tp-e2e] $(basename $m) $n ranks (staged): same greedy text as 1 rank"
      else log "[cuda-tp-e2e] $(basename $m) $n ranks (staged): DIFFERENT text: '$got' vs '$want'"; fi
    done
  done
  PAGODA_TP_COMM=staged TAILN=8 step tpbench 120 $PAGODA bench -m $PG/models/tiny/llama3/model-f16.gguf --device cuda \
    -p 64 -n 16 -r 1 --tensor-parallel-size 2
}
stage_tp128() { stage_throughput $1 128 "${TP128_SEQS:-256}" 60 4; }
stage_tp1000() { stage_throughput $1 1000 "${TP_SEQS:-256}" ${TP1000_LIMIT:-240} 12; }
# The structured-output corpora on `pagoda serve --device cuda` (stories260K): 200 JSON schemas, 100
# regexes, the same languages as GBNF grammars, 60 choice lists and 200 tool-call requests (a Hermes
# chat template written into a copy of the GGUF), greedy and sampled (1320 requests), every answer
# checked (tests/e2e/structured_corpus_check.py: the standard library only, its JSON Schema
# validator tests/e2e/schema_subset.py). 81 s on this 2-vCPU CPU at load 14, mostly the tool
# calls' grammar work; CORPUS_KINDS=json,regex,grammar,choice leaves the tools out. The summary shows
# "1320 requests ..., 0 invalid", one line per corpus and PASS.
stage_corpus() {
  TAILN=9 step corpus_cuda 150 python3 tests/e2e/structured_corpus_check.py --binary $PAGODA \
    --model $PG/shared/models/stories260K/stories260K.gguf --device cuda --server-log "$LOGS/corpus_server.log" \
    --kinds "${CORPUS_KINDS:-json,regex,grammar,choice,tools}"
}
# The server and the Engine front ends on the device: `pagoda serve --device cuda` answers a
# completion; `pagoda bench throughput --device cuda` (Engine, batched vs one at a time).
stage_serve() {
  local port=18080
  $PAGODA serve -m $PG/shared/models/stories260K/stories260K.gguf --device cuda --port $port >"$LOGS/serve_server.log" 2>&1 &
  local pid=$!
  TAILN=3 step serve 60 python3 -c "
import json, time, urllib.request
for _ in range(50):
    try:
        urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=1); break
    except Exception: time.sleep(0.5)
req = urllib.request.Request('http://127.0.0.1:$port/v1/completions', data=json.dumps({'model': 'stories260K', 'prompt': 'Once upon a time', 'max_tokens': 24, 'temperature': 0}).encode(), headers={'Content-Type': 'application/json'})
print('[cuda-serve]', json.load(urllib.request.urlopen(req, timeout=30))['choices'][0]['text'])"
  kill $pid 2>/dev/null
  wait $pid 2>/dev/null
  tail -n 3 "$LOGS/serve_server.log" >>"$SUMMARY"
  TAILN=6 step enginetp 60 $PAGODA bench throughput -m $PG/shared/models/stories260K/stories260K.gguf --device cuda --num-prompts 256 --input-len 64 --output-len 64 --sequential 2
}
# Structured outputs and prompt logprobs on the device: the CUDA prompt-logprob kernel and engine
# against the CPU; the JSON-schema / regex / grammar / choice corpora through `pagoda serve
# --device cuda` (needs pytest, openai and jsonschema in the machine's python; skipped with a line
# saying so otherwise); batch-64 decode with a JSON-schema constraint on every request against
# unconstrained (interleaved rounds) on stories260K and on the random Llama-3.2-1B shape, with the
# corpus's compile times (stage_sbench).
stage_structured() {
  step plp 150 $TESTS --gtest_filter='CudaOps.RowLogprobsMatchTheCpu:CudaOps.LogitBiasAndMaskedLogprobsMatchTheCpu:CudaEngine.PromptLogprobsMatchTheCpu'
  stage_corpus
  stage_sbench
}
# Batch-64 decode, every request constrained to people.json vs none, 4 alternating rounds each:
# stories260K (its own 512-token vocabulary: a 0.5 ms step, the harshest ratio), the random
# Llama-3.2-1B shape with stories260K's tokenizer, and the same shape with GPT-2's 50,257-token
# vocabulary (tokenizers/vocab-vectors, a real vocabulary's grammar walk and 6.3 KB masks per
# request-step). Each prints the rounds, the median ratio and the mask time per request-step, and
# fails if an output of its batched run is not valid under the schema. First the GPU test of
# constrained requests with n-gram and draft-model speculation (device verification, greedy
# output equal to plain constrained decoding in batch-invariant mode).
stage_sbench() {
  local stories=$PG/shared/models/stories260K/stories260K.gguf
  local gpt2=$PG/shared/tokenizers/vocab-vectors/ggml-vocab-gpt-2.gguf
  TAILN=4 step sspec 90 $TESTS --gtest_filter='CudaEngine.ConstrainedOutputWithSpeculationKeepsGreedyOutput'
  TAILN=10 step sbench_stories 120 $PAGODA bench throughput -m $stories --device cuda --json-schema bench/schemas/people.json \
    --schema-dir bench/schemas/corpus --num-prompts 64 --input-len 64 --output-len 256 --rounds 4 --sequential 0
  ensure_model 1b
  TAILN=10 step sbench_1b 150 $PAGODA bench throughput -m $(model_dir 1b) --tokenizer $stories --device cuda \
    --json-schema bench/schemas/people.json --num-prompts 64 --input-len 128 --output-len 256 --rounds 4 --sequential 0
  [ -f "$gpt2" ] && TAILN=10 step sbench_1b_gpt2 150 $PAGODA bench throughput -m $(model_dir 1b) --tokenizer $gpt2 --device cuda \
    --json-schema bench/schemas/people.json --num-prompts 64 --input-len 128 --output-len 256 --rounds 4 --sequential 0
}
# The structured-output tail with GPT-2's 50,257-token vocabulary (stage_sgpt2): first the mask
# work of a batch-64 step without a model on this host's cores (`pagoda bench masks`: step wall
# time, CPU work, the largest single item of a step, cold and warm; people.json on every row, then
# 64 rows over the 201 schemas), then the random Llama-3.2-1B shape constrained to people.json vs
# unconstrained, 8 alternating rounds (every round's ratio is printed: the target is >= 0.9 in each).
stage_sgpt2() {
  local gpt2=$PG/shared/tokenizers/vocab-vectors/ggml-vocab-gpt-2.gguf
  TAILN=9 step smasks_people 30 $PAGODA bench masks --tokenizer $gpt2 --json-schema bench/schemas/people.json \
    --batch 64 --steps 256 --rounds 3
  TAILN=9 step smasks_corpus 30 $PAGODA bench masks --tokenizer $gpt2 --json-schema bench/schemas/people.json \
    --schema-dir bench/schemas/corpus --batch 64 --steps 256 --rounds 3
  ensure_model 1b
  TAILN=14 step sbench_1b_gpt2_r8 150 $PAGODA bench throughput -m $(model_dir 1b) --tokenizer $gpt2 --device cuda \
    --json-schema bench/schemas/people.json --num-prompts 64 --input-len 128 --output-len 256 --rounds 8 --sequential 0
}
# Where the time goes (--cuda-profile: every step eager, CUDA events between ops): decode
# at batch 1 and 64, prefill 8192, and one wave of 256 requests of 1000 in / 200 out.
stage_profile() {
  local m
  ensure_model $1
  m=$(model_dir $1)
  TAILN=40 step prof_decode_$1 60 $PAGODA bench -m $m --device cuda --cuda-profile -p 0 -n 32 -b 1,64 -r 1
  TAILN=20 step prof_prefill_$1 60 $PAGODA bench -m $m --device cuda --cuda-profile -p 8192 -n 0 -r 1
  TAILN=40 step prof_tp_$1 100 $PAGODA bench -m $m --device cuda --cuda-profile -p 0 -n 0 --requests 256 --input-len 1000 --output-len ${PROF_TP_OUT:-100} --max-num-seqs 256
}
# The online-quantized (--quantization Q, default int4) model's decode: tok/s and per-op device
# times of a batch-1 step. ~60 s after the model exists.
stage_profile_quant() {
  local m q=${PROF_QUANT:-int4}
  ensure_model $1
  m=$(model_dir $1)
  TAILN=6 step qdecode_${q}_$1 60 $PAGODA bench -m $m --device cuda --quantization $q -p 0 -n 128 -b 1,8 -r 3
  TAILN=40 step qprof_${q}_$1 60 $PAGODA bench -m $m --device cuda --quantization $q --cuda-profile -p 0 -n 32 -b 1 -r 1
}
# The quantized matmuls with on-line int4 / int8 weights (the tensor-core matmul is off by default
# until this has run: D74): the kernel tests, then decode at batch 1, 8 and 64 with the default
# paths (int8 GEMV up to 8 rows, dequantize + cuBLASLt beyond), with the tensor-core matmul for
# 9-64 rows (--cuda-quant-mma-max-rows 64), and with it from one row (also
# --cuda-quant-gemv-max-rows 0); bf16 batch 8 / 64 as the reference the issue names. quantmma: the
# random 8B, ~2 min after the model exists; quantmma1b: the 1B shape, ~40 s.
stage_quantmma() {
  local m q
  ensure_model 8b
  m=$(model_dir 8b)
  TAILN=4 step qtests 120 $TESTS --gtest_filter='CudaQuant.*'
  for q in ${QMMA_TYPES:-int4 int8}; do
    TAILN=6 step qmma_${q}_default 60 $PAGODA bench -m $m --device cuda --quantization $q -p 0 -n 128 -b 1,8,64 -r 3
    TAILN=6 step qmma_${q}_on 60 $PAGODA bench -m $m --device cuda --quantization $q --cuda-quant-mma-max-rows 64 -p 512 -n 128 -b 8,64 -r 3
    TAILN=5 step qmma_${q}_from_1 60 $PAGODA bench -m $m --device cuda --quantization $q --cuda-quant-mma-max-rows 64 --cuda-quant-gemv-max-rows 0 -p 0 -n 128 -b 1,2,4 -r 3
  done
  TAILN=4 step qmma_bf16 60 $PAGODA bench -m $m --device cuda -p 0 -n 128 -b 8,64 -r 3
}
stage_quantmma_1b() {
  local m
  ensure_model 1b
  m=$(model_dir 1b)
  TAILN=5 step qmma1b_default 40 $PAGODA bench -m $m --device cuda --quantization int4 -p 0 -n 64 -b 1,8,64 -r 2
  TAILN=4 step qmma1b_on 40 $PAGODA bench -m $m --device cuda --quantization int4 --cuda-quant-mma-max-rows 64 -p 0 -n 64 -b 8,64 -r 2
  TAILN=3 step qmma1b_from_1 40 $PAGODA bench -m $m --device cuda --quantization int4 --cuda-quant-mma-max-rows 64 --cuda-quant-gemv-max-rows 0 -p 0 -n 64 -b 1 -r 2
}
# One wave of 256 requests (1000 in / 300 out; graphs on): a quick proxy of the 1000 x 1000/1000 run.
stage_wave() {
  local m
  ensure_model $1
  m=$(model_dir $1)
  TAILN=4 step wave${2:-}_$1 120 $PAGODA bench -m $m --device cuda -p 0 -n 0 --requests 256 --input-len 1000 --output-len 300 --max-num-seqs 256
}
# Batch-1 decode only (tg128, graphs), e.g. with PAGODA_ROW_ATTENTION=simt (or =mma: tensor cores for
# the short launches too) in front.
stage_decode1() {
  local m
  ensure_model $1
  m=$(model_dir $1)
  TAILN=3 step decode1${2:-}_$1 40 $PAGODA bench -m $m --device cuda -p 0 -n 128 -b 1 -r 3
}
# A/B runs in one call: tg128 at batch 1 (SWEEP_B: other batch sizes) once per entry of SWEEP, each
# entry a comma-separated list of VAR=value settings for that run ("-" for none), e.g.
# SWEEP="- PAGODA_GEMV_MAX_ROWS=4". PAGODA_BIN_OVERRIDE=PATH in an entry runs another pagoda binary
# (a control build carried beside the package).
stage_sweep() {
  local m v
  ensure_model $1
  m=$(model_dir $1)
  for v in ${SWEEP:--}; do
    local settings=${v//,/ }
    [ "$v" = - ] && settings=
    (
      [ -n "$settings" ] && export $settings
      TAILN=3 step "sweep_${v//[^A-Za-z0-9_]/_}_$1" 60 ${PAGODA_BIN_OVERRIDE:-$PAGODA} bench -m $m --device cuda -p 0 -n 128 -b ${SWEEP_B:-1} -r 3
    )
  done
}
# Block trace (--cuda-block-trace, a build with -DPAGODA_CUDA_BLOCK_TRACE=ON; tools/block_trace_report.py,
# docs/cuda.md): the last step of an
# eager tg run (-n TRACE_N, default 128), once per SWEEP entry as in stage_sweep. The report goes
# to the summary; TRACE_KEEP=1 also keeps the raw records (gzip) under $OUT.
stage_trace() {
  local m v
  ensure_model $1
  m=$(model_dir $1)
  for v in ${SWEEP:--}; do
    local settings=${v//,/ } tag=${v//[^A-Za-z0-9_]/_}_$1
    [ "$v" = - ] && settings=
    (
      [ -n "$settings" ] && export $settings
      local f=/tmp/trace_$tag.bin copy
      TAILN=3 step "trace_$tag" 120 ${PAGODA_BIN_OVERRIDE:-$PAGODA} bench -m $m --device cuda --no-cuda-graphs --cuda-block-trace $f -p 0 -n ${TRACE_N:-128} -b 1 -r 1
      copy=$(grep -oE 'bandwidth [0-9.]+ GB/s' "$LOGS/trace_$tag.log" | grep -oE '[0-9.]+' | head -n 1)
      TAILN=45 step "trace_report_$tag" 60 python3 tools/block_trace_report.py $f --copy-gbs "${copy:-0}"
      if [ "${TRACE_KEEP:-0}" = 1 ]; then gzip -c $f >"$OUT/trace_$tag.bin.gz"; cp $f.launches "$OUT/trace_$tag.bin.launches"; fi
    )
  done
}
# Speculative decoding vs plain decoding on the 8B shape (`pagoda bench spec`, the replay proposer
# of runtime/replay_proposer.h: acceptance set by construction; plain and speculative runs of the
# same prompts in one process). spec8b: free drafting (n-gram class); specdraft8b: the 1B-shaped
# model runs as the draft model on the same GPU, its own time included (its drafts replaced).
# The target is the peaked 8B (SPEC_TARGET=8b: plain random weights, whose record diverges outside
# --batch-invariant). SPEC_ACCEPT, SPEC_B, SPEC_OUT, SPEC_ARGS (e.g. --batch-invariant,
# --spec-disable-batch-size 0); SPEC_ADAPTIVE=1 adds the adaptive draft length at batch 1.
stage_spec() {
  local target=${SPEC_TARGET:-8bpeaked} m draft=
  ensure_model $target
  m=$(model_dir $target)
  if [ "${1:-}" = draft ]; then
    ensure_model 1b
    draft="--spec-model $(model_dir 1b)"
  fi
  # k = 4 fixed (the issue's figure); the "plain = record" and "spec = record" columns show that
  # the record survives plain decode steps and verification steps alike (default mode).
  TAILN=18 step spec${1:-}_fixed_$target ${SPEC_LIMIT:-120} $PAGODA bench spec -m $m --device cuda $draft -b ${SPEC_B:-1,64} \
    --acceptance ${SPEC_ACCEPT:-0.5,0.7,0.8,0.9} --spec-tokens 4 --spec-no-adaptive --input-len 128 --output-len ${SPEC_OUT:-256} ${SPEC_ARGS:-}
  [ "${SPEC_ADAPTIVE:-0}" = 1 ] && TAILN=10 step spec${1:-}_adaptive_$target ${SPEC_LIMIT:-120} $PAGODA bench spec -m $m \
    --device cuda $draft -b 1 --acceptance ${SPEC_ACCEPT:-0.5,0.7,0.8,0.9} --spec-tokens 4 --input-len 128 \
    --output-len ${SPEC_OUT:-256} ${SPEC_ARGS:-}
  return 0
}
# SPEC_REFS=1: the GPU references first (the bf16 cases; ~100 s), unless /tmp/gpuref has them.
stage_spectests() {
  [ "${SPEC_REFS:-0}" = 1 ] && [ ! -f /tmp/gpuref/qwen3-bf16/config.json ] &&
    step gpuref 140 python3 tools/make_gpu_references.py --out /tmp/gpuref
  TAILN=16 step spectests 120 $TESTS --gtest_filter='CudaStepGraphs.*:CudaEngine.NgramSpeculation*:CudaEngine.DraftModelOnTheDevice*'
}
# Draft heads on a CUDA target (docs/speculative_decoding.md "EAGLE-3 heads", CUDA): the
# hidden-state capture inside decode and verification graphs against the CPU executor's rows, the
# MTP module's logits through the target's output head on the device against the host's, the
# device runner's passes against the host's, greedy identity with and without EAGLE-3 / MTP heads
# (host and device runner) at batch 1, 4 and 8, and the verification graphs without a capture
# (CudaStepGraphs; tiny models, the bf16 case where /tmp/gpuref has it; about 50 s).
stage_eagletests() {
  TAILN=24 step eagletests 150 $TESTS --gtest_filter='CudaDraftHeads.*:CudaEngine.DraftHeadsKeepGreedyOutput:CudaStepGraphs.*'
}
# A random EAGLE-3 head of the Llama-3.1-8B release's shape (tools/make_draft_heads.py --target:
# f16, draft vocabulary 32000) on the 8B shape: offline runs of EAGLE_B requests (default 1 and 4,
# 128 prompt tokens, EAGLE_OUT = 64 generated) plain, with the head on the host and with it on the
# GPU (--spec-device-head), k = EAGLE_K (default 2). Random weights accept almost nothing, so plain
# tok/s over speculative tok/s is the cost of a speculative step (the head's k passes + a
# verification of 1 + k rows) in plain decode steps. About 150 s with the 8B model in place (making
# it adds ~90 s).
stage_eaglebench() {
  local target=${EAGLE_TARGET:-8b} m h b
  ensure_model $target
  m=$(model_dir $target)
  h=$SHM/eagle3-head-$target
  [ -f $h/config.json ] || step make_eagle_head 60 python3 tools/make_draft_heads.py --target $m --head-out $h
  for b in ${EAGLE_B:-1 4}; do
    TAILN=4 step eagle_plain_b${b}_$target 40 $PAGODA bench -m $m --device cuda -p 0 -n 0 --requests $b --input-len 128 \
      --output-len ${EAGLE_OUT:-64} --max-num-seqs $b
    TAILN=5 step eagle_spec_b${b}_$target 60 $PAGODA bench -m $m --device cuda -p 0 -n 0 --requests $b --input-len 128 \
      --output-len ${EAGLE_OUT:-64} --max-num-seqs $b --spec-method eagle3 --spec-model $h --spec-tokens ${EAGLE_K:-2}
    TAILN=5 step eagle_devspec_b${b}_$target 40 $PAGODA bench -m $m --device cuda -p 0 -n 0 --requests $b --input-len 128 \
      --output-len ${EAGLE_OUT:-64} --max-num-seqs $b --spec-method eagle3 --spec-model $h --spec-tokens ${EAGLE_K:-2} \
      --spec-device-head
  done
}
# Mixture of experts on the device: batch-1 decode reads the attention, router and output weights,
# the KV cache and the k selected experts of each layer (2.4 of 13.8 GB at the OLMoE-1B-7B shape);
# pagoda bench's "bw %" is that byte count per step over the measured copy bandwidth (an upper
# bound of the bytes read above batch 1: min(E, batch x k) experts a layer). Model ~20-40 s, bench ~30 s.
stage_moe() {
  local shape=${MOE_SHAPE:-olmoe-1b-7b} m
  m=$SHM/$shape${MOE_LAYERS:+-l$MOE_LAYERS}
  [ -f $m/config.json ] || step make_moe 90 env ${MOE_LAYERS:+MOE_LAYERS=$MOE_LAYERS} python3 tools/make_random_moe.py $shape $m
  TAILN=12 step bench_moe 90 $PAGODA bench -m $m --device cuda -p 512 -n 128 -b 1,8 -r 3
  [ "${MOE_PROFILE:-0}" = 1 ] && TAILN=30 step prof_moe 45 $PAGODA bench -m $m --device cuda --cuda-profile -p 0 -n 32 -b 1 -r 1
}
stage_moetests() {
  [ -f /tmp/gpuref/index.json ] || step gpuref 120 python3 tools/make_gpu_references.py --out /tmp/gpuref
  step moetests 180 $TESTS --gtest_filter='CudaMoe.*:CudaQuant.*:CudaParity.*:CudaEngine.MixtureOfExperts*'
}
stage_kbench() { TAILN=3 step kbench 150 $KBENCH; }
stage_qkbench() { PAGODA_KBENCH_ONLY=qgemv TAILN=3 step qkbench 120 $KBENCH; }
# A verification step's kernels (speculative decoding, k = 4: 5 rows): the matmuls at M = 1 / 4
# (GEMV), 5 (cuBLASLt, SIMT GEMM), 8; the attention of 5 rows of one sequence (split-KV kernels vs
# one prefill tile) at 384 and 4096 keys. ~40 s.
stage_kbench_verify() {
  PAGODA_KBENCH_ONLY=gemv,verify TAILN=90 step kbench_verify 120 bash -c "$KBENCH 2>&1 | grep -E 'kbench\] (gemv M=(1|4) |cublasLt M=(1|5|8) |simt gemm|verify)'"
}
# Nsight Compute (the device image has ncu) on the kernel bench: speed of light, memory, warp
# stalls and occupancy of the launches of kernels matching NCU_KERNELS (a regex): NCU_COUNT
# launches after skipping NCU_SKIP, in the bench sections NCU_ONLY (PAGODA_KBENCH_ONLY). NCU_TAG
# names the step, so one call can profile several launches.
stage_ncu() {
  local k=${NCU_KERNELS:-row_attention_mma_kernel|gemv_kernel}
  PAGODA_KBENCH_ONLY=${NCU_ONLY:-gemv,decode} TAILN=200 step ncu${NCU_TAG:-} 300 \
    ncu --kernel-name "regex:$k" --launch-skip "${NCU_SKIP:-0}" --launch-count "${NCU_COUNT:-6}" \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    --section LaunchStats --section SchedulerStats --section InstructionStats $KBENCH
}
# Nsight Compute on the model itself: launches of kernels matching NCU_KERNELS (default the
# GEMVs) in an eager batch-1 decode of the model (SHAPE 8b or 1b). NCU_METRICS
# (comma-separated metric names) replaces the default sections.
stage_ncu_model() {
  ensure_model $1
  local m=$(model_dir $1) k=${NCU_KERNELS:-gemv_kernel}
  local what="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy
    --section LaunchStats --section SchedulerStats"
  [ -n "${NCU_METRICS:-}" ] && what="--metrics $NCU_METRICS"
  TAILN=200 step ncu_$1${NCU_TAG:-} 300 \
    ncu --kernel-name "regex:$k" --launch-skip "${NCU_SKIP:-40}" --launch-count "${NCU_COUNT:-2}" $what $PAGODA bench -m $m --device cuda --no-cuda-graphs -p 0 -n 8 -b 1 -r 1
}
stage_hf() { TAILN=4 step hf_$1 150 python3 tools/hf_baseline.py "$(model_shape $1)" --runs=64:128:128,64:1000:1000; }

# llama.cpp CUDA as the peer of the quantized runs (../shared/tools/llamacpp_gpu_peer.sh; the
# copy of ../shared that scripts/gpu_stage.sh puts in .peer with PAGODA_STAGE_PEER=1): peerstart
# starts its build and the synthetic Llama-3-8B-shaped F16 GGUF in the background; quant8b waits
# for them, quantizes that file with llama-quantize (QUANT_TYPES, default Q4_0 Q4_K_M) and runs, per
# type, pagoda bench (weights native, then dequantized to bf16 as the control) and llama-bench on
# the same file: pp512 and tg128, batch 1 (and 8 for Pagoda).
stage_peerstart() {
  [ -d .peer ] || { log "=== peerstart: no .peer (PAGODA_STAGE_PEER=1 scripts/gpu_stage.sh)"; return 1; }
  PEER=$PWD/.peer SYNTH=1 bash .peer/tools/llamacpp_gpu_peer.sh start >>"$SUMMARY" 2>&1
}
stage_quant8b() {
  TAILN=3 step peerwait 420 env PEER=$PWD/.peer bash .peer/tools/llamacpp_gpu_peer.sh wait
  local f16=$SHM/m8b-f16.gguf t f
  for t in ${QUANT_TYPES:-Q4_0 Q4_K_M}; do
    f=$SHM/m8b-$t.gguf
    [ -f $f ] || TAILN=2 step quantize_$t 150 /tmp/lc/build/bin/llama-quantize $f16 $f $t 16
  done
  for t in ${QUANT_TYPES:-Q4_0 Q4_K_M}; do
    f=$SHM/m8b-$t.gguf
    TAILN=8 step qbench_native_$t 80 $PAGODA bench -m $f --device cuda -p 512 -n 128 -b 1,8 -r 3
    TAILN=4 step qbench_bf16_$t 60 $PAGODA bench -m $f --device cuda --cuda-quant-weights dequantize -p 0 -n 128 -b 1 -r 3
    TAILN=6 step qpeer_$t 80 /tmp/lc/build/bin/llama-bench -m $f -ngl 99 -p 512 -n 128 -r 3
  done
}

# CPU + GPU layer split on the 8B shape (needs peerstart earlier in the call: the llama.cpp build
# and /dev/shm/m8b-f16.gguf): half the layers on the GPU, the other half and the output head on
# the host's cores, pp512 and tg128 at batch 1: `pagoda bench --n-gpu-layers NGL` and llama.cpp's
# `llama-bench -ngl NGL` on the same F16 GGUF, two alternating rounds (NGL default 16 of 32; THREADS
# default the host's cores). llama.cpp's -ngl puts the last NGL layers on the GPU and, by default,
# copies CPU-resident weights to the GPU for large batches (its prompt processing); Pagoda's CPU
# part computes its layers on the CPU at every batch size. About 200 s after the peer is ready.
# The layer split's GPU tests (tests/gpu/cuda_layer_split_test.cc): the tiny f32 Llama-3 and the
# random bf16 Qwen3 of the GPU references (made first if absent, ~60 s); about 60 s.
stage_ngltests() {
  [ -f /tmp/gpuref/index.json ] || step gpuref 120 python3 tools/make_gpu_references.py --out /tmp/gpuref
  TAILN=12 step ngltests 150 $TESTS --gtest_filter='CudaLayerSplit.*'
}
stage_ngl8b() {
  TAILN=2 step peerwait 420 env PEER=$PWD/.peer bash .peer/tools/llamacpp_gpu_peer.sh wait
  local f16=$SHM/m8b-f16.gguf n=${NGL:-16} t=${THREADS:-$(nproc)} i
  [ -f $f16 ] || { log "=== ngl8b: no $f16 (run peerstart first)"; return 1; }
  for i in 1 2; do
    TAILN=8 step ngl_pagoda_${n}_$i 120 $PAGODA bench -m $f16 --device cuda --n-gpu-layers $n -t $t -p 512 -n 128 -r 1
    TAILN=6 step ngl_llamacpp_${n}_$i 120 /tmp/lc/build/bin/llama-bench -m $f16 -ngl $n -t $t -p 512 -n 128 -r 1
  done
}

# Cold start of the 8B shape from /dev/shm (needs peerstart earlier in the call: the llama.cpp
# build and /dev/shm/m8b-f16.gguf; llama-quantize makes the BF16 copy): launch to first token of
# `pagoda generate --device cuda -n 1` (--profile-startup: the phase table) on the BF16 and F16
# files, alternating with llama.cpp's `llama-bench -p 0 -n 1 -ngl 99` on the same file (wall
# time of the process, as the issue measured it), then `pagoda serve` from launch to /health 200
# with lazy graph capture (the default) and with --cuda-graph-capture start. Lines "[cold] ...".
stage_cold8b() {
  TAILN=2 step peerwait 420 env PEER=$PWD/.peer bash .peer/tools/llamacpp_gpu_peer.sh wait
  local f16=$SHM/m8b-f16.gguf bf16=$SHM/m8b-bf16.gguf port=18090 i f
  [ -f $bf16 ] || TAILN=2 step quantize_bf16 150 /tmp/lc/build/bin/llama-quantize $f16 $bf16 BF16 16
  cat > /tmp/cold_wall.sh <<'EOS'
#!/usr/bin/env bash
# cold_wall.sh TAG CMD...: runs CMD, prints "[cold] TAG wall S s rc R" (launch to exit).
tag=$1; shift
t0=$(date +%s.%N); "$@"; rc=$?; t1=$(date +%s.%N)
echo "[cold] $tag wall $(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }") s rc $rc"
EOS
  chmod +x /tmp/cold_wall.sh
  for i in 1 2; do
    for f in $bf16 $f16; do
      TAILN=16 step cold_pagoda_$(basename $f .gguf)_$i 60 /tmp/cold_wall.sh "pagoda generate $(basename $f) run $i" \
        $PAGODA generate -m $f --device cuda -p "Hello" -n 1 --temperature 0 --profile-startup
    done
    TAILN=3 step cold_llamacpp_bf16_$i 60 /tmp/cold_wall.sh "llama-bench -p 0 -n 1 $(basename $bf16) run $i" \
      /tmp/lc/build/bin/llama-bench -m $bf16 -ngl 99 -p 0 -n 1 -r 1
  done
  for mode in lazy start; do
    TAILN=12 step cold_serve_$mode 60 python3 -c "
import subprocess, sys, time, urllib.request
t0 = time.time()
p = subprocess.Popen(['$PAGODA', 'serve', '-m', '$bf16', '--device', 'cuda', '--port', '$port', '--profile-startup',
                      '--cuda-graph-capture', '$mode'], stdout=open('/tmp/cold_serve_$mode.log', 'w'), stderr=subprocess.STDOUT)
ready = None
while time.time() - t0 < 55 and p.poll() is None:
    try:
        if urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=1).status == 200:
            ready = time.time() - t0; break
    except Exception: pass
    time.sleep(0.02)
print('[cold] serve --cuda-graph-capture $mode: health 200 at', 'never' if ready is None else f'{ready:.2f} s', 'after launch')
p.terminate()
p.wait(timeout=30)
out = open('/tmp/cold_serve_$mode.log').read()
print('\\n'.join(l for l in out.splitlines() if 'ready' in l or l.startswith('   ') or 'start-up' in l or 'graphs' in l))
"
  done
  grep -h "^\[cold\]\|launch to first token\|weights upload\|cuda context\|graphs (" $LOGS/cold_*.log >>"$SUMMARY"
}

stage_gateway() {
  local m=$PG/shared/models/stories260K/stories260K.gguf
  [ -x $PG/bin/pagoda-gateway ] || { log "gateway: no pagoda-gateway in the pack (ninja -C build-cuda pagoda_gateway_cli, then gpu_pack.sh)"; return; }
  # With bin/pagoda-gateway-baseline in the pack (gpu_pack.sh PAGODA_PACK_BASELINE_GATEWAY), a third
  # arm in the same rounds: new / baseline ratios of CPU per token and the baseline's paired TTFT.
  local base= n=${GATEWAY_ROUNDS:-5} k=1
  [ -x $PG/bin/pagoda-gateway-baseline ] && base=$PG/bin/pagoda-gateway-baseline && k=2
  step gateway_cpus 10 bash -c 'lscpu | grep -E "^(Model name|Thread|Core|Socket|NUMA node0)"; lscpu -e=CPU,CORE,SOCKET | head -12'
  # One CPU of each physical core, core 0 left out: worker on two cores, gateway on two, client on one.
  local c=($(lscpu -p=CPU,CORE | grep -v '^#' | sort -t, -k2,2n -k1,1n | awk -F, '!seen[$2]++ {print $1}'))
  [ ${#c[@]} -ge 6 ] || c=(0 2 3 6 7 10)
  log "gateway: worker on CPUs ${c[1]},${c[2]}, gateway on ${c[3]},${c[4]}, client on ${c[5]}"
  local pin=(PAGODA_BIN_DIR=$PG/bin WORKER_CPUS=${c[1]},${c[2]} GATEWAY_CPUS=${c[3]},${c[4]} GATEWAY_THREADS=2
             CLIENT_CPUS=${c[5]} BASELINE_GATEWAY=$base)
  TAILN=$((12 + 8 * (k - 1))) step gateway_cpu $((90 * k)) env "${pin[@]}" PAIRED_PROMPTS=256 LATENCY_PROMPTS=32 WORKER_ARGS="--device cpu" \
    scripts/bench_gateway.sh $m $n
  ensure_model 1bv512
  TAILN=$((12 + 8 * (k - 1))) step gateway_cuda_1b $((90 * k)) env "${pin[@]}" NUM_PROMPTS=512 PAIRED_PROMPTS=384 LATENCY_PROMPTS=32 \
    WORKER_ARGS="--device cuda --tokenizer $m" scripts/bench_gateway.sh "$(model_dir 1bv512)" $n
  TAILN=$((12 + 8 * (k - 1))) step gateway_cuda_260k $((45 * k)) env "${pin[@]}" NUM_PROMPTS=1024 PAIRED_PROMPTS=512 LATENCY_PROMPTS=32 \
    WORKER_ARGS="--device cuda" scripts/bench_gateway.sh $m $n
}

stage_bench() {
  step env 30 bash -c 'nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.mem,driver_version --format=csv'
  for shape in ${SHAPES:-llama3-8b llama3.2-1b}; do bench_model $shape; done
}

for s in "$@"; do
  case "$s" in
    check) stage_check ;;
    bench) stage_bench ;;
    gateway) stage_gateway ;;
    tests) stage_tests ;;
    quicktests) stage_quicktests ;;
    env) step env 30 bash -c 'nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.mem,driver_version --format=csv; ls /usr/local/cuda/bin | tr "\n" " "; command -v ncu nsys' ;;
    alltests) stage_alltests ;;
    m8b) stage_model 8b ;;
    offload8b) stage_offload8b ;;
    offload70b) stage_offload70b ;;
    m8bpeaked) stage_model 8bpeaked ;;
    m1b) stage_model 1b ;;
    hf8b) stage_hf 8b ;;
    hf1b) stage_hf 1b ;;
    tp8b) stage_tp1000 8b ;;
    tp1b) stage_tp1000 1b ;;
    rm8b) rm -rf "$(model_dir 8b)" ;;
    prof8b) stage_profile 8b ;;
    prefillab) stage_prefill_ab ;;
    prof1b) stage_profile 1b ;;
    profq8b) stage_profile_quant 8b ;;
    quantmma) stage_quantmma ;;
    quantmma1b) stage_quantmma_1b ;;
    wave8b) stage_wave 8b ;;
    wavesimt8b) PAGODA_ROW_ATTENTION=simt stage_wave 8b simt ;;
    decode8b) stage_decode1 8b ;;
    decodesimt8b) PAGODA_ROW_ATTENTION=simt stage_decode1 8b simt ;;
    decodemma8b) PAGODA_ROW_ATTENTION=mma stage_decode1 8b mma ;;
    decode1b) stage_decode1 1b ;;
    smallb8b) for g in 1 4 2; do PAGODA_GEMV_MAX_ROWS=$g TAILN=5 step smallb_gemv${g}_8b 60 $PAGODA bench -m "$(model_dir 8b)" --device cuda -p 0 -n 128 -b 1,2,3,4 -r 3; done ;;
    kbench) stage_kbench ;;
    kbenchverify) stage_kbench_verify ;;
    qkbench) stage_qkbench ;;
    cleanuptests) TAILN=12 step cleanuptests 180 $TESTS --gtest_filter='CudaFp8.*:CudaQuant.*:CudaMoe.*:CudaOps.*:Backends/OpCase.*:CudaDraftHeads.*:CudaEngine.*:CudaParity.F32*:CudaParity.Cpu*' ;;
    q8tests) TAILN=8 step q8tests 150 $TESTS --gtest_filter='CudaQuant.*:CudaParity.NativeQuantizedWeightsStayNearTheirDequantizedForward' ;;
    tp128_8b) stage_tp128 8b ;;
    tp128_1b) stage_tp128 1b ;;
    trace8b) stage_trace 8b ;;
    trace1b) stage_trace 1b ;;
    sweep8b) stage_sweep 8b ;;
    sweep1b) stage_sweep 1b ;;
    ncu) stage_ncu ;;
    ncu8b) stage_ncu_model 8b ;;
    ncu1b) stage_ncu_model 1b ;;
    serve) stage_serve ;;
    structured) stage_structured ;;
    sbench) stage_sbench ;;
    sgpt2) stage_sgpt2 ;;
    onlinequant) stage_onlinequant ;;
    fp8) stage_fp8 ;;
    fp8rows) stage_fp8rows ;;
    sparse) stage_sparse ;;
    tptests) TAILN=14 step tptests 150 $TESTS --gtest_filter='CudaTensorParallel.*' --gtest_also_run_disabled_tests ;;
    tpe2e) stage_tp_e2e ;;
    sparsecheck) TAILN=14 step sparsecheck 200 $TESTS --gtest_filter='CudaSparse.*:CudaFp8.*:CudaQuant.*'
                 PAGODA_KBENCH_ONLY=sparse TAILN=60 step sparsekbench 120 $KBENCH ;;
    moe) stage_moe ;;
    moetests) stage_moetests ;;
    mixtral) stage_dummy_bench mixtral mixtral-8x7b ;;
    a3b) stage_dummy_bench a3b qwen3-30b-a3b ;;
    int4_70b) stage_dummy_bench int4_70b llama3-70b --quantization int4 ;;
    mixtral_int4) stage_dummy_bench mixtral_int4 mixtral-8x7b --quantization int4 ;;
    a3bpeer) stage_a3bpeer ;;
    corpus) stage_corpus ;;
    peerstart) stage_peerstart ;;
    quant8b) stage_quant8b ;;
    cold8b) stage_cold8b ;;
    ngl8b) stage_ngl8b ;;
    ngltests) stage_ngltests ;;
    spectests) stage_spectests ;;
    eagletests) stage_eagletests ;;
    eaglebench) stage_eaglebench ;;
    spec8b) stage_spec ;;
    specdraft8b) stage_spec draft ;;
    *) log "unknown stage $s" ;;
  esac
done
