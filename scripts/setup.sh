#!/usr/bin/env bash
# Pagoda setup for building and running (the README's run command): the compiler, build tools and
# libraries the binary links (requirements/apt-run.txt) and the default model. Works from a plain
# clone with nothing beside it. The test tooling is scripts/setup_test.sh's.
# Idempotent; safe to re-run. Usage: scripts/setup.sh [--no-model] [--python]
#   --no-model   skip fetching the default model
#   --python     also what `pip install .` (the Python package) needs: requirements/apt-python.txt
set -euo pipefail
cd "$(dirname "$0")/.."

want_model=1
lists=(requirements/apt-run.txt)
for a in "$@"; do
  case "$a" in
    --no-model) want_model=0 ;;
    --python) lists+=(requirements/apt-python.txt) ;;
    *) echo "setup: unknown option $a" >&2; exit 2 ;;
  esac
done

bash scripts/apt_install.sh "${lists[@]}"
if [ "$want_model" = 1 ]; then
  bash scripts/fetch_models.sh
fi
echo "setup: done (build and run; scripts/setup_test.sh adds the test tooling)"
