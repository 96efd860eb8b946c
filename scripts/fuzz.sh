#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*_fuzz.cc) with clang in build-fuzz/ and runs each one for
# SECONDS (default 60) on its seeds. Exits non-zero if any target crashes or reports a sanitizer
# error (the reproducer is left in build-fuzz/artifacts/); exits 77 if clang/libFuzzer is missing.
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]        e.g. scripts/fuzz.sh 600 gguf_fuzz
# Corpus per target: build-fuzz/corpus/TARGET (grows, kept between runs), read together with
# build-fuzz/seeds/TARGET (fuzz/make_seeds.py) and fuzz/seeds/TARGET (small committed seeds, if any);
# dictionary fuzz/TARGET.dict if present. Reproduce a crash: build-fuzz/fuzz/TARGET ARTIFACT.
# Environment: PAGODA_FUZZ_JOBS (build parallelism, default 2), PAGODA_FUZZ_RSS_MB (default 2048).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
secs=${1:-60}
shift || true
build=build-fuzz
jobs=${PAGODA_FUZZ_JOBS:-2}

if ! command -v clang++ >/dev/null || ! command -v clang >/dev/null; then
  echo "fuzz: SKIPPED: clang/clang++ not installed (apt-get install clang libclang-rt-14-dev)"
  exit 77
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$probe/p.cc"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cc" -o "$probe/p" 2>"$probe/err"; then
  echo "fuzz: SKIPPED: clang++ cannot link libFuzzer (install libclang-rt-14-dev):"
  cat "$probe/err"
  exit 77
fi

CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPAGODA_FUZZ=ON \
  -DPAGODA_BUILD_TESTS=OFF -DPAGODA_BUILD_BENCHMARKS=OFF -DPAGODA_CUDA=OFF >/dev/null
cmake --build "$build" --target fuzzers -j "$jobs"
python3 fuzz/make_seeds.py "$build/seeds" --shared "$root/../shared"

if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for src in fuzz/*_fuzz.cc; do targets+=("$(basename "$src" .cc)"); done
fi

failed=()
summary=()
mkdir -p "$build/artifacts" "$build/logs"
for t in "${targets[@]}"; do
  bin="$build/fuzz/$t"
  [ -x "$bin" ] || { echo "fuzz: no binary $bin" >&2; failed+=("$t(missing)"); continue; }
  corpus="$build/corpus/$t"
  mkdir -p "$corpus"
  dirs=("$corpus")
  [ -d "$build/seeds/$t" ] && dirs+=("$build/seeds/$t")
  [ -d "fuzz/seeds/$t" ] && dirs+=("fuzz/seeds/$t")
  opts=(-max_total_time="$secs" -timeout=20 -rss_limit_mb="${PAGODA_FUZZ_RSS_MB:-2048}" -print_final_stats=1
        -artifact_prefix="$build/artifacts/$t-")
  [ -f "fuzz/$t.dict" ] && opts+=(-dict="fuzz/$t.dict")
  log="$build/logs/$t.log"
  echo "fuzz: $t for ${secs}s (corpus ${dirs[*]})"
  rc=0
  "$bin" "${opts[@]}" "${dirs[@]}" >"$log" 2>&1 || rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
  line="$t: ${execs:-?} execs, cov ${cov:-?}, corpus $(find "$corpus" -type f | wc -l) files"
  if [ "$rc" -ne 0 ]; then
    failed+=("$t")
    line="$line: FAILED (exit $rc)"
    echo "---- $log (tail) ----"
    tail -n 60 "$log"
  fi
  echo "fuzz: $line"
  summary+=("$line")
done

echo "fuzz: summary"
for s in "${summary[@]}"; do echo "  $s"; done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (reproducers in $build/artifacts/)"
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran ${secs}s without findings"
