#!/usr/bin/env python3
"""Random-weight benchmark models of real shapes, written as GGUF (numpy + the gguf package).

  .venv-test/bin/python tools/make_bench_models.py [--shape llama3.2-1b] [--types f16,q8_0] [--out models/bench]
  .venv-test/bin/python tools/make_bench_models.py --shape olmoe-1b-7b --types f16 --out /tmp/olmoe
  python3 tools/make_bench_models.py --shape llama3-70b --types q8_0-raw --out /dev/shm   (75 GB, ~1-2 min)
  python3 tools/make_bench_models.py --shape qwen3-30b-a3b --types q4_k-raw --out /dev/shm   (17 GB; random
      blocks, as q4_0-raw and q8_0-raw: for speed only)
  python3 tools/make_bench_models.py --shape qwen3-30b-a3b --types bf16 --out /dev/shm   (61 GB; --layers N: fewer)

Weights are N(0, 0.02) (as transformers initialises them), norms 1; a MoE router is N(0, 1/sqrt(hidden))
so that tokens spread over the experts. Mixture-of-experts tensors are named and stacked as
llama.cpp's converter writes them (ffn_gate_inp [E, D]; ffn_{gate,up}_exps [E, F, D]; ffn_down_exps
[E, D, F]). Tensors are generated and written one at a time (a 7B f16 file never sits in memory;
llama-quantize makes the quantized files from the f16 one). The GGUF carries a
SentencePiece-style vocabulary of the model's size (<unk>, <s>, </s>, 256 byte pieces, then
filler pieces) so that llama.cpp and Pagoda both load it. For speed measurements only: the text
such a model writes is noise.
Type q8_0-raw writes Q8_0 blocks directly from random bytes (codes uniform in [-128, 127], one
fp16 scale d = 0.02 * sqrt(3) / 127.5 for every block: std ~0.02), with no quantizer in the loop,
so a 70B-shaped file takes about a minute instead of hours. Type bf16-tiled cuts every weight from
one pool of 64 Mi N(0, 0.02) bf16 values at a random offset (tiled past its end): a BF16 file
written at the disk's speed (Qwen3-30B-A3B's 61 GB in well under a minute) whose weights repeat.
"""
import argparse
import os

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUFWriter, GGMLQuantizationType, LlamaFileType
from gguf.quants import quantize

SHAPES = {
    # Llama-3.2-1B: hidden 2048, 16 layers, 32 heads / 8 kv, ffn 8192, vocab 128256, tied.
    "llama3.2-1b": dict(hidden=2048, layers=16, heads=32, kv_heads=8, ffn=8192, vocab=128256, tied=True,
                        theta=500000.0, ctx=8192),
    # OLMoE-1B-7B-0924: hidden 2048, 16 layers, 16 heads (MHA), RMSNorm over the whole q and k,
    # 64 experts top-8 (not renormalised) of width 1024, vocab 50304, untied: 6.9 B / 1.3 B active.
    "olmoe-1b-7b": dict(arch="olmoe", hidden=2048, layers=16, heads=16, kv_heads=16, ffn=1024, vocab=50304,
                        tied=False, theta=10000.0, ctx=4096, experts=64, experts_used=8),
    # Qwen3-30B-A3B: hidden 2048, 48 layers, 32 / 4 heads of 128 (wider than hidden / heads), per-head
    # q/k RMSNorm, 128 experts top-8 (renormalised) of width 768, vocab 151936, untied: 30.5 B / 3.3 B active.
    "qwen3-30b-a3b": dict(arch="qwen3moe", hidden=2048, layers=48, heads=32, kv_heads=4, head_dim=128, ffn=768,
                          vocab=151936, tied=False, theta=1000000.0, ctx=8192, experts=128, experts_used=8,
                          eps=1e-6),
    # Llama-3-70B: hidden 8192, 80 layers, 64 heads / 8 kv, ffn 28672, vocab 128256, untied.
    "llama3-70b": dict(hidden=8192, layers=80, heads=64, kv_heads=8, ffn=28672, vocab=128256, tied=False,
                       theta=500000.0, ctx=8192),
}
TYPES = {"f16": (GGMLQuantizationType.F16, LlamaFileType.MOSTLY_F16),
         "bf16": (GGMLQuantizationType.BF16, LlamaFileType.MOSTLY_BF16),
         "q8_0": (GGMLQuantizationType.Q8_0, LlamaFileType.MOSTLY_Q8_0),
         "q4_0": (GGMLQuantizationType.Q4_0, LlamaFileType.MOSTLY_Q4_0),
         "q8_0-raw": (GGMLQuantizationType.Q8_0, LlamaFileType.MOSTLY_Q8_0),
         "q4_0-raw": (GGMLQuantizationType.Q4_0, LlamaFileType.MOSTLY_Q4_0),
         "q4_k-raw": (GGMLQuantizationType.Q4_K, LlamaFileType.MOSTLY_Q4_K_M),
         "bf16-tiled": (GGMLQuantizationType.BF16, LlamaFileType.MOSTLY_BF16)}
