"""The tiny random-weight models and the committed reference data are consistent (CTest label `model`).

1. tools/make_tiny_models.py regenerates models bit-identical to testdata/reference/models.json
   (the models the reference logits were computed from), into a temporary directory.
2. The models under PAGODA_MODELS_DIR/tiny (made by scripts/make_test_models.sh during scripts/setup_test.sh) match too.
3. Every reference set in testdata/reference/index.json is complete and self-consistent: logits
   files of the documented size, top-1 ids equal to the stored logits' argmax, checkpoints known.
Uses numpy only (the test venv); the C++ model tests compare Pagoda's logits with these files.
"""
import hashlib
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TESTDATA = pathlib.Path(os.environ.get("PAGODA_TESTDATA_DIR", ROOT / "testdata"))
MODELS = pathlib.Path(os.environ.get("PAGODA_MODELS_DIR", ROOT / "models"))
SHARED = pathlib.Path(os.environ.get("PAGODA_SHARED_DIR", ROOT.parent / "shared"))
REF = TESTDATA / "reference"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def manifest():
    with open(REF / "models.json") as f:
        return json.load(f)


def test_regenerated_models_are_bit_identical(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "make_tiny_models.py"), "--check",
                           "--out", str(tmp_path / "tiny"), "--shared", str(SHARED)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, ("tiny models regenerated here differ from testdata/reference/models.json; "
                                  "the reference logits no longer describe them:\n" + proc.stdout)


def test_models_dir_matches_manifest():
    tiny = MODELS / "tiny"
    assert tiny.is_dir(), f"{tiny} missing: run scripts/make_test_models.sh (scripts/setup_test.sh does)"
    bad = []
    for model in manifest()["models"].values():
        for rel, meta in model["files"].items():
            p = MODELS / rel
            if not p.exists():
                bad.append(f"{p}: missing")
            elif sha256(p) != meta["sha256"]:
                bad.append(f"{p}: sha256 differs from models.json")
    assert not bad, "stale tiny models (run scripts/make_test_models.sh):\n" + "\n".join(bad)


def reference_sets():
    with open(REF / "index.json") as f:
        return json.load(f)["sets"]


def test_every_tiny_checkpoint_has_a_reference_set():
    sets = reference_sets()
    for name, model in manifest()["models"].items():
        for c in model["checkpoints"]:
            assert c["reference"] in sets, f"{name}: checkpoint {c['path']} names unknown set {c['reference']}"


@pytest.mark.parametrize("set_name", sorted(reference_sets()))
def test_reference_set_is_consistent(set_name):
    entry = reference_sets()[set_name]
    assert entry["checkpoints"], set_name
    files = {rel: meta for m in manifest()["models"].values() for rel, meta in m["files"].items()}
    for c in entry["checkpoints"]:
        assert c["root"] in ("models", "shared")
        if c["root"] == "models" and c["path"].startswith("tiny/") and c["format"] == "gguf":
            assert files[c["path"]]["sha256"] == c["sha256"], f"{c['path']}: reference made from another file"
    for prompt in entry["prompts"]:
        with open(REF / set_name / f"{prompt}.json") as f:
            doc = json.load(f)
        assert doc["format"] == "pagoda-reference-logits/1"
        T, V = doc["num_positions"], doc["vocab_size"]
        assert T == len(doc["prompt_ids"]) == len(doc["top1"]) == len(doc["top1_margin"])
        rows, cols = doc["logits_shape"]
        assert cols == V and rows == len(doc["logits_positions"])
        logits = np.fromfile(REF / set_name / doc["logits_file"], dtype="<f4")
        assert logits.size == rows * V, f"{set_name}/{doc['logits_file']}: {logits.size} values, want {rows * V}"
        logits = logits.reshape(rows, V)
        assert np.isfinite(logits).all()
        for r, pos in enumerate(doc["logits_positions"]):
            assert int(np.argmax(logits[r])) == doc["top1"][pos], f"{set_name}/{prompt} position {pos}"
        if rows < T:
            assert doc["topk"] and len(doc["topk"]["ids"]) == T
            assert [row[0] for row in doc["topk"]["ids"]] == doc["top1"]
        g = doc["greedy"]
        assert len(g["ids"]) == g["new_tokens"] == 32 and len(g["margins"]) == 32
        quantized = entry["weights"] in ("q8_0", "q4_0", "q4_1")
        assert (doc["tolerance_quantized_activations"] is not None) == quantized
        for tol in (doc["tolerance"], doc["tolerance_quantized_activations"]):
            if tol is None:
                continue
            assert tol["weights"] == entry["weights"]
            assert tol["max_abs_diff"] > 0 and tol["decision_margin"] > 0
            assert 0 <= tol["greedy_must_match_prefix"] <= 32
            assert all(doc["top1_margin"][p] <= tol["decision_margin"] for p in tol["top1_exempt_positions"])
            assert all(m > tol["decision_margin"] for m in g["margins"][:tol["greedy_must_match_prefix"]])


def test_stories260k_continuation():
    with open(REF / "stories260K" / "once.json") as f:
        doc = json.load(f)
    assert doc["greedy"]["text"].startswith(", there was a little girl named Lily.")
