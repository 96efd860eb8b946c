#!/usr/bin/env bash
# Packs what a GPU machine needs to run Pagoda's CUDA tests and benchmarks into .gpu/pack.tar.xz
# (git-ignored; name `.gpu` in the device tool's `carry`): the CUDA build's `pagoda`, GPU test
# binary and CUDA kernel benchmark, the shared libraries they link that a CUDA-only image lacks (fmt, xxhash, utf8proc, ICU:
# everything ldd resolves under /lib/x86_64-linux-gnu except glibc, the GCC runtime and zlib/OpenSSL,
# which every image has and Python there must keep its own of), stories260K and GPT-2's vocabulary
# (the structured-output benchmark's real-size tokenizer). The tiny test
# models (random weights: they do not compress, and would take the package past the call's 64 MiB)
# are not packed: scripts/gpu_run.sh regenerates them there with tools/make_tiny_models.py --check
# (numpy and safetensors are in the GPU image), which fails unless every file's sha256 equals
# testdata/reference/models.json. PAGODA_PACK_MODELS=1 packs them anyway.
# scripts/gpu_run.sh unpacks it on the GPU machine.
# Usage: scripts/gpu_pack.sh   (after: cmake -B build-cuda -DPAGODA_CUDA=ON -DPAGODA_BUILD_TESTS=ON -DPAGODA_BUILD_BENCHMARKS=ON &&
#                               ninja -C build-cuda pagoda_cli pagoda_gateway_cli pagoda_gpu_tests pagoda_cuda_kernel_bench)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${PAGODA_CUDA_BUILD_DIR:-build-cuda}
shared=${PAGODA_SHARED_DIR:-../shared}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/models" "$stage/shared/models"
# PAGODA_PACK_KBENCH=0 leaves the kernel benchmark out (each binary carries every kernel: the
# package must stay well under the device call's 64 MiB).
bins=("$build/pagoda" "$build/tests/pagoda_gpu_tests")
[ "${PAGODA_PACK_KBENCH:-1}" = 1 ] && bins+=("$build/bench/pagoda_cuda_kernel_bench")
# The gateway (gpu_run.sh's `gateway` stage) where it was built (ninja -C build-cuda pagoda_gateway_cli).
[ -x "$build/pagoda-gateway" ] && bins+=("$build/pagoda-gateway")
cp "${bins[@]}" "$stage/bin/"
# PAGODA_PACK_BASELINE_GATEWAY=PATH: another pagoda-gateway (e.g. the previous commit's), packed as
# bin/pagoda-gateway-baseline; the gateway stage then measures it in the same rounds.
if [ -n "${PAGODA_PACK_BASELINE_GATEWAY:-}" ]; then
  cp "$PAGODA_PACK_BASELINE_GATEWAY" "$stage/bin/pagoda-gateway-baseline"
  bins+=("$PAGODA_PACK_BASELINE_GATEWAY")
fi
strip --strip-debug "$stage/bin/"*
ldd "${bins[@]}" | awk '/=> \/lib\/x86_64-linux-gnu\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|librt|libpthread|libdl|libz|libssl|libcrypto|ld-linux[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
if [ "${PAGODA_PACK_MODELS:-0}" = 1 ]; then
  cp -rL models/tiny "$stage/models/"
  # The packed-integer checkpoints' reference values are read by the CPU tests only (3 MB of xz).
  [ -d "$stage/models/tiny/quant" ] && find "$stage/models/tiny/quant" -name reference.safetensors -delete
fi
cp -rL "$shared/models/stories260K" "$stage/shared/models/"
# GPT-2's vocabulary (tokenizer only): the structured-output benchmark with a real vocabulary's size.
mkdir -p "$stage/shared/tokenizers/vocab-vectors"
cp -L "$shared/tokenizers/vocab-vectors/ggml-vocab-gpt-2.gguf" "$stage/shared/tokenizers/vocab-vectors/"
# The gguf package (pure Python; the GPU image lacks it): make_tiny_models.py reads stories260K's
# vocabulary with it. gpu_run.sh puts site/ on PYTHONPATH.
gguf_dir=$(.venv-test/bin/python -c "import gguf, os; print(os.path.dirname(gguf.__file__))")
mkdir -p "$stage/site" && cp -rL "$gguf_dir" "$stage/site/" && find "$stage/site" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p .gpu
tar -C "$stage" -cf - . | xz -6 -T2 > .gpu/pack.tar.xz
ls -la .gpu/pack.tar.xz
tar -tJf .gpu/pack.tar.xz | grep -E '^\./(bin|lib)/' | tr '\n' ' '; echo