TILE = 1 << 26  # values of the bf16-tiled pool


def tiled_bf16(pool, rng, shape):
    """A bf16 weight of `shape` cut from the random pool at a random offset (tiled when larger)."""
    n, start = int(np.prod(shape)), int(rng.integers(0, len(pool)))
    if start + n <= len(pool):
        out = pool[start:start + n]
    else:
        out, done = np.empty(n, dtype=np.uint16), 0
        while done < n:
            k = min(n - done, len(pool) - start)
            out[done:done + k] = pool[start:start + k]
            done, start = done + k, 0
    return out.view(np.uint8).reshape(*shape[:-1], -1)


def raw_q8_0(rng, shape):
    """Q8_0 blocks of random codes and a constant scale, as [rows, row bytes] uint8."""
    rows, k = int(np.prod(shape[:-1])), shape[-1]
    blocks = np.empty((rows, k // 32, 34), dtype=np.uint8)
    blocks[:, :, 0:2] = np.frombuffer(np.float16(0.02 * 3 ** 0.5 / 127.5).tobytes(), dtype=np.uint8)
    blocks[:, :, 2:] = np.frombuffer(rng.bytes(rows * k), dtype=np.uint8).reshape(rows, k // 32, 32)
    return blocks.reshape(*shape[:-1], -1)


def raw_q4_0(rng, shape):
    """Q4_0 blocks of random nibbles and a constant scale (std about 0.02), as [rows, row bytes] uint8."""
    rows, k = int(np.prod(shape[:-1])), shape[-1]
    blocks = np.empty((rows, k // 32, 18), dtype=np.uint8)
    blocks[:, :, 0:2] = np.frombuffer(np.float16(0.02 / 4.6).tobytes(), dtype=np.uint8)
    blocks[:, :, 2:] = np.frombuffer(rng.bytes(rows * k // 2), dtype=np.uint8).reshape(rows, k // 32, 16)
    return blocks.reshape(*shape[:-1], -1)


def raw_q4_k(rng, shape):
    """Q4_K super-blocks of random nibbles and 6-bit scales / mins under constant d and dmin (values
    of a few hundredths), as [rows, row bytes] uint8."""
    rows, k = int(np.prod(shape[:-1])), shape[-1]
    blocks = np.empty((rows, k // 256, 144), dtype=np.uint8)
    blocks[:, :, 0:2] = np.frombuffer(np.float16(0.0002).tobytes(), dtype=np.uint8)
    blocks[:, :, 2:4] = np.frombuffer(np.float16(0.0002).tobytes(), dtype=np.uint8)
    blocks[:, :, 4:] = np.frombuffer(rng.bytes(rows * (k // 256) * 140), dtype=np.uint8).reshape(rows, k // 256, 140)
    return blocks.reshape(*shape[:-1], -1)


RAW = {"q8_0-raw": raw_q8_0, "q4_0-raw": raw_q4_0, "q4_k-raw": raw_q4_k}


def vocab(n):
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    tokens += [f"\u2581w{i}" for i in range(n - len(tokens))]
    scores = [0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(n - 259)]
    types = [2, 3, 3] + [6] * 256 + [1] * (n - 259)
    return tokens, scores, types


def write(shape_name, type_name, out_dir, seed, layers=None):
    s = SHAPES[shape_name]
    qtype, ftype = TYPES[type_name]
    tag = f"{shape_name}-l{layers}" if layers else shape_name
    path = os.path.join(out_dir, f"{tag}-random.{type_name}.gguf")
    if os.path.exists(path):
        print(f"{path}: exists")
        return
    rng = np.random.default_rng(seed)
    D, F, V, L = s["hidden"], s["ffn"], s["vocab"], layers or s["layers"]
    hd = s.get("head_dim", D // s["heads"])
    Q, KV, E = s["heads"] * hd, s["kv_heads"] * hd, s.get("experts", 0)
    arch = s.get("arch", "llama")
    w = GGUFWriter(path + ".tmp", arch)
    w.add_name(f"{shape_name} random weights")
    w.add_context_length(s["ctx"])
    w.add_embedding_length(D)
    w.add_block_count(L)
    if arch == "qwen3moe":  # the dense width is unused (every layer is MoE); the experts' width
        w.add_feed_forward_length(6144)
        w.add_expert_feed_forward_length(F)
        w.add_key_length(hd)
        w.add_value_length(hd)
    else:
        w.add_feed_forward_length(F)
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_layer_norm_rms_eps(s.get("eps", 1e-5))
    w.add_rope_freq_base(s["theta"])
    w.add_rope_dimension_count(hd)
    if E:
        w.add_expert_count(E)
        w.add_expert_used_count(s["experts_used"])
    w.add_file_type(ftype)
    w.add_vocab_size(V)
    toks, scores, types = vocab(V)
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    # (name, shape, std): std None is a norm weight (ones, f32); 2-d and 3-d weights are in `qtype`
    # except the router (f32, as llama.cpp's converter keeps ffn_gate_inp).
    specs = [("token_embd.weight", (V, D), 0.02), ("output_norm.weight", (D,), None)]
    if not s["tied"]:
        specs.append(("output.weight", (V, D), 0.02))
    for i in range(L):
        p = f"blk.{i}."
        specs += [(p + "attn_norm.weight", (D,), None), (p + "attn_q.weight", (Q, D), 0.02),
                  (p + "attn_k.weight", (KV, D), 0.02), (p + "attn_v.weight", (KV, D), 0.02),
                  (p + "attn_output.weight", (D, Q), 0.02)]
        if arch == "olmoe":
            specs += [(p + "attn_q_norm.weight", (D,), None), (p + "attn_k_norm.weight", (KV,), None)]
        if arch == "qwen3moe":
            specs += [(p + "attn_q_norm.weight", (hd,), None), (p + "attn_k_norm.weight", (hd,), None)]
        specs.append((p + "ffn_norm.weight", (D,), None))
        if E:
            specs += [(p + "ffn_gate_inp.weight", (E, D), D ** -0.5), (p + "ffn_gate_exps.weight", (E, F, D), 0.02),
                      (p + "ffn_down_exps.weight", (E, D, F), 0.02), (p + "ffn_up_exps.weight", (E, F, D), 0.02)]
        else:
            specs += [(p + "ffn_gate.weight", (F, D), 0.02), (p + "ffn_up.weight", (F, D), 0.02),
                      (p + "ffn_down.weight", (D, F), 0.02)]

    def stored(name, shape, std):
        return std is None or "ffn_gate_inp" in name  # f32

    pool = None
    if type_name == "bf16-tiled":
        u = (rng.standard_normal(TILE, dtype=np.float32) * 0.02).view(np.uint32)
        pool = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)

    def make(name, shape, std):
        if std is None:
            return np.ones(shape, dtype=np.float32)
        if type_name in RAW and not stored(name, shape, std):
            return RAW[type_name](rng, shape)
        if pool is not None and not stored(name, shape, std):
            return tiled_bf16(pool, rng, shape)
        x = rng.standard_normal(shape, dtype=np.float32)
        x *= std
        if stored(name, shape, std):
            return x
        if qtype == GGMLQuantizationType.F16:
            return x.astype(np.float16)
        if qtype == GGMLQuantizationType.BF16:  # round to nearest even: the top 16 bits of the f32
            u = x.view(np.uint32)
            return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).view(np.uint8).reshape(*shape[:-1], -1)
        return quantize(x, qtype)

    for name, shape, std in specs:
        n = int(np.prod(shape))
        if stored(name, shape, std):
            w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * n)
        elif qtype == GGMLQuantizationType.F16:
            w.add_tensor_info(name, shape, np.dtype(np.float16), 2 * n)
        else:  # raw: the shape in bytes per row, as add_tensor_info takes it
            block, nbytes = GGML_QUANT_SIZES[qtype]
            row = shape[-1] // block * nbytes
            w.add_tensor_info(name, (*shape[:-1], row), np.dtype(np.uint8), n // shape[-1] * row, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for n, (name, shape, std) in enumerate(specs):
        w.write_tensor_data(make(name, shape, std))
        if name.endswith("ffn_norm.weight") or n == len(specs) - 1:
            print(f"{path}: {name} ({n + 1}/{len(specs)})", flush=True)
    w.close()
    os.rename(path + ".tmp", path)
    print(f"{path}: written")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama3.2-1b", choices=sorted(SHAPES))
    ap.add_argument("--types", default="f16,q8_0")
    ap.add_argument("--out", default="models/bench")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--layers", type=int, default=None,
                    help="fewer layers than the shape (same layer; the file is named <shape>-l<N>-random.<type>.gguf)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for t in a.types.split(","):
        write(a.shape, t, a.out, a.seed, a.layers)


if __name__ == "__main__":
    main()
