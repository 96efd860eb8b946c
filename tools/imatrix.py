#!/usr/bin/env python3
"""An importance matrix for llama.cpp's quantizer, from a numpy forward of a Llama-family GGUF.

  python tools/imatrix.py MODEL.gguf OUT.npz [--text FILE ...] [--ctx 512] [--chunks 16] [--check PAGODA]

llama-quantize needs an importance matrix for Q2_K_S and the IQ1/IQ2/IQ3_XXS types (it refuses
them without one), and llama-cpp-python has no llama-imatrix. The matrix is what llama-imatrix
collects: for every 2-d weight W[N, K] applied as y = x W^T, the mean over calibration tokens of
x[k]^2, a [K] float32 vector named like the tensor ("blk.3.ffn_down.weight"); tools/quant_compare.py
--imatrix hands it to llama_model_quantize. The forward is plain numpy f32 on the dequantized
weights (gguf.quants), independent of both engines; with --check it is compared with Pagoda's
residual stream (`pagoda dump-layers`) on the first chunk, layer by layer, and the script fails if
any layer is off by more than 1e-3 of the residual's range.
Calibration text defaults to /usr/share/common-licenses (English prose that is not the evaluation
text of tools/quant_compare.py). Llama family only (llama, and Qwen2's q/k/v biases): other
families raise.
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


class Model:
    def __init__(self, path: str):
        r = GGUFReader(path)
        self.arch = r.fields["general.architecture"].contents()
        if self.arch not in ("llama", "qwen2"):
            raise SystemExit(f"{path}: architecture {self.arch!r}: this forward covers llama and qwen2")
        kv = lambda k, d=None: r.fields[f"{self.arch}.{k}"].contents() if f"{self.arch}.{k}" in r.fields else d
        self.layers = int(kv("block_count"))
        self.heads = int(kv("attention.head_count"))
        self.kv_heads = int(kv("attention.head_count_kv", self.heads))
        self.eps = float(kv("attention.layer_norm_rms_epsilon"))
        self.theta = float(kv("rope.freq_base", 10000.0))
        self.t = {}
        for t in r.tensors:
            x = dequantize(t.data, t.tensor_type).astype(np.float32)
            self.t[t.name] = x.reshape([int(d) for d in reversed(t.shape)])
        self.hidden = self.t["token_embd.weight"].shape[1]
        self.head_dim = self.t["blk.0.attn_q.weight"].shape[0] // self.heads
        # GGUF llama/qwen2 rope: llama.cpp's "normal" mode for llama (adjacent pairs, q/k rows
        # permuted at conversion) and "neox" (halves) for qwen2.
        self.neox = self.arch == "qwen2"
        self.tokenizer_path = path

    def rms(self, x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):
        d = self.head_dim
        inv = self.theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        ang = np.outer(pos, inv)  # [T, d/2]
        c, s = np.cos(ang).astype(np.float32)[:, None, :], np.sin(ang).astype(np.float32)[:, None, :]
        if self.neox:
            a, b = x[..., : d // 2], x[..., d // 2:]
            return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
        return out

    def linear(self, name, x, acc):
        w = self.t[name + ".weight"]
        sq = acc.setdefault(name + ".weight", [np.zeros(x.shape[-1], np.float64), 0])
        sq[0] += (x.astype(np.float64) ** 2).sum(0)
        sq[1] += x.shape[0]
        y = x @ w.T
        b = self.t.get(name + ".bias")
        return y + b if b is not None else y

    def forward(self, ids, acc):
        """Residual stream after every layer ([layers] of [T, hidden]); accumulates x^2 into acc."""
        T = len(ids)
        h = self.t["token_embd.weight"][ids]
        pos = np.arange(T)
        mask = np.triu(np.full((T, T), -np.inf, np.float32), 1)
        group = self.heads // self.kv_heads
        out = []
        for l in range(self.layers):
            p = f"blk.{l}."
            x = self.rms(h, self.t[p + "attn_norm.weight"])
            q = self.linear(p + "attn_q", x, acc).reshape(T, self.heads, self.head_dim)
            k = self.linear(p + "attn_k", x, acc).reshape(T, self.kv_heads, self.head_dim)
            v = self.linear(p + "attn_v", x, acc).reshape(T, self.kv_heads, self.head_dim)
            q, k = self.rope(q, pos), self.rope(k, pos)
            k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
            s = np.einsum("thd,shd->hts", q, k) / np.sqrt(self.head_dim) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            a = np.einsum("hts,shd->thd", s, v).reshape(T, -1)
            h = h + self.linear(p + "attn_output", a, acc)
            x = self.rms(h, self.t[p + "ffn_norm.weight"])
            g, u = self.linear(p + "ffn_gate", x, acc), self.linear(p + "ffn_up", x, acc)
            h = h + self.linear(p + "ffn_down", g / (1 + np.exp(-g)) * u, acc)
            out.append(h)
        x = self.rms(h, self.t["output_norm.weight"])
        head = "output.weight" if "output.weight" in self.t else "token_embd.weight"  # tied: the embedding
        sq = acc.setdefault(head, [np.zeros(x.shape[-1], np.float64), 0])
        sq[0] += (x.astype(np.float64) ** 2).sum(0)
        sq[1] += T
        return out


def calibration_ids(model_path: str, files: list, ctx: int, chunks: int) -> list:
    from llama_cpp import Llama  # tokenizer only (vocab_only)
    text = "\n\n".join(open(f, encoding="utf-8", errors="replace").read() for f in files)
    llm = Llama(model_path=model_path, vocab_only=True, verbose=False)
    ids = llm.tokenize(text.encode(), add_bos=False)
    bos = llm.token_bos()
    n = min(chunks, len(ids) // (ctx - 1))
    if n < 1:
        raise SystemExit(f"only {len(ids)} tokens of calibration text")
    return [[bos] + ids[i * (ctx - 1):(i + 1) * (ctx - 1)] for i in range(n)]


def check_against_pagoda(pagoda: str, model_path: str, ids: list, ours: list) -> float:
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([pagoda, "dump-layers", "-m", model_path, "--ids", " ".join(map(str, ids)), "-o", d],
                       check=True, capture_output=True)
        worst = 0.0
        for l, h in enumerate(ours):
            theirs = np.fromfile(os.path.join(d, f"layer_{l}.f32"), dtype=np.float32).reshape(h.shape)
            worst = max(worst, float(np.abs(theirs - h).max() / (np.abs(theirs).max() + 1e-30)))
        return worst


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--text", nargs="*", default=None)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=16)
    ap.add_argument("--check", help="Pagoda binary: compare the residual stream of the first chunk")
    a = ap.parse_args()
    files = a.text or sorted(f for f in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(f))
    m = Model(a.model)
    chunks = calibration_ids(a.model, files, a.ctx, a.chunks)
    acc = {}
    for i, ids in enumerate(chunks):
        layers = m.forward(np.array(ids), acc)
        if i == 0 and a.check:
            err = check_against_pagoda(a.check, a.model, ids, layers)
            print(f"residual stream vs pagoda dump-layers: max error {err:.2e} of the range", file=sys.stderr)
            if err > 1e-3:
                raise SystemExit("the numpy forward disagrees with Pagoda's: not writing an imatrix")
        print(f"chunk {i + 1}/{len(chunks)}", file=sys.stderr, flush=True)
    np.savez(a.out, **{k: (v[0] / v[1]).astype(np.float32) for k, v in acc.items()})
    print(f"{a.out}: {len(acc)} tensors, {len(chunks)} chunks of {a.ctx} tokens", file=sys.stderr)


if __name__ == "__main__":
    main()
