#!/usr/bin/env bash
# Installs the Debian packages listed in the given files (requirements/apt-*.txt: one per line,
# '#' comments) that are not installed yet. Usage: scripts/apt_install.sh LIST...
set -euo pipefail
missing=()
for list in "$@"; do
  while read -r p; do
    [ -n "$p" ] || continue
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$list")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
