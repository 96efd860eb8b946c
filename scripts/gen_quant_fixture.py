#!/usr/bin/env python3
"""Writes testdata/quant/: GGUF block fixtures made by the `gguf` Python package (an independent
implementation of the formats), checked by tests/quant/gguf_fixture_test.cc.

For each format NAME:
  NAME.q    quantized bytes: legacy formats (q4_0 ... q8_0, bf16, f16) quantized from input.f32 by
            gguf.quants.quantize (our quantize_row must produce the same bytes); k-quants, q2_k,
            q3_k, iq4_nl, iq4_xs, tq1_0 and tq2_0 are random blocks (every bit pattern occurs) with
            sane fp16 scales.
  NAME.deq  gguf.quants.dequantize of NAME.q as float32 (our dequantize_row must match exactly).
input.f32: ROWS x COLS float32 (gaussian rows with a few special rows: zeros, constants, one spike).

Run with the test venv: .venv-test/bin/python scripts/gen_quant_fixture.py [--check]
--check regenerates in memory and exits 1 if the committed files differ.
"""
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

ROWS, COLS = 8, 512
OUT = Path(__file__).resolve().parent.parent / "testdata" / "quant"


def make_input() -> np.ndarray:
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    x[1] = 0.0                       # all-zero row: scales must be 0, no NaN
    x[2] = 0.75                      # constant row
    x[3, 5] = 40.0                   # outlier
    x[4] = np.abs(x[4]) + 0.5        # positive only (mins > 0)
    x[5] = -np.abs(x[5]) * 3.0       # negative only
    x[6] *= 1e-3                     # small magnitudes
    return x


def random_k_blocks(qtype, nblocks, rng) -> np.ndarray:
    size = quants.GGML_QUANT_SIZES[qtype][1]
    b = rng.integers(0, 256, size=(nblocks, size), dtype=np.uint8)
    def f16(vals):
        return np.asarray(vals, dtype=np.float16).view(np.uint8).reshape(nblocks, 2)
    if qtype in (T.Q4_K, T.Q5_K):
        b[:, 0:2] = f16(rng.uniform(0.001, 0.05, nblocks))   # d
        b[:, 2:4] = f16(rng.uniform(0.001, 0.05, nblocks))   # dmin
    elif qtype == T.Q6_K:
        b[:, size - 2:size] = f16(rng.uniform(0.001, 0.05, nblocks))
    elif qtype == T.Q2_K:
        b[:, 80:82] = f16(rng.uniform(0.001, 0.05, nblocks))   # d
        b[:, 82:84] = f16(rng.uniform(0.001, 0.05, nblocks))   # dmin
    elif qtype in (T.Q3_K, T.TQ1_0, T.TQ2_0):
        b[:, size - 2:size] = f16(rng.uniform(0.001, 0.05, nblocks))
    elif qtype in (T.IQ4_NL, T.IQ4_XS):
        b[:, 0:2] = f16(rng.uniform(-0.05, 0.05, nblocks))
    return b


def build() -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    x = make_input()
    files["input.f32"] = x.tobytes()
    for name, qt in [("f16", T.F16), ("bf16", T.BF16), ("q4_0", T.Q4_0), ("q4_1", T.Q4_1),
                     ("q5_0", T.Q5_0), ("q5_1", T.Q5_1), ("q8_0", T.Q8_0)]:
        if qt == T.F16:
            q = x.astype(np.float16).view(np.uint8)
        else:
            q = quants.quantize(x, qt)
        files[f"{name}.q"] = np.ascontiguousarray(q).tobytes()
        files[f"{name}.deq"] = quants.dequantize(q, qt).astype(np.float32).tobytes()
    rng = np.random.default_rng(99)
    for name, qt in [("q4_k", T.Q4_K), ("q5_k", T.Q5_K), ("q6_k", T.Q6_K), ("q2_k", T.Q2_K), ("q3_k", T.Q3_K),
                     ("iq4_nl", T.IQ4_NL), ("iq4_xs", T.IQ4_XS), ("tq1_0", T.TQ1_0), ("tq2_0", T.TQ2_0)]:
        b = random_k_blocks(qt, ROWS * COLS // quants.GGML_QUANT_SIZES[qt][0], rng)
        files[f"{name}.q"] = b.tobytes()
        files[f"{name}.deq"] = quants.dequantize(b, qt).astype(np.float32).tobytes()
    return files


def main() -> int:
    files = build()
    if "--check" in sys.argv:
        bad = [n for n, data in files.items() if not (OUT / n).exists() or (OUT / n).read_bytes() != data]
        if bad:
            print("stale fixture files:", bad)
            return 1
        print("fixture up to date")
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    for n, data in files.items():
        (OUT / n).write_bytes(data)
    print(f"wrote {len(files)} files to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
