#!/usr/bin/env bash
# Measures what the setup commands install on a clean Debian 12: debootstraps a minbase bookworm
# root (default /tmp/pagoda-deb12, reused when present), then, inside it, asks apt what
# requirements/apt-run.txt alone (scripts/setup.sh) and with requirements/apt-test.txt
# (scripts/setup_test.sh) would install: package count, download and installed size (apt's own
# figures, --no-install-recommends as the scripts use).
#   scripts/measure_setup.sh [--root DIR] [--install] [--run-clone]
#   --install   also really install the run set, then the test set, in the root and time each
#               (apt-get install; downloads included)
#   --run-clone also clone this repository's HEAD into a copy of the bare root (DIR-clone: a plain
#               clone, nothing beside it)
#               and time the README's run command there as one command: scripts/setup.sh &&
#               scripts/run.sh (apt, the model download, a cold build without ccache, the answer);
#               prints its wall and CPU seconds, the load average around it and how much the root
#               grew (du, apt's download cache and package lists left out)
# Needs root and the Debian mirror. Nothing is written to the repository. The host's local CA
# certificates (/usr/local/share/ca-certificates) are copied into the root, so that TLS to the
# package registries works there as on the host (ca-certificates picks them up when installed).
set -euo pipefail
cd "$(dirname "$0")/.."
root=/tmp/pagoda-deb12; install=0; run_clone=0
while [ $# -gt 0 ]; do
  case "$1" in
    --root) root=$2; shift ;;
    --install) install=1 ;;
    --run-clone) run_clone=1 ;;
    *) echo "measure_setup: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
if [ ! -x "$root/usr/bin/apt-get" ]; then
  t0=$(date +%s)
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >/tmp/pagoda-debootstrap.log
  echo "measure_setup: debootstrap --variant=minbase bookworm in $(($(date +%s) - t0)) s"
  # The host's sources (main, updates, security) instead of debootstrap's single line.
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/" && rm -f "$root/etc/apt/sources.list"
  fi
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
fi
if [ "$run_clone" = 1 ]; then
  # The timed run gets its own copy of the bare root, taken before anything is installed.
  if chroot "$root" dpkg -s cmake >/dev/null 2>&1; then
    echo "measure_setup: $root is not bare (an earlier --install): remove it for --run-clone" >&2; exit 2
  fi
  rm -rf "$root-clone"; cp -a "$root" "$root-clone"
fi
chroot "$root" apt-get update -q >/dev/null
pkgs() { sed -e 's/#.*//' -e 's/[[:space:]]//g' "$@" | grep -v '^$' | tr '\n' ' '; }
report() {  # label lists...
  local label=$1; shift
  # apt-get -s prints the plan; apt's summary line gives the sizes.
  local out
  out=$(chroot "$root" apt-get install -s -y --no-install-recommends $(pkgs "$@") 2>&1)
  local n; n=$(grep -c '^Inst ' <<<"$out" || true)
  # Installed-Size (KiB) of each package apt would install, from the root's package lists.
  local names; names=$(grep '^Inst ' <<<"$out" | awk '{print $2}')
  local kib; kib=$(chroot "$root" apt-cache show --no-all-versions $names 2>/dev/null |
    awk '/^Installed-Size:/{s+=$2} END{print s+0}')
  local dl; dl=$(chroot "$root" apt-get install -qq -y --no-install-recommends --print-uris $(pkgs "$@") 2>/dev/null |
    awk "/^'/{s+=\$3} END{print s+0}")
  printf 'measure_setup: %-28s %4d packages, download %6.0f MB, installed %6.0f MB\n' "$label" "$n" \
    "$(echo "$dl / 1000000" | bc -l)" "$(echo "$kib / 1024" | bc -l)"
  echo "measure_setup:   largest: $(chroot "$root" apt-cache show --no-all-versions $names 2>/dev/null |
    awk '/^Package:/{p=$2} /^Installed-Size:/{printf "%d %s\n", $2/1024, p}' | sort -rn | head -8 |
    awk '{printf "%s %s MB, ", $2, $1}')"
}
command -v bc >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends bc
report "run (setup.sh)" requirements/apt-run.txt
report "run + test (setup_test.sh)" requirements/apt-run.txt requirements/apt-test.txt
if [ "$install" = 1 ]; then
  t0=$(date +%s)
  before=$(du -sxm "$root" | cut -f1)
  chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    $(pkgs requirements/apt-run.txt) >/tmp/pagoda-measure-install.log
  after=$(du -sxm "$root" | cut -f1)
  echo "measure_setup: run set installed in $(($(date +%s) - t0)) s; root grew $((after - before)) MB (du -sxm)"
  t0=$(date +%s)
  chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    $(pkgs requirements/apt-test.txt) >>/tmp/pagoda-measure-install.log
  after2=$(du -sxm "$root" | cut -f1)
  echo "measure_setup: test set added in $(($(date +%s) - t0)) s; root grew $((after2 - after)) MB more (du -sxm)"
fi
if [ "$run_clone" = 1 ]; then
  root=$root-clone
  git clone -q "$(pwd)" "$root/root/pagoda"
  for m in proc sys dev; do mountpoint -q "$root/$m" || mount --bind "/$m" "$root/$m"; done
  size() { (cd "$root" && du -sxm --exclude=./var/cache/apt --exclude=./var/lib/apt/lists . | cut -f1); }
  before=$(size); load0=$(cut -d' ' -f1-3 /proc/loadavg)
  rc=0
  TIMEFORMAT='%R %U %S'
  { time chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      /bin/bash -c 'cd /root/pagoda && scripts/setup.sh && scripts/run.sh' >/tmp/pagoda-measure-run.log 2>&1 || rc=$?; } 2>/tmp/pagoda-measure-time.txt
  read -r real user sys </tmp/pagoda-measure-time.txt
  echo "measure_setup: fresh clone: scripts/setup.sh && scripts/run.sh exit $rc in ${real%.*} s wall," \
    "$(echo "$user + $sys" | bc | cut -d. -f1) s CPU (user+sys); load average $load0 before, $(cut -d' ' -f1-3 /proc/loadavg) after"
  echo "measure_setup: fresh clone: the root grew $(($(size) - before)) MB (du -sxm, apt caches left out)"
  tail -5 /tmp/pagoda-measure-run.log
  for m in dev sys proc; do umount "$root/$m"; done
fi
