#!/usr/bin/env python3
"""Random-weight draft heads (EAGLE-3 heads, MiMo MTP layers) for the tiny test models, in the layout the public releases
use (docs/speculative_decoding.md, "EAGLE-3 heads"), plus malformed variants for the loader's
error tests.

Deterministic and numpy-only (numpy, safetensors from .venv-test); scripts/make_test_models.sh
runs it after tools/make_tiny_models.py. For each head it writes OUT/<name>/:
  config.json          LlamaForCausalLMEagle3: hidden_size, intermediate_size, heads, kv heads,
                       head_dim, rms_norm_eps, rope_theta, vocab_size (the target's),
                       draft_vocab_size, eagle_config.eagle_aux_hidden_state_layer_ids
  model.safetensors    fc.weight [D, 3D], midlayer.{input_layernorm, hidden_norm,
                       post_attention_layernorm}.weight [D], midlayer.self_attn.{q,k,v}_proj.weight
                       [Q | KV | KV, 2D], midlayer.self_attn.o_proj.weight [D, Q],
                       midlayer.mlp.{gate,up}_proj.weight [F, D], midlayer.mlp.down_proj.weight
                       [D, F], norm.weight [D], lm_head.weight [draft_vocab, D] (all f32),
                       d2t [draft_vocab] i64 (target id = draft id + d2t[draft id]),
                       t2d [vocab] bool (true for the target ids the draft vocabulary holds)
No embedding: the head reads the target's (as the releases do).

Heads:
  eagle3-llama3        for models/tiny/llama3 (2 layers, hidden 128, vocab 512): draft vocabulary
                       256 (a random sorted subset of the 512 ids), captured layers [1, 0, 1]
  eagle3-llama3-full   the same target, draft vocabulary = vocabulary, no d2t / t2d, the default
                       layer choice cannot apply to 2 layers so it names [0, 1, 1]
  eagle3-llama3-echo   the same target, a head whose drafts get accepted: fc passes the target's
                       last-layer state through (columns of the first block = identity), o_proj and
                       down_proj are zero, so the output hidden is that state, and norm / lm_head are
                       the target's final norm and (tied) output matrix: each draft is the target's
                       own greedy token at the draft's input position, i.e. it repeats the last
                       token, which the tiny llama's greedy continuations often do
  eagle3-bad/<case>    malformed copies of eagle3-llama3 (tests/model/eagle3_spec_test.cc)

and MiMo-style checkpoints with MTP layers (model/draft_head.h, kind kMimoMtp) for models/tiny/qwen2:
  mimo-mtp             config.json (the tiny qwen2's, model_type "mimo", MiMoForCausalLM,
                       num_nextn_predict_layers 1) + model.safetensors: every tensor of the tiny
                       qwen2 (f32) and model.mtp_layers.0.{token_layernorm, hidden_layernorm,
                       final_layernorm, input_layernorm, post_attention_layernorm}.weight [D],
                       input_proj.weight [D, 2D], self_attn.{q,k,v}_proj.{weight, bias},
                       self_attn.o_proj.weight, mlp.{gate,up,down}_proj.weight (random)
  mimo-mtp-bad/<case>  malformed copies (no MTP layers, a missing tensor, a wrong shape)

A head for a larger target (benchmarks; scripts/gpu_run.sh eaglebench), with --target DIR --head-out OUT:
  the layer of the public Llama-3.1-8B EAGLE-3 release for DIR's config (the target's hidden size,
  intermediate size, heads, KV heads and head_dim), draft vocabulary --draft-vocab (32000 as the
  release), f16 matrices (numpy has no bf16), random: drafts are rarely accepted. No
  eagle_aux_hidden_state_layer_ids (the default layers apply).

Usage: tools/make_draft_heads.py [--out models/tiny]
       tools/make_draft_heads.py --target DIR --head-out OUT [--draft-vocab N]
"""
import argparse
import copy
import hashlib
import json
import os
import shutil

import numpy as np
from safetensors.numpy import load_file, save_file

SEED = 20261206


