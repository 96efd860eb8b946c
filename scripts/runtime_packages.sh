#!/usr/bin/env bash
# Prints the Debian packages that hold the shared libraries BINARY loads (ldd, then dpkg -S), one
# per line, sorted: what a runtime image must install next to the binary (deploy/Containerfile*:
# the build stage writes the list, the runtime stage installs it). Works on any dpkg-based
# distribution (Debian 12, Ubuntu, NVIDIA's CUDA images). Fails on a library no package holds.
# Usage: scripts/runtime_packages.sh BINARY...
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: scripts/runtime_packages.sh BINARY..." >&2; exit 2; }
for bin in "$@"; do
  ldd "$bin" | awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }'
done | sort -u | while read -r lib; do
  real=$(readlink -f "$lib")
  pkg=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$real" 2>/dev/null || true)
  # usrmerge: /lib/... is recorded as /usr/lib/... (or the reverse) in dpkg's database.
  [ -n "$pkg" ] || pkg=$(dpkg -S "/usr${lib#/usr}" 2>/dev/null || dpkg -S "${lib#/usr}" 2>/dev/null || true)
  [ -n "$pkg" ] || { echo "runtime_packages: no package holds $lib" >&2; exit 1; }
  echo "${pkg%%:*}" | tr -d ' ' | cut -d, -f1
done | sed 's/:.*//' | sort -u
