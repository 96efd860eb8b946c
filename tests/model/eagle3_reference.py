#!/usr/bin/env python3
"""Independent reference of a draft head's forward (numpy, float64, from the equations in
src/model/draft_head.h; no Pagoda code): an EAGLE-3 head, or a MiMo MTP module when HEAD_DIR's
config.json has num_nextn_predict_layers (then HEAD_DIR is the MiMo checkpoint, TARGET_HF_DIR
too). Checked against what tests/model/eagle3_spec_test.cc dumped from Pagoda's CPU path.

Usage: eagle3_reference.py DUMP_DIR HEAD_DIR TARGET_HF_DIR
DUMP_DIR holds meta.json ({"prompt": [ids], "chain": [ids fed to the chained steps],
"capture_after": [...], "num_target_layers": L}), features.f32 [T, 3 D] (the target's captured
hidden states at every prompt position, layer blocks in capture_after order), target_logits.f32
[T, V] (the target's logits at every position), logits.f32 [1 + S, draft_vocab] (the head's draft
logits: the last catch-up row, then S chained steps) and drafts.i32 [1 + S] (Pagoda's drafts as
target ids).

Checks, each within an error budget (1e-3 of the logits' scale; Pagoda's head cache is f32 here):
  1. the capture: rms_norm(block of the target's last layer) * norm.weight @ embed^T equals the
     target's logits (so the captured block is the last layer's output, in its column place);
  2. the head's draft logits at the last catch-up row and at every chained step (each step feeding
     the previous step's pre-norm output hidden and the draft token Pagoda fed);
  3. each draft id is d2t-mapped argmax of its reference row (unless the top two are within the
     budget).
Exit 0 and one summary line on success; exit 1 naming the first failure.
"""
import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file


def rms(x, w, eps):
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w.astype(np.float64)


