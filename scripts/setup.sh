#!/usr/bin/env bash
# Pagoda setup: every system package and Python tool the build, tests and benchmarks need.
# Idempotent; safe to re-run. Usage: scripts/setup.sh [--no-python] [--with-peer]
#   --no-python   skip the Python venvs (C++ build only)
#   --with-peer   also build llama-cpp-python (the benchmark peer) into .venv-peer
set -euo pipefail
cd "$(dirname "$0")/.."

want_python=1; want_peer=0
for a in "$@"; do
  case "$a" in
    --no-python) want_python=0 ;;
    --with-peer) want_peer=1 ;;
    *) echo "unknown option $a" >&2; exit 2 ;;
  esac
done

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config clang lld libclang-rt-14-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev
  libgtest-dev libgmock-dev libbenchmark-dev libxxhash-dev libutf8proc-dev libicu-dev
  python3-venv python3-sentencepiece unzip
  # service layer: HTTP (Boost.Beast/Asio), gRPC + protobuf (code generated at build time)
  libboost-dev libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  # real peers of the end-to-end tests: curl, Prometheus (+ promtool), headless Chromium
  curl prometheus chromium
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [ "$want_python" = 1 ]; then
  bash scripts/setup_python.sh
  bash scripts/fetch_models.sh
  bash scripts/make_test_models.sh
fi
if [ "$want_peer" = 1 ]; then
  bash scripts/setup_peer.sh
fi
echo "setup: done"
