#!/usr/bin/env bash
# Builds Pagoda with its tests and runs them all (the README's test command ends here).
# Needs scripts/setup_test.sh. Usage: scripts/test.sh [ctest args...]   e.g. scripts/test.sh -L unit
set -euo pipefail
cd "$(dirname "$0")/.."
build=${PAGODA_BUILD_DIR:-build}
jobs=$(nproc)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGODA_BUILD_TESTS=ON -DPAGODA_BUILD_BENCHMARKS=ON >/dev/null
cmake --build "$build" -j "$jobs"
# The CUDA backend (src/backend/cuda, the `pagoda_cuda` object library) is compiled, not run, when
# nvcc is found: CI has no GPU (the GPU test tier above skips, "GPU test skipped: ..."; docs/cuda.md
# runs it on a GPU machine). sm_90a only here to keep a 2-core CI short; a full CUDA build
# (-DPAGODA_CUDA=ON) also compiles sm_80 (PAGODA_CUDA_GENCODE). PAGODA_TEST_CUDA=0 skips it.
nvcc=$(command -v nvcc || true)
if [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ]; then nvcc=/usr/local/cuda/bin/nvcc; fi
if [ -n "$nvcc" ] && [ "${PAGODA_TEST_CUDA:-1}" != 0 ]; then
  cuda_build=${PAGODA_CUDA_CI_BUILD_DIR:-build-cuda-ci}
  t0=$(date +%s)
  cmake -S . -B "$cuda_build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGODA_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
    -DPAGODA_CUDA_GENCODE="-gencode=arch=compute_90a,code=sm_90a" -DPAGODA_BUILD_TESTS=OFF \
    -DPAGODA_BUILD_BENCHMARKS=OFF >/dev/null
  cmake --build "$cuda_build" -j "$jobs" --target pagoda_cuda
  echo "test.sh: CUDA backend compiled ($nvcc, sm_90a) in $(($(date +%s) - t0)) s"
else
  echo "test.sh: nvcc not found: CUDA backend not compiled (install the CUDA toolkit to compile it)"
fi
cd "$build"
ctest --output-on-failure -j "$jobs" --timeout 900 "$@"
