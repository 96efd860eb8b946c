#!/usr/bin/env python3
"""Random-weight benchmark models of real shapes, written as GGUF (numpy + the gguf package).

  .venv-test/bin/python tools/make_bench_models.py [--shape llama3.2-1b] [--types f16,q8_0] [--out models/bench]

Weights are N(0, 0.02) (as transformers initialises them), norms 1. The GGUF carries a
SentencePiece-style vocabulary of the model's size (<unk>, <s>, </s>, 256 byte pieces, then
filler pieces) so that llama.cpp and Pagoda both load it. For speed measurements only: the text
such a model writes is noise.
"""
import argparse
import os

import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType, LlamaFileType
from gguf.quants import quantize

SHAPES = {
    # Llama-3.2-1B: hidden 2048, 16 layers, 32 heads / 8 kv, ffn 8192, vocab 128256, tied.
    "llama3.2-1b": dict(hidden=2048, layers=16, heads=32, kv_heads=8, ffn=8192, vocab=128256, tied=True,
                        theta=500000.0, ctx=8192),
}
TYPES = {"f16": (GGMLQuantizationType.F16, LlamaFileType.MOSTLY_F16),
         "bf16": (GGMLQuantizationType.BF16, LlamaFileType.MOSTLY_BF16),
         "q8_0": (GGMLQuantizationType.Q8_0, LlamaFileType.MOSTLY_Q8_0),
         "q4_0": (GGMLQuantizationType.Q4_0, LlamaFileType.MOSTLY_Q4_0)}


def vocab(n):
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    tokens += [f"\u2581w{i}" for i in range(n - len(tokens))]
    scores = [0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(n - 259)]
    types = [2, 3, 3] + [6] * 256 + [1] * (n - 259)
    return tokens, scores, types


def write(shape_name, type_name, out_dir, seed):
    s = SHAPES[shape_name]
    qtype, ftype = TYPES[type_name]
    path = os.path.join(out_dir, f"{shape_name}-random.{type_name}.gguf")
    if os.path.exists(path):
        print(f"{path}: exists")
        return
    rng = np.random.default_rng(seed)
    D, F, V, L = s["hidden"], s["ffn"], s["vocab"], s["layers"]
    hd = D // s["heads"]
    w = GGUFWriter(path + ".tmp", "llama")
    w.add_name(f"{shape_name} random weights")
    w.add_context_length(s["ctx"])
    w.add_embedding_length(D)
    w.add_block_count(L)
    w.add_feed_forward_length(F)
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(s["theta"])
    w.add_rope_dimension_count(hd)
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

    def mat(name, rows, cols):
        x = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float32)
        if qtype == GGMLQuantizationType.F16:
            w.add_tensor(name, x.astype(np.float16))
        elif qtype == GGMLQuantizationType.BF16:  # round to nearest even: the top 16 bits of the f32
            u = x.view(np.uint32)
            b = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
            w.add_tensor(name, b.view(np.uint8).reshape(rows, cols * 2), raw_dtype=qtype)
        else:
            w.add_tensor(name, quantize(x, qtype), raw_dtype=qtype)

    def vec(name, n):
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    mat("token_embd.weight", V, D)
    vec("output_norm.weight", D)
    for i in range(L):
        p = f"blk.{i}."
        vec(p + "attn_norm.weight", D)
        mat(p + "attn_q.weight", D, D)
        mat(p + "attn_k.weight", s["kv_heads"] * hd, D)
        mat(p + "attn_v.weight", s["kv_heads"] * hd, D)
        mat(p + "attn_output.weight", D, D)
        vec(p + "ffn_norm.weight", D)
        mat(p + "ffn_gate.weight", F, D)
        mat(p + "ffn_up.weight", F, D)
        mat(p + "ffn_down.weight", D, F)
        print(f"{path}: layer {i + 1}/{L}", flush=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.rename(path + ".tmp", path)
    print(f"{path}: written")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama3.2-1b", choices=sorted(SHAPES))
    ap.add_argument("--types", default="f16,q8_0")
    ap.add_argument("--out", default="models/bench")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for t in a.types.split(","):
        write(a.shape, t, a.out, a.seed)


if __name__ == "__main__":
    main()
