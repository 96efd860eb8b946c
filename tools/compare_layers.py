#!/usr/bin/env python3
"""Find the first layer where Pagoda diverges from Hugging Face transformers.

  build/pagoda dump-layers --model M --ids "1 2 3" --out /tmp/dump
  .venv-ref/bin/python tools/compare_layers.py --model M --dump /tmp/dump

M is a Hugging Face directory (or a GGUF transformers can load). Prints, per layer, the max
absolute and relative difference of the residual stream (transformers' hidden_states[i + 1]),
then the logits; marks the first layer above --threshold.
"""
import argparse
import json
import os

import numpy as np
import torch
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--threshold", type=float, default=1e-3, help="relative max-abs difference that counts as divergence")
    args = ap.parse_args()
    meta = json.load(open(os.path.join(args.dump, "meta.json")))
    kwargs = dict(dtype=torch.float32, attn_implementation="eager")
    if args.model.endswith(".gguf"):
        model = AutoModelForCausalLM.from_pretrained(os.path.dirname(args.model) or ".", gguf_file=os.path.basename(args.model), **kwargs)
    else:
        model = AutoModelForCausalLM.from_pretrained(args.model, **kwargs)
    model.eval()
    ids = torch.tensor([meta["ids"]])
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
    T, D = meta["tokens"], meta["hidden"]
    first = None
    for i in range(meta["layers"]):
        mine = np.fromfile(os.path.join(args.dump, f"layer_{i}.f32"), dtype="<f4").reshape(T, D)
        ref = out.hidden_states[i + 1][0].numpy()
        if i == meta["layers"] - 1:
            # transformers applies the final norm to the last hidden state; compare before it.
            continue
        diff = np.abs(mine - ref).max()
        rel = diff / max(np.abs(ref).max(), 1e-30)
        flag = ""
        if rel > args.threshold and first is None:
            first = i
            flag = "  <-- first divergence"
        print(f"layer {i:3d}: max|diff| {diff:.3e}  relative {rel:.3e}{flag}")
    logits = np.fromfile(os.path.join(args.dump, "logits.f32"), dtype="<f4").reshape(T, meta["vocab"])
    ref_logits = out.logits[0].numpy()
    diff = np.abs(logits - ref_logits).max()
    print(f"logits   : max|diff| {diff:.3e}  relative to range {diff / (ref_logits.max() - ref_logits.min()):.3e}")
    print("no divergence above threshold" if first is None else f"first divergent layer: {first}")


if __name__ == "__main__":
    main()
