"""tools/make_random_llama.py --peaked: the random-weight model whose greedy continuation does not
depend on the kernels computing it (docs/speculative_decoding.md, `pagoda bench spec` on a GPU).
Built with the numpy path at the "small" shape and run through `pagoda dump-layers`: the greedy
next token at every position is perm^-1[t] of the construction, leading the runner-up by more
than half of its logit (far above bf16's relative rounding of 2^-8), while the same shape's plain
random weights lead by a median under a tenth (the control: near-uniform logits)."""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY = os.environ.get("PAGODA_BINARY", "")
IDS = [5, 17, 300, 42, 999, 7, 123, 64, 5, 17]


def make_and_dump(tmp_path, name, *extra):
    d = tmp_path / name
    env = dict(os.environ, PAGODA_RANDOM_DEVICE="numpy")
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_random_llama.py"), "small", str(d), *extra], env=env,
                   check=True, timeout=120, capture_output=True)
    out = tmp_path / (name + "-dump")
    subprocess.run([BINARY, "dump-layers", "-m", str(d), "--ids", " ".join(map(str, IDS)), "-o", str(out)], check=True,
                   timeout=120, capture_output=True)
    vocab = json.loads((d / "config.json").read_text())["vocab_size"]
    return np.fromfile(out / "logits.f32", dtype=np.float32).reshape(len(IDS), vocab)


def lead(logits):
    s = np.sort(logits, axis=1)
    return (s[:, -1] - s[:, -2]) / np.abs(s[:, -1])


def test_peaked_model_has_the_constructed_greedy_token_far_ahead(tmp_path):
    if not BINARY:
        pytest.skip("PAGODA_BINARY not set")
    peaked = make_and_dump(tmp_path, "peaked", "--peaked")
    vocab = peaked.shape[1]
    inverse = np.argsort(np.random.default_rng(1).permutation(vocab))  # the script's permutation
    assert np.argmax(peaked, axis=1).tolist() == inverse[IDS].tolist()
    assert lead(peaked).min() > 0.5, lead(peaked)
    assert np.abs(peaked).max() < 4 * 256, "logits stay below a few times hidden_size"
    plain = make_and_dump(tmp_path, "plain")
    assert lead(plain).max() < 0.5 and np.median(lead(plain)) < 0.1, lead(plain)
