#!/usr/bin/env python3
"""A random-weight Llama-shaped BF16 checkpoint (HF directory: config.json + safetensors shards),
generated on the GPU with torch, for `pagoda bench` on the GPU machine. Shapes are those of
tools/hf_baseline.py (Llama-3-8B, Llama-3.2-1B; rope_theta 5e5, context 8192, no rope scaling).
Weights ~ N(0, 0.02) (transformers' initializer_range), norms 1: speed does not depend on values.

Usage: python3 tools/make_random_llama.py llama3-8b /dev/shm/llama3-8b
"""
import json
import os
import sys
import time

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_baseline import SHAPES  # noqa: E402


def main():
    shape, out = sys.argv[1], sys.argv[2]
    s = dict(SHAPES[shape]) if shape in SHAPES else dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                                          num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)
    tied = s.pop("tie_word_embeddings", False)
    H, I, L, V = s["hidden_size"], s["intermediate_size"], s["num_hidden_layers"], s["vocab_size"]
    heads, kv = s["num_attention_heads"], s["num_key_value_heads"]
    hd = H // heads
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **s, "head_dim": hd,
           "max_position_embeddings": 8192, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
           "tie_word_embeddings": tied, "hidden_act": "silu", "torch_dtype": "bfloat16", "bos_token_id": 1,
           "eos_token_id": 2}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    t0 = time.time()
    dev = os.environ.get("PAGODA_RANDOM_DEVICE", "cuda")  # cpu: a dry run elsewhere
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape):
        return (torch.randn(*shape, device=dev, generator=g, dtype=torch.float32) * 0.02).to(torch.bfloat16).cpu()

    def ones(n):
        return torch.ones(n, dtype=torch.bfloat16)

    shard, shard_no, weight_map, size = {}, 0, {}, 0

    def flush():
        nonlocal shard, shard_no, size
        if not shard:
            return
        name = f"model-{shard_no:05d}.safetensors"
        save_file(shard, os.path.join(out, name), metadata={"format": "pt"})
        for k in shard:
            weight_map[k] = name
        shard, shard_no, size = {}, shard_no + 1, 0

    def add(name, t):
        nonlocal size
        shard[name] = t
        size += t.numel() * 2
        if size > (4 << 30):
            flush()

    add("model.embed_tokens.weight", rnd(V, H))
    for l in range(L):
        p = f"model.layers.{l}."
        add(p + "input_layernorm.weight", ones(H))
        add(p + "self_attn.q_proj.weight", rnd(heads * hd, H))
        add(p + "self_attn.k_proj.weight", rnd(kv * hd, H))
        add(p + "self_attn.v_proj.weight", rnd(kv * hd, H))
        add(p + "self_attn.o_proj.weight", rnd(H, heads * hd))
        add(p + "post_attention_layernorm.weight", ones(H))
        add(p + "mlp.gate_proj.weight", rnd(I, H))
        add(p + "mlp.up_proj.weight", rnd(I, H))
        add(p + "mlp.down_proj.weight", rnd(H, I))
    add("model.norm.weight", ones(H))
    if not tied:
        add("lm_head.weight", rnd(V, H))
    flush()
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    print(json.dumps({"shape": shape, "dir": out, "seconds": round(time.time() - t0, 1)}), flush=True)


if __name__ == "__main__":
    main()
