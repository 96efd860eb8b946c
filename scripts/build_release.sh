#!/usr/bin/env bash
# Release build of the shipped binaries (`pagoda`, `pagoda-gateway`) without tests or
# micro-benchmarks, then the Debian package (cpack) and the list of runtime packages the binaries
# need on a dpkg-based system (scripts/runtime_packages.sh -> BUILD/runtime-packages.txt). The
# container recipes (deploy/Containerfile, deploy/Containerfile.cuda) build with this script.
# Needs what scripts/setup.sh installs. Usage: scripts/build_release.sh [BUILD_DIR] [CMAKE_ARG...]
#   scripts/build_release.sh build-release -DPAGODA_CUDA=ON
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-release}
shift || true
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGODA_BUILD_TESTS=OFF -DPAGODA_BUILD_BENCHMARKS=OFF \
  -DPAGODA_PYTHON=OFF "$@"
cmake --build "$build" -j "$(nproc)" --target pagoda_cli pagoda_gateway_cli
(cd "$build" && cpack -G DEB >/dev/null)
scripts/runtime_packages.sh "$build/pagoda" "$build/pagoda-gateway" > "$build/runtime-packages.txt"
echo "build_release: $build/pagoda, $build/pagoda-gateway, $(ls "$build"/pagoda_*.deb); runtime packages: $(wc -l < "$build/runtime-packages.txt") ($build/runtime-packages.txt)"