def rng_for(name):
    return np.random.default_rng([SEED, int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")])


def head_config(target, draft_vocab, layer_ids):
    D = target["hidden_size"]
    return {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "hidden_size": D, "intermediate_size": 2 * D, "num_hidden_layers": 1,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": D // 8,
        "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "max_position_embeddings": 2048, "tie_word_embeddings": False,
        "vocab_size": target["vocab_size"], "draft_vocab_size": draft_vocab,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": layer_ids, "use_aux_hidden_state": True},
        "torch_dtype": "float32",
    }


def head_weights(name, cfg, with_map):
    rng = rng_for(name)
    D, F = cfg["hidden_size"], cfg["intermediate_size"]
    hd = cfg["head_dim"]
    Q, KV = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    V, DV = cfg["vocab_size"], cfg["draft_vocab_size"]

    def lin(n_out, n_in):  # std 1/sqrt(fan-in): activations and logits of order one
        return (rng.standard_normal((n_out, n_in), dtype=np.float32) / np.float32(np.sqrt(n_in))).astype(np.float32)

    def norm():
        return (1.0 + 0.1 * rng.standard_normal(D, dtype=np.float32)).astype(np.float32)

    w = {
        "fc.weight": lin(D, 3 * D),
        "midlayer.input_layernorm.weight": norm(),
        "midlayer.hidden_norm.weight": norm(),
        "midlayer.self_attn.q_proj.weight": lin(Q, 2 * D),
        "midlayer.self_attn.k_proj.weight": lin(KV, 2 * D),
        "midlayer.self_attn.v_proj.weight": lin(KV, 2 * D),
        "midlayer.self_attn.o_proj.weight": lin(D, Q),
        "midlayer.post_attention_layernorm.weight": norm(),
        "midlayer.mlp.gate_proj.weight": lin(F, D),
        "midlayer.mlp.up_proj.weight": lin(F, D),
        "midlayer.mlp.down_proj.weight": lin(D, F),
        "norm.weight": norm(),
        "lm_head.weight": (4.0 * lin(DV, D)).astype(np.float32),
    }
    if with_map:
        used = np.sort(rng.choice(V, size=DV, replace=False)).astype(np.int64)
        w["d2t"] = (used - np.arange(DV, dtype=np.int64)).astype(np.int64)
        t2d = np.zeros(V, dtype=bool)
        t2d[used] = True
        w["t2d"] = t2d
    return w


def write_head(d, cfg, w):
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    save_file(w, os.path.join(d, "model.safetensors"))


def mtp_weights(name, cfg):
    rng = rng_for(name)
    D, F = cfg["hidden_size"], cfg["intermediate_size"]
    hd = cfg.get("head_dim", D // cfg["num_attention_heads"])
    Q, KV = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd

    def lin(n_out, n_in):
        return (rng.standard_normal((n_out, n_in), dtype=np.float32) / np.float32(np.sqrt(n_in))).astype(np.float32)

    def vec(n, base, std):
        return (base + std * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)

    m = "model.mtp_layers.0."
    return {
        m + "token_layernorm.weight": vec(D, 1.0, 0.1), m + "hidden_layernorm.weight": vec(D, 1.0, 0.1),
        m + "input_proj.weight": lin(D, 2 * D),
        m + "input_layernorm.weight": vec(D, 1.0, 0.1),
        m + "self_attn.q_proj.weight": lin(Q, D), m + "self_attn.q_proj.bias": vec(Q, 0.0, 0.1),
        m + "self_attn.k_proj.weight": lin(KV, D), m + "self_attn.k_proj.bias": vec(KV, 0.0, 0.1),
        m + "self_attn.v_proj.weight": lin(KV, D), m + "self_attn.v_proj.bias": vec(KV, 0.0, 0.1),
        m + "self_attn.o_proj.weight": lin(D, Q),
        m + "post_attention_layernorm.weight": vec(D, 1.0, 0.1),
        m + "mlp.gate_proj.weight": lin(F, D), m + "mlp.up_proj.weight": lin(F, D), m + "mlp.down_proj.weight": lin(D, F),
        m + "final_layernorm.weight": vec(D, 1.0, 0.1),
    }


def write_mimo(out):
    src = os.path.join(out, "qwen2")
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    target = {}
    with open(os.path.join(src, "model.safetensors.index.json")) as f:
        for shard in sorted(set(json.load(f)["weight_map"].values())):
            target.update(load_file(os.path.join(src, shard)))
    cfg = dict(cfg, model_type="mimo", architectures=["MiMoForCausalLM"], num_nextn_predict_layers=1)
    D = cfg["hidden_size"]
    mtp = mtp_weights("mimo-mtp", cfg)
    write_head(os.path.join(out, "mimo-mtp"), cfg, {**target, **mtp})
    m = "model.mtp_layers.0."
    bad = os.path.join(out, "mimo-mtp-bad")
    if os.path.isdir(bad):
        shutil.rmtree(bad)
    write_head(os.path.join(bad, "no-mtp-layers"), dict(cfg, num_nextn_predict_layers=0), target)
    w = {**target, **mtp}
    w.pop(m + "input_proj.weight")
    write_head(os.path.join(bad, "missing-input-proj"), cfg, w)
    w = {**target, **mtp}
    w[m + "self_attn.q_proj.weight"] = w[m + "self_attn.q_proj.weight"][:, : D // 2].copy()
    write_head(os.path.join(bad, "q-proj-width"), cfg, w)


def write_release_shaped_head(target_dir, out, draft_vocab):
    with open(os.path.join(target_dir, "config.json")) as f:
        target = json.load(f)
    D = target["hidden_size"]
    cfg = head_config(target, draft_vocab, None)
    del cfg["eagle_config"]
    cfg.update(intermediate_size=target["intermediate_size"], num_attention_heads=target["num_attention_heads"],
               num_key_value_heads=target["num_key_value_heads"],
               head_dim=target.get("head_dim", D // target["num_attention_heads"]),
               rms_norm_eps=target.get("rms_norm_eps", 1e-5), rope_theta=target.get("rope_theta", 500000.0),
               torch_dtype="float16")
    w = head_weights("eagle3-" + os.path.basename(os.path.normpath(out)), cfg, draft_vocab < target["vocab_size"])
    for k, v in w.items():
        if v.dtype == np.float32 and v.ndim == 2:
            w[k] = v.astype(np.float16)
    write_head(out, cfg, w)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models", "tiny"))
    ap.add_argument("--target", help="a target's directory (config.json): write one release-shaped head to --head-out")
    ap.add_argument("--head-out", help="the head's directory (with --target)")
    ap.add_argument("--draft-vocab", type=int, default=32000)
    args = ap.parse_args()
    if args.target:
        if not args.head_out:
            ap.error("--target needs --head-out")
        write_release_shaped_head(args.target, args.head_out, args.draft_vocab)
        return
    with open(os.path.join(args.out, "llama3", "config.json")) as f:
        target = json.load(f)

    cfg = head_config(target, 256, [1, 0, 1])
    w = head_weights("eagle3-llama3", cfg, True)
    write_head(os.path.join(args.out, "eagle3-llama3"), cfg, w)

    full = head_config(target, target["vocab_size"], [0, 1, 1])
    write_head(os.path.join(args.out, "eagle3-llama3-full"), full, head_weights("eagle3-llama3-full", full, False))

    echo = head_config(target, target["vocab_size"], [1, 0, 1])
    ew = head_weights("eagle3-llama3-echo", echo, False)
    tw = load_file(os.path.join(args.out, "llama3", "model.safetensors"))
    D = echo["hidden_size"]
    fc = np.zeros((D, 3 * D), dtype=np.float32)
    fc[:, :D] = np.eye(D, dtype=np.float32)
    ew["fc.weight"] = fc
    ew["midlayer.self_attn.o_proj.weight"] = np.zeros_like(ew["midlayer.self_attn.o_proj.weight"])
    ew["midlayer.mlp.down_proj.weight"] = np.zeros_like(ew["midlayer.mlp.down_proj.weight"])
    ew["norm.weight"] = tw["model.norm.weight"].astype(np.float32)
    ew["lm_head.weight"] = tw.get("lm_head.weight", tw["model.embed_tokens.weight"]).astype(np.float32)
    echo["rms_norm_eps"] = target["rms_norm_eps"]
    write_head(os.path.join(args.out, "eagle3-llama3-echo"), echo, ew)

    write_mimo(args.out)

    # Malformed copies: each breaks one thing the loader must name.
    bad = os.path.join(args.out, "eagle3-bad")
    if os.path.isdir(bad):
        shutil.rmtree(bad)

    def variant(case, cfg_edit=None, w_edit=None):
        c, ww = copy.deepcopy(cfg), dict(w)
        if cfg_edit:
            cfg_edit(c)
        if w_edit:
            w_edit(ww)
        write_head(os.path.join(bad, case), c, ww)

    variant("missing-fc", w_edit=lambda ww: ww.pop("fc.weight"))
    variant("qkv-width", w_edit=lambda ww: ww.__setitem__("midlayer.self_attn.q_proj.weight",
                                                         ww["midlayer.self_attn.q_proj.weight"][:, :128].copy()))
    variant("vocab-mismatch", cfg_edit=lambda c: c.__setitem__("vocab_size", 1000))
    variant("lm-head-rows", w_edit=lambda ww: ww.__setitem__("lm_head.weight", ww["lm_head.weight"][:200].copy()))
    variant("d2t-out-of-range", w_edit=lambda ww: ww.__setitem__("d2t", ww["d2t"] + 1000))
    variant("missing-d2t", w_edit=lambda ww: ww.pop("d2t"))
    variant("layer-out-of-range", cfg_edit=lambda c: c["eagle_config"].__setitem__("eagle_aux_hidden_state_layer_ids", [0, 1, 7]))
    variant("two-layers", cfg_edit=lambda c: c.__setitem__("num_hidden_layers", 2))


if __name__ == "__main__":
    main()