def rope(x, pos, theta, hd):
    # HF's rotate_half layout: pairs (i, i + hd/2) rotated by pos * theta^(-2i/hd).
    inv = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = pos * inv
    c, s = np.cos(ang), np.sin(ang)
    a, b = x[..., : hd // 2], x[..., hd // 2:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def main():
    dump, head_dir, target_dir = sys.argv[1:4]
    meta = json.load(open(os.path.join(dump, "meta.json")))
    cfg = json.load(open(os.path.join(head_dir, "config.json")))
    mtp = cfg.get("num_nextn_predict_layers", 0) > 0
    tcfg = json.load(open(os.path.join(target_dir, "config.json")))
    hw = load_file(os.path.join(head_dir, "model.safetensors"))
    tw = {}
    index = os.path.join(target_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        for shard in sorted(set(json.load(open(index))["weight_map"].values())):
            tw.update(load_file(os.path.join(target_dir, shard)))
    else:
        tw = load_file(os.path.join(target_dir, "model.safetensors"))
    prompt, chain = meta["prompt"], meta["chain"]
    T, S = len(prompt), len(chain)
    D, V = cfg["hidden_size"], cfg["vocab_size"]
    DV = V if mtp else cfg["draft_vocab_size"]
    H, KVH = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", D // H)
    eps = cfg["rms_norm_eps"]
    theta = cfg.get("rope_theta", cfg.get("rope_parameters", {}).get("rope_theta", 10000.0))
    feats = np.fromfile(os.path.join(dump, "features.f32"), dtype=np.float32).reshape(T, -1).astype(np.float64)
    tlog = np.fromfile(os.path.join(dump, "target_logits.f32"), dtype=np.float32).reshape(T, -1).astype(np.float64)
    got = np.fromfile(os.path.join(dump, "logits.f32"), dtype=np.float32).reshape(1 + S, DV).astype(np.float64)
    got_ids = np.fromfile(os.path.join(dump, "drafts.i32"), dtype=np.int32)
    Dt = feats.shape[1] // len(meta["capture_after"])
    emb = tw["model.embed_tokens.weight"].astype(np.float64)
    lm_t = tw.get("lm_head.weight", tw["model.embed_tokens.weight"]).astype(np.float64)

    # 1. The capture.
    last = tcfg["num_hidden_layers"] - 1
    blocks = [i for i, a in enumerate(meta["capture_after"]) if a == last]
    if not blocks:
        print("eagle3 reference: the capture names no last-layer block; check 1 needs one")
        return 1
    for b in blocks:
        ref = rms(feats[:, b * Dt:(b + 1) * Dt], tw["model.norm.weight"], tcfg["rms_norm_eps"]) @ lm_t.T
        err = np.max(np.abs(ref - tlog))
        if err > 1e-3 * np.max(np.abs(ref)) + 1e-4:
            print(f"eagle3 reference: captured block {b} (the last layer's output) gives logits off by {err:.3g}")
            return 1

    # 2. The head.
    L = "model.mtp_layers.0." if mtp else "midlayer."
    g = lambda n: hw[n].astype(np.float64)  # noqa: E731
    d2t = hw["d2t"].astype(np.int64) if "d2t" in hw else np.zeros(DV, dtype=np.int64)
    Wq, Wk, Wv, Wo = g(L + "self_attn.q_proj.weight"), g(L + "self_attn.k_proj.weight"), \
        g(L + "self_attn.v_proj.weight"), g(L + "self_attn.o_proj.weight")
    bq, bk, bv = [g(L + f"self_attn.{x}_proj.bias") if L + f"self_attn.{x}_proj.bias" in hw else 0.0 for x in "qkv"]
    keys, vals = [], []

    def step(tok, pos, h):
        """One row: returns (draft logits, the hidden the next step reads); appends its K/V."""
        if mtp:  # z = input_proj(concat(rms(h) w_hidden, rms(e) w_token)), e = 0 at position 0
            e = emb[tok] * (0.0 if pos == 0 else 1.0)
            z = g(L + "input_proj.weight") @ np.concatenate([rms(h, g(L + "hidden_layernorm.weight"), eps),
                                                             rms(e, g(L + "token_layernorm.weight"), eps)])
            a, h = rms(z, g(L + "input_layernorm.weight"), eps), z
        else:
            a = np.concatenate([rms(emb[tok], g(L + "input_layernorm.weight"), eps),
                                rms(h, g(L + "hidden_norm.weight"), eps)])
        q = (Wq @ a + bq).reshape(H, hd)
        k = (Wk @ a + bk).reshape(KVH, hd)
        v = (Wv @ a + bv).reshape(KVH, hd)
        keys.append(rope(k, pos, theta, hd))
        vals.append(v)
        q = rope(q, pos, theta, hd)
        K, Vv = np.stack(keys), np.stack(vals)  # [n, KVH, hd]
        out = np.zeros((H, hd))
        for hh in range(H):
            kv = hh // (H // KVH)
            sc = K[:, kv, :] @ q[hh] / np.sqrt(hd)
            p = np.exp(sc - sc.max())
            p /= p.sum()
            out[hh] = p @ Vv[:, kv, :]
        r = h + Wo @ out.reshape(-1)
        n = rms(r, g(L + "post_attention_layernorm.weight"), eps)
        gate, up = g(L + "mlp.gate_proj.weight") @ n, g(L + "mlp.up_proj.weight") @ n
        r = r + g(L + "mlp.down_proj.weight") @ (gate / (1 + np.exp(-gate)) * up)
        if mtp:  # the normed output feeds the next step; the target's output head
            o = rms(r, g(L + "final_layernorm.weight"), eps)
            return lm_t @ o, o
        return g("lm_head.weight") @ rms(r, g("norm.weight"), eps), r

    for p in range(T - 1):
        if mtp:  # the target's final normed state
            h0 = rms(feats[p], tw["model.norm.weight"], tcfg["rms_norm_eps"])
        else:
            h0 = g("fc.weight") @ feats[p]
        logits, hid = step(prompt[p + 1], p, h0)
    refs = [logits]
    for s in range(S):
        logits, hid = step(chain[s], T - 1 + s, hid)
        refs.append(logits)
    ref = np.stack(refs)
    scale = np.max(np.abs(ref))
    err = np.max(np.abs(ref - got), axis=1)
    budget = 1e-3 * scale + 1e-4
    for i, e in enumerate(err):
        if e > budget:
            print(f"eagle3 reference: draft logits of step {i} off by {e:.3g} (budget {budget:.3g}, scale {scale:.3g})")
            return 1
    # 3. The draft ids.
    for i in range(1 + S):
        order = np.argsort(-ref[i])
        want = order[0] + d2t[order[0]]
        if got_ids[i] != want and ref[i][order[0]] - ref[i][order[1]] > budget:
            print(f"eagle3 reference: step {i} drafted {got_ids[i]}, the reference's argmax maps to {want}")
            return 1
    if S > 0 and list(got_ids[:S]) != list(chain):
        print(f"eagle3 reference: the chain fed {chain}, the drafts were {list(got_ids)}")
        return 1
    print(f"eagle3 reference: {T} prompt rows, {S} chained steps: max logit error {err.max():.3g} "
          f"(budget {budget:.3g}, logits up to {scale:.3g}); capture checked on {len(blocks)} block(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
