#!/usr/bin/env bash
# Python venvs:
#   .venv-test  small packages the tests drive (requirements/test.txt); always made.
#   .venv-ref   torch + transformers for regenerating committed references (requirements/ref.txt);
#               only with --ref (CI never needs it: the references are committed).
set -euo pipefail
cd "$(dirname "$0")/.."
make_venv() {  # name requirements-file
  local venv=$1 req=$2 stamp
  stamp="$venv/.requirements.sha256"
  local want
  want=$(sha256sum "$req" | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -r "$req"
  echo "$want" > "$stamp"
}
make_venv .venv-test requirements/test.txt
if [ "${1:-}" = "--ref" ]; then make_venv .venv-ref requirements/ref.txt; fi
echo "setup_python: ok"
