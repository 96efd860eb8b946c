"""tools/make_bench_models.py, the random-weight benchmark GGUFs (the CPU OLMoE row of
docs/performance.md is measured on its olmoe-1b-7b file): small shapes of the same kinds written in
every type it offers, read back with the gguf package, and loaded by `pagoda info`.
- a mixture-of-experts shape carries llama.cpp's converter's names and layouts: the router
  ffn_gate_inp [E, D] in f32, the experts stacked as ffn_{gate,up}_exps [E, F, D] and ffn_down_exps
  [E, D, F], OLMoE's whole-projection q/k norms, expert_count / expert_used_count;
- each type stores what it says, and the same seed gives the same weights in every type (the
  quantized tensors dequantize to the f16 file's values within their formats' error);
- a dense shape keeps its tensor list (no expert tensors, tied: no output.weight);
- q8_0-raw (the 70B file's writer: random codes, no quantizer) writes valid Q8_0 blocks with the
  one scale it documents, weights of std ~0.02, the f16 file's tensor list, and loads in Pagoda.
"""
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import unittest

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType
from gguf.quants import dequantize

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import make_bench_models  # noqa: E402

BINARY = os.environ.get("PAGODA_BINARY", str(ROOT / "build" / "pagoda"))
MOE = dict(arch="olmoe", hidden=64, layers=2, heads=4, kv_heads=4, ffn=32, vocab=300, tied=False, theta=1e4, ctx=256,
           experts=8, experts_used=2)
DENSE = dict(hidden=64, layers=2, heads=4, kv_heads=2, ffn=96, vocab=300, tied=True, theta=1e4, ctx=256)
# Largest |dequantized - f16| for weights ~ N(0, 0.02) (|w| < ~0.12): half a step of the format.
TOLERANCE = {"bf16": 1e-3, "q8_0": 1e-3, "q4_0": 2e-2}


def tensors(path):
    return {t.name: t for t in GGUFReader(path).tensors}


def values(t):
    """The tensor's values as f32, numpy (row-major) shape."""
    return np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)


class BenchModelsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="bench_models_")
        make_bench_models.SHAPES["test-moe"] = MOE
        make_bench_models.SHAPES["test-dense"] = DENSE
        for shape in ("test-moe", "test-dense"):
            for ty in ("f16", "bf16", "q8_0", "q4_0", "q8_0-raw"):
                make_bench_models.write(shape, ty, cls.dir, 7)

    def path(self, shape, ty):
        return os.path.join(self.dir, f"{shape}-random.{ty}.gguf")

    def test_moe_names_shapes_and_metadata(self):
        D, F, E = MOE["hidden"], MOE["ffn"], MOE["experts"]
        r = GGUFReader(self.path("test-moe", "q4_0"))
        self.assertEqual(r.fields["general.architecture"].contents(), "olmoe")
        self.assertEqual(r.fields["olmoe.expert_count"].contents(), E)
        self.assertEqual(r.fields["olmoe.expert_used_count"].contents(), MOE["experts_used"])
        t = {x.name: x for x in r.tensors}
        for l in range(MOE["layers"]):
            b = f"blk.{l}."
            want = {"ffn_gate_inp.weight": (E, D), "ffn_gate_exps.weight": (E, F, D), "ffn_up_exps.weight": (E, F, D),
                    "ffn_down_exps.weight": (E, D, F), "attn_q_norm.weight": (D,), "attn_k_norm.weight": (D,)}
            for name, shape in want.items():
                self.assertEqual(values(t[b + name]).shape, shape, b + name)
            self.assertEqual(t[b + "ffn_gate_inp.weight"].tensor_type, GGMLQuantizationType.F32)
            self.assertEqual(t[b + "ffn_gate_exps.weight"].tensor_type, GGMLQuantizationType.Q4_0)
            self.assertNotIn(b + "ffn_gate.weight", t)
        self.assertIn("output.weight", t)  # untied
        # The router spreads tokens: std ~ 1/sqrt(D), not the 0.02 of the other weights.
        self.assertAlmostEqual(float(values(t["blk.0.ffn_gate_inp.weight"]).std()), D ** -0.5, delta=0.3 * D ** -0.5)

    def test_types_store_the_same_weights(self):
        for shape in ("test-moe", "test-dense"):
            ref = tensors(self.path(shape, "f16"))
            for ty, tol in TOLERANCE.items():
                got = tensors(self.path(shape, ty))
                self.assertEqual(list(got), list(ref), f"{shape} {ty}: tensor list")
                for name, t in got.items():
                    a, b = values(ref[name]), values(t)
                    self.assertEqual(a.shape, b.shape, f"{shape} {ty} {name}")
                    if len(a.shape) >= 2 and "ffn_gate_inp" not in name:
                        self.assertEqual(t.tensor_type.name.lower(), ty, f"{shape} {name}")
                    err = float(np.abs(a - b).max())
                    self.assertLess(err, tol, f"{shape} {ty} {name}: max |diff| {err}")

    def test_dense_shape(self):
        t = tensors(self.path("test-dense", "q8_0"))
        self.assertNotIn("output.weight", t)  # tied
        self.assertEqual(values(t["blk.1.ffn_gate.weight"]).shape, (DENSE["ffn"], DENSE["hidden"]))
        self.assertFalse(any("exps" in n or "q_norm" in n for n in t))

    def test_raw_q8_0_blocks(self):
        for shape in ("test-moe", "test-dense"):
            ref = tensors(self.path(shape, "f16"))
            got = tensors(self.path(shape, "q8_0-raw"))
            self.assertEqual(list(got), list(ref), f"{shape}: tensor list")
            d = np.float16(0.02 * 3 ** 0.5 / 127.5)
            for name, t in got.items():
                self.assertEqual(values(t).shape, values(ref[name]).shape, f"{shape} {name}")
                if ref[name].tensor_type == GGMLQuantizationType.F32:  # norms, the router
                    self.assertEqual(t.tensor_type, GGMLQuantizationType.F32, name)
                    continue
                self.assertEqual(t.tensor_type, GGMLQuantizationType.Q8_0, name)
                blocks = np.asarray(t.data, dtype=np.uint8).reshape(-1, 34)
                self.assertTrue(np.all(blocks[:, 0:2].copy().view(np.float16) == d), name)
                self.assertAlmostEqual(float(values(t).std()), 0.02, delta=0.002, msg=f"{shape} {name}")

    @unittest.skipUnless(os.path.exists(BINARY), f"no {BINARY}")
    def test_pagoda_loads_the_moe_file(self):
        for ty in ("f16", "q8_0", "q4_0", "q8_0-raw"):
            r = subprocess.run([BINARY, "info", "-m", self.path("test-moe", ty)], capture_output=True, text=True,
                               timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stdout, r"experts\s+8 \(top-2\), expert ffn 32")
            self.assertTrue(re.search(r"q/k norm", r.stdout), r.stdout)


if __name__ == "__main__":
    unittest.main()
