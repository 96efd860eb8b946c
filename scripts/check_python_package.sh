#!/usr/bin/env bash
# Checks the Python package as a user installs it: a fresh venv, `pip install .` (scikit-build-core
# from the pip registry, this machine's CMake/Ninja and Debian's pybind11; from an empty build
# folder), then the one-liner of the README run from the repository root against the installed
# package, and `pagoda` imported from outside the tree. ccache, when installed, is handed to the
# build (CMAKE_ARGS) so unchanged objects are not recompiled; the compilers are named as a plain
# CMake build names them (c++, cc), since ccache keys on the compiler's name too.
#   scripts/check_python_package.sh [--venv DIR]   (default /tmp/pagoda-check-venv, recreated)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=/tmp/pagoda-check-venv
[ "${1:-}" = "--venv" ] && venv=$2
bash scripts/apt_install.sh requirements/apt-run.txt requirements/apt-python.txt
[ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ] || bash scripts/fetch_models.sh
rm -rf "$venv" build-py
python3 -m venv "$venv"
if command -v ccache >/dev/null; then
  export CMAKE_ARGS="-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER=cc -DCMAKE_CXX_COMPILER=c++ ${CMAKE_ARGS:-}"
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd .. && pwd)}
fi
t0=$(date +%s)
"$venv/bin/pip" install --quiet .
echo "check_python_package: pip install . took $(($(date +%s) - t0)) s; $("$venv/bin/pip" list 2>/dev/null | grep -i '^pagoda ')"
# The installed package, not the source folder (python/pagoda is not on the path from the root).
"$venv/bin/python" -c "import pagoda, sys; assert '$venv' in pagoda.__file__, pagoda.__file__; print('pagoda', pagoda.__version__, 'from', pagoda.__file__, file=sys.stderr)"
"$venv/bin/python" -c "import pagoda; print(pagoda.LLM('models/SmolLM2-135M-Instruct.Q4_1.gguf').generate(['Hello'])[0].text)"
(cd /tmp && "$venv/bin/python" -c "import pagoda; print(pagoda.SamplingParams(temperature=0, max_tokens=8))")
echo "check_python_package: ok"
