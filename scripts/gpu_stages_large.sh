# Stages of scripts/gpu_run.sh for models larger than a file on the device machine can hold
# comfortably (sourced by it: uses its step, $PAGODA, $SHM).
# A Llama-3-70B-shaped Q8_0 model (75 GB, random codes: tools/make_bench_models.py q8_0-raw, written
# to /dev/shm) in a 48 GB budget (an L40S-class card: --gpu-memory-utilization 48e9 / the H200's
# 150.75e9 bytes): auto offload streams what does not fit; batch 1 and 64 decode against the
# host-to-device bound, then the greedy tokens of the offloaded and the fully resident model
# (which fits the H200) side by side. ~4 min with the file's ~1.5 min.
stage_offload70b() {
  local f=$SHM/llama3-70b-random.q8_0-raw.gguf u=0.3184
  [ -f $f ] || TAILN=2 step make_70b 240 python3 tools/make_bench_models.py --shape llama3-70b --types q8_0-raw --out $SHM
  TAILN=16 step off70b_bench 200 $PAGODA bench -m $f --device cuda --gpu-memory-utilization $u -p 0 -n 16 -b 1,64 -r 1
  TAILN=3 step off70b_ids 120 $PAGODA generate -m $f --device cuda --gpu-memory-utilization $u -p "Once upon a time" -n 16 --temperature 0 --ids
  TAILN=3 step res70b_ids 120 $PAGODA generate -m $f --device cuda -p "Once upon a time" -n 16 --temperature 0 --ids
  TAILN=8 step res70b_bench 120 $PAGODA bench -m $f --device cuda -p 0 -n 16 -b 1 -r 1
}
# Random weights made at load (`--load-format dummy`) for shapes too large for a file on this
# machine (its /dev/shm and disk): config.json only (make_random_moe.py / make_random_llama.py
# --config-only). TAG SHAPE [pagoda bench options]: prefill 512 and tg128 at batch 1 and 8, then
# 1000 x 128/128 (DUMMY_SEQS sequences, default 256). mixtral: Mixtral-8x7B bf16 (93 GB: an H200);
# mixtral_int4: the same quantized on-line (Q4_0 experts in their blocks: 26 GB);
# a3b: Qwen3-30B-A3B bf16 (61 GB); int4_70b: Llama-3-70B with on-line --quantization int4.
dummy_config() {
  local d=/tmp/cfg-$1
  if [ ! -f $d/config.json ]; then
    case $1 in
      llama3-*) python3 tools/make_random_llama.py $1 $d --config-only ;;
      *) python3 tools/make_random_moe.py $1 $d --config-only ;;
    esac >/dev/null
  fi
  echo $d
}
stage_dummy_bench() {
  local tag=$1 d
  d=$(dummy_config $2)
  shift 2
  TAILN=12 step dbench_$tag 240 $PAGODA bench -m $d --device cuda --load-format dummy -p 512 -n 128 -b 1,8 -r 3 "$@"
  TAILN=4 step dtp128_$tag 240 $PAGODA bench -m $d --device cuda --load-format dummy -p 0 -n 0 --requests 1000 \
    --input-len 128 --output-len 128 --max-num-seqs ${DUMMY_SEQS:-256} "$@"
}
# Qwen3-30B-A3B-shaped BF16 GGUF (tools/make_bench_models.py bf16-tiled; A3B_LAYERS layers, default
# 48: 61 GB in /dev/shm, written in about a minute) on Pagoda and on llama.cpp CUDA (needs
# peerstart earlier in the call): prefill 512 and tg128 at batch 1 (and 8 for Pagoda); llama.cpp
# with flash attention off and on. Pagoda's "bw %" counts the bytes a step reads (active experts).
# MOE_PROFILE=1: then Pagoda's per-op device times of a batch-1 step (eager, ~40 s more).
# A3B_TYPE: the file's weights (make_bench_models.py type; default bf16-tiled; q4_k-raw and
# q4_0-raw: 17 GB of random blocks, the experts read in their blocks by the grouped kernels).
stage_a3bpeer() {
  local L=${A3B_LAYERS:-48} T=${A3B_TYPE:-bf16-tiled} f
  f=$SHM/qwen3-30b-a3b-l$L-random.$T.gguf
  [ -f $f ] || TAILN=2 step make_a3b_$T 240 python3 tools/make_bench_models.py --shape qwen3-30b-a3b \
    --types $T --layers $L --out $SHM
  TAILN=10 step a3b_pagoda_$T 180 $PAGODA bench -m $f --device cuda -p 512 -n 128 -b 1,8 -r 3
  [ "${MOE_PROFILE:-0}" = 1 ] && TAILN=30 step a3b_prof_$T 90 $PAGODA bench -m $f --device cuda --cuda-profile -p 0 -n 32 -b 1 -r 1
  [ "${A3B_TP:-0}" = 1 ] && TAILN=4 step a3b_tp128_$T 200 $PAGODA bench -m $f --device cuda -p 0 -n 0 --requests 1000 \
    --input-len 128 --output-len 128 --max-num-seqs 256
  [ "${A3B_PEER:-1}" = 1 ] || return 0  # A3B_PEER=0: Pagoda only (no peerstart in the call)
  TAILN=3 step peerwait 420 env PEER=$PWD/.peer bash .peer/tools/llamacpp_gpu_peer.sh wait
  TAILN=8 step a3b_peer_$T 200 /tmp/lc/build/bin/llama-bench -m $f -ngl 99 -p 512 -n 128 -r 3 -fa 0,1
}
