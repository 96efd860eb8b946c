#!/usr/bin/env bash
# Checks the Debian package on a clean Debian 12: debootstraps a minbase bookworm root (default
# /tmp/pagoda-deb12-clean, reused when present), installs build/pagoda_*.deb there with apt (which
# pulls its runtime libraries, no -dev package) and runs `pagoda generate` on MODEL from it.
#   (cd build && cpack -G DEB) && scripts/check_deb.sh [MODEL.gguf] [--root DIR]
# Needs root and the Debian mirror. Nothing is written to the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
model=models/SmolLM2-135M-Instruct.Q4_1.gguf; root=/tmp/pagoda-deb12-clean
while [ $# -gt 0 ]; do
  case "$1" in
    --root) root=$2; shift ;;
    *) model=$1 ;;
  esac
  shift
done
deb=$(ls build/pagoda_*_amd64.deb | tail -1)
command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
if [ ! -x "$root/usr/bin/apt-get" ]; then
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >/tmp/pagoda-check-deb-debootstrap.log
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/" && rm -f "$root/etc/apt/sources.list"
  fi
  cp /etc/resolv.conf "$root/etc/resolv.conf"
fi
cp "$deb" "$root/tmp/pagoda.deb"
cp -L "$model" "$root/tmp/model.gguf"
t0=$(date +%s)
chroot "$root" apt-get update -q >/dev/null
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends --reinstall /tmp/pagoda.deb >/tmp/pagoda-check-deb.log
echo "check_deb: $(basename "$deb") installed in $(($(date +%s) - t0)) s; -dev packages in the root: $(chroot "$root" dpkg -l | grep -c '^ii  [^ ]*-dev' || true)"
chroot "$root" /usr/bin/pagoda generate /tmp/model.gguf --chat -p "Write a haiku about a lighthouse." -n 40 --temperature 0 --seed 42
