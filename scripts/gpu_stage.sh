#!/usr/bin/env bash
# The device tool sends the session's checkout (not a helper's worktree). This copies what a GPU
# run needs -- this worktree's tracked files and the package of scripts/gpu_pack.sh -- into a
# folder of that checkout that its .git/info/exclude ignores, so the call can `carry` it:
#   scripts/gpu_stage.sh /work/main            -> /work/main/.cuda-carry/
#   run(command="cd .cuda-carry && scripts/gpu_run.sh check", carry=[".cuda-carry"])
set -euo pipefail
cd "$(dirname "$0")/.."
dest_repo=${1:?usage: gpu_stage.sh SESSION_CHECKOUT}
dest=$dest_repo/.cuda-carry
exclude=$(git -C "$dest_repo" rev-parse --git-path info/exclude)
case "$exclude" in /*) ;; *) exclude=$dest_repo/$exclude ;; esac
grep -qx '/.cuda-carry/' "$exclude" 2>/dev/null || echo '/.cuda-carry/' >>"$exclude"
rm -rf "$dest"
mkdir -p "$dest/.gpu"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$dest"
cp .gpu/pack.tar.xz "$dest/.gpu/"
# PAGODA_STAGE_PEER=1: also what the llama.cpp peer needs of ../shared (its sources, its scripts, the
# vocabulary of the synthetic 8B GGUF) as .peer (about 5 MB; the call carries 64 MiB in all).
if [ "${PAGODA_STAGE_PEER:-0}" = 1 ]; then
  shared=${PAGODA_SHARED_DIR:-../shared}
  mkdir -p "$dest/.peer/tokenizers/vocab-vectors"
  cp -rL "$shared/peers" "$shared/tools" "$dest/.peer/"
  cp -L "$shared/tokenizers/vocab-vectors/ggml-vocab-llama-spm.gguf" "$dest/.peer/tokenizers/vocab-vectors/"
fi
du -sh "$dest"
