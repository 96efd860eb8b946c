#!/usr/bin/env python3
"""A random-weight mixture-of-experts BF16 checkpoint (HF directory: config.json + safetensors
shards, one tensor per expert as the HF checkpoints hold them), generated on the GPU with torch,
for `pagoda bench` on the GPU machine (scripts/gpu_run.sh moe). Shapes:

  olmoe-1b-7b     OLMoE-1B-7B-0924: hidden 2048, 16 layers, 16 heads (MHA, head_dim 128, RMSNorm
                  over the whole q and k), 64 experts top-8 (not renormalised) of width 1024,
                  vocab 50304, untied: 6.9 B parameters, 1.3 B active.
  qwen3-30b-a3b   Qwen3-30B-A3B: hidden 2048, 48 layers, 32 / 4 heads of 128 (per-head q/k norm),
                  128 experts top-8 (renormalised) of width 768, vocab 151936, untied: 30.5 B, 3.3 B
                  active (61 GB: minutes to write).
  mixtral-8x7b    Mixtral-8x7B-v0.1: hidden 4096, 32 layers, 32 / 8 heads of 128, 8 experts top-2
                  (renormalised) of width 14336, vocab 32000, untied: 46.7 B, 12.9 B active (93 GB:
                  more than a host's /dev/shm; run it with --config-only and `pagoda bench
                  --load-format dummy`).

Weights ~ N(0, 0.02) (transformers' initializer_range), norms 1; the routers ~ N(0, 1 / sqrt(hidden))
so that tokens spread over the experts (speed depends on how many distinct experts a step reads,
not on the other values). MOE_LAYERS overrides the layer count (a shorter model of the same layer).

--config-only writes config.json alone: `pagoda bench -m DIR --load-format dummy` makes random
weights of that shape in memory at load (no file).

Usage: python3 tools/make_random_moe.py olmoe-1b-7b /dev/shm/olmoe-1b-7b
       python3 tools/make_random_moe.py mixtral-8x7b /tmp/mixtral-8x7b --config-only
"""
import json
import os
import sys
import time

SHAPES = {
    "olmoe-1b-7b": {
        "architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", "hidden_size": 2048, "intermediate_size": 1024,
        "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 16, "num_experts": 64,
        "num_experts_per_tok": 8, "norm_topk_prob": False, "vocab_size": 50304, "max_position_embeddings": 4096,
        "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "clip_qkv": None,
        "attention_bias": False, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 50279, "pad_token_id": 1,
        "torch_dtype": "bfloat16"},
    "qwen3-30b-a3b": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
        "intermediate_size": 6144, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
        "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
        "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
        "max_position_embeddings": 8192, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
        "attention_bias": False, "use_sliding_window": False, "sliding_window": None, "hidden_act": "silu",
        "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16"},
    "mixtral-8x7b": {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "num_local_experts": 8, "num_experts_per_tok": 2, "router_jitter_noise": 0.0,
        "vocab_size": 32000, "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-5,
        "sliding_window": None, "tie_word_embeddings": False, "hidden_act": "silu", "output_router_logits": False,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"},
}


def main():
    args = [a for a in sys.argv[1:] if a != "--config-only"]
    if len(args) != 2 or args[0] not in SHAPES:
        sys.exit(f"usage: make_random_moe.py {{{','.join(SHAPES)}}} OUT_DIR [--config-only]")
    shape, out = args
    cfg = dict(SHAPES[shape])
    if os.environ.get("MOE_LAYERS"):
        cfg["num_hidden_layers"] = int(os.environ["MOE_LAYERS"])
    H, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", H // heads)
    E = cfg.get("num_experts", cfg.get("num_local_experts"))
    F = cfg.get("moe_intermediate_size", cfg["intermediate_size"])
    olmoe = cfg["model_type"] == "olmoe"
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    if "--config-only" in sys.argv:
        print(json.dumps({"shape": shape, "dir": out, "layers": L, "config_only": True}), flush=True)
        return
    if cfg["model_type"] == "mixtral":
        sys.exit("mixtral-8x7b: weights are not written (93 GB); use --config-only and --load-format dummy")
    import torch  # noqa: E402 (not needed for --config-only)
    from safetensors.torch import save_file

    t0 = time.time()
    dev = os.environ.get("PAGODA_RANDOM_DEVICE", "cuda")  # cpu: a dry run elsewhere
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape, std=0.02):
        return (torch.randn(*shape, device=dev, generator=g, dtype=torch.float32) * std).to(torch.bfloat16).cpu()

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
        add(p + "self_attn.q_norm.weight", ones(heads * hd if olmoe else hd))
        add(p + "self_attn.k_norm.weight", ones(kv * hd if olmoe else hd))
        add(p + "post_attention_layernorm.weight", ones(H))
        add(p + "mlp.gate.weight", rnd(E, H, std=H ** -0.5))
        for e in range(E):
            add(p + f"mlp.experts.{e}.gate_proj.weight", rnd(F, H))
            add(p + f"mlp.experts.{e}.up_proj.weight", rnd(F, H))
            add(p + f"mlp.experts.{e}.down_proj.weight", rnd(H, F))
    add("model.norm.weight", ones(H))
    add("lm_head.weight", rnd(V, H))
    flush()
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    print(json.dumps({"shape": shape, "dir": out, "layers": L, "seconds": round(time.time() - t0, 1)}), flush=True)


if __name__ == "__main__":
    main()
