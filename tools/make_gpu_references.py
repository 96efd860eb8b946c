#!/usr/bin/env python3
"""bf16 parity references for the CUDA backend, made on the GPU machine (torch + transformers there).

Random-weight models of the Llama-3, Qwen2, Qwen3, Gemma 2, Gemma 3, Phi-4-mini, Qwen3-MoE and Qwen2-MoE shapes, larger than the CPU tier's tiny ones
so the GPU's fast paths run (head_dim 64 / 128: tensor-core prefill attention and the vectorised
decode kernel; GQA groups 4, 7 and 2; Qwen2 biases; Qwen3 q/k norms; llama3 RoPE scaling; Gemma 3's sliding windows, post-norms and GeGLU; Gemma 2's soft-caps; Phi's
fused projections and partial rotary), vocab
512 (the stories260K tokenizer serves the engine tests). Weights come from
tools/make_tiny_models.make_weights (numpy, seeded) and are written as HF directories with bf16
safetensors: the bf16 values ARE the model. transformers then runs each directory on the GPU

  * in float32 (TF32 off, eager attention): the reference logits, top-1, greedy continuation;
  * in bfloat16 (eager attention): only to measure how far a bf16 computation lands from it.

The bound for Pagoda's bf16 path is derived from that measurement, per set:
  rel_bf16 = max over the set's prompts and positions of max |logits_bf16 - logits_fp32| / range
  bound    = 2 x rel_bf16 x range        (our kernels round the same operands to bf16 -- matmul
             inputs, attention Q and P -- with f32 accumulation; we keep the residual stream,
             q/k/v and RoPE in f32 where transformers keeps bf16, so our error is expected to
             be at most of the same size; the factor 2 covers the max-of-many statistics)
  decision margin = 2 x bound (a top-1 flip needs a reference margin below twice the bound);
  greedy must match up to the first step whose reference margin is <= the decision margin.

Output (--out DIR): DIR/<set>/ (config.json + model.safetensors), DIR/<set>/<prompt>.{json,f32}
in the pagoda-reference-logits/1 format (testdata/reference/README.md), DIR/index.json
{"format", "sets": {set: {"checkpoint": set, "prompts": [...]}}}. Prints one summary line per set.

Usage (on the GPU machine): python3 tools/make_gpu_references.py --out /tmp/gpuref
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import make_tiny_models as tiny  # noqa: E402

FORMAT = "pagoda-reference-logits/1"
GREEDY = 32
DEV = "cuda"
VOCAB = 512

MODELS = {
    "llama3-bf16": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": VOCAB, "hidden_size": 1024,
        "intermediate_size": 2816, "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 4,
        "head_dim": 64, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 256},
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False, "hidden_act": "silu",
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"},
    "qwen2-bf16": {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": VOCAB, "hidden_size": 896,
        "intermediate_size": 2432, "num_hidden_layers": 4, "num_attention_heads": 14, "num_key_value_heads": 2,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "tie_word_embeddings": True, "use_sliding_window": False, "sliding_window": None, "max_window_layers": 4,
        "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"},
    "qwen3-bf16": {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": VOCAB, "hidden_size": 1024,
        "intermediate_size": 3072, "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 128, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "tie_word_embeddings": True, "attention_bias": False, "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": 4, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"},
    # Gemma-3-270M's layer shape (head_dim 256, one kv head, 5 sliding : 1 global, two RoPE bases),
    # window 64 so the long prompts slide; tied embeddings scaled by sqrt(hidden).
    "gemma3-bf16": {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": VOCAB, "hidden_size": 640,
        "intermediate_size": 2048, "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 1,
        "head_dim": 256, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "query_pre_attn_scalar": 256,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"], "sliding_window": 64,
        "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        "attn_logit_softcapping": None, "final_logit_softcapping": None, "hidden_activation": "gelu_pytorch_tanh",
        "tie_word_embeddings": True, "attention_bias": False, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
        "torch_dtype": "bfloat16"},
    # Gemma-2-2B's layer shape (head_dim 256, GQA 4/2 here, alternating sliding / global layers),
    # window 64; soft-caps small enough (10 on the scores, 15 on the logits) that random weights
    # reach them, so the attention kernels' soft-cap is exercised.
    "gemma2-bf16": {
        "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "vocab_size": VOCAB, "hidden_size": 576,
        "intermediate_size": 2304, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 256, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "query_pre_attn_scalar": 256,
        "layer_types": ["sliding_attention", "full_attention"] * 2, "sliding_window": 64,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "attn_logit_softcapping": 10.0, "final_logit_softcapping": 15.0, "hidden_activation": "gelu_pytorch_tanh",
        "tie_word_embeddings": True, "attention_bias": False, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
        "torch_dtype": "bfloat16"},
    # Phi-4-mini's attention shape (fused qkv / gate_up, head_dim 128 of which 96 rotate, GQA 3/1)
    # without its LongRoPE: transformers' generate() switches LongRoPE's factor list mid-sequence
    # (docs/decisions.md#d46), and the table is the CPU's (the f32 parity sets cover it on CUDA).
    "phi4-bf16": {
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "vocab_size": VOCAB, "hidden_size": 768,
        "intermediate_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 6, "num_key_value_heads": 2,
        "partial_rotary_factor": 0.75, "max_position_embeddings": 2048, "original_max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": None, "sliding_window": None,
        "tie_word_embeddings": True, "attention_bias": False, "hidden_act": "silu", "resid_pdrop": 0.0,
        "embd_pdrop": 0.0, "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
        "torch_dtype": "bfloat16"},
    # Mixture of experts (model/families/moe.cc; backend/cuda/moe.cu): 32 experts top-4
    # renormalised with per-head q/k norms (Qwen3-MoE), and 16 experts top-4 not renormalised with
    # q/k/v biases and a sigmoid-gated shared expert (Qwen2-MoE). The 1- and 7-token prompts and
    # the decode steps take the grouped GEMV, the 100 / 300-token prompts the grouped SIMT GEMM.
    "qwen3moe-bf16": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": VOCAB, "hidden_size": 1024,
        "intermediate_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 4,
        "head_dim": 128, "num_experts": 32, "num_experts_per_tok": 4, "moe_intermediate_size": 192,
        "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [], "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-6, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "tie_word_embeddings": True, "attention_bias": False, "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": 4, "hidden_act": "silu", "output_router_logits": False, "router_aux_loss_coef": 0.0,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"},
    "qwen2moe-bf16": {
        "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "vocab_size": VOCAB, "hidden_size": 896,
        "intermediate_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 14, "num_key_value_heads": 2,
        "num_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 320,
        "shared_expert_intermediate_size": 1024, "norm_topk_prob": False, "decoder_sparse_step": 1,
        "mlp_only_layers": [], "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}, "tie_word_embeddings": False,
        "use_sliding_window": False, "sliding_window": None, "max_window_layers": 4, "hidden_act": "silu",
        "output_router_logits": False, "router_aux_loss_coef": 0.0, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "bfloat16"},
}
# Sets whose failure to load in this machine's transformers skips only that set (reported), not the run.
OPTIONAL = {"qwen3moe-bf16", "qwen2moe-bf16"}
PROMPT_LENGTHS = {"p1": 1, "p7": 7, "p100": 100, "p300": 300}


def prompts_for(name):
    rng = np.random.default_rng([20251201, len(name)])
    out = {}
    for p, n in PROMPT_LENGTHS.items():
        ids = [1] + [int(x) for x in rng.integers(3, VOCAB, size=n - 1)]
        out[p] = ids
    return out


def margins(logits):
    top2 = torch.topk(logits.float(), 2, dim=-1).values
    return (top2[..., 0] - top2[..., 1]).tolist()


@torch.no_grad()
def run_model(model, ids):
    x = torch.tensor([ids], device=DEV)
    logits = model(input_ids=x).logits[0].float()
    out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=GREEDY,
                         min_new_tokens=GREEDY, do_sample=False, output_logits=True, return_dict_in_generate=True,
                         eos_token_id=None, pad_token_id=0)
    greedy = out.sequences[0, len(ids):].tolist()
    step_logits = torch.stack([l[0] for l in out.logits]).float()
    return logits, greedy, step_logits


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda", help="cuda (the GPU machine) or cpu (a dry run)")
    args = ap.parse_args()
    global DEV
    DEV = args.device
    from transformers import AutoModelForCausalLM
    import transformers
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(args.out, exist_ok=True)
    index = {"format": FORMAT, "generator": "tools/make_gpu_references.py", "sets": {}}
    for name, cfg in MODELS.items():
        if name in OPTIONAL:
            try:
                make_set(args, index, name, cfg, AutoModelForCausalLM, transformers)
            except Exception as e:  # noqa: BLE001 - an optional set must not cost the others
                print(f"[gpu-ref] {name}: skipped ({type(e).__name__}: {e})", flush=True)
        else:
            make_set(args, index, name, cfg, AutoModelForCausalLM, transformers)
        # After every set: a run stopped by its deadline keeps the sets made so far.
        with open(os.path.join(args.out, "index.json"), "w") as f:
            json.dump(index, f, indent=1)


def make_set(args, index, name, cfg, AutoModelForCausalLM, transformers):
    """Writes one reference set (checkpoint, prompts) and adds it to the index."""
    t0 = time.time()
    d = os.path.join(args.out, name)
    os.makedirs(d, exist_ok=True)
    w = tiny.make_weights(name, cfg)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    tiny.write_bf16_safetensors(os.path.join(d, "model.safetensors"), w)
    m32 = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").to(DEV).eval()
    m16 = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, attn_implementation="eager").to(DEV).eval()
    results = {}
    rel_bf16 = 0.0
    for pname, ids in prompts_for(name).items():
        l32, greedy, step32 = run_model(m32, ids)
        with torch.no_grad():
            l16 = m16(input_ids=torch.tensor([ids], device=DEV)).logits[0].float()
        lrange = float(l32.max() - l32.min())
        rel_bf16 = max(rel_bf16, float((l16 - l32).abs().max()) / lrange)
        results[pname] = (ids, l32.cpu().numpy().astype(np.float32), greedy, margins(step32), lrange,
                          torch.argmax(l32, dim=-1).tolist(), margins(l32))
    bound_rel = 2.0 * rel_bf16
    prompts = []
    for pname, (ids, logits, greedy, gmargins, lrange, top1, t1margins) in results.items():
        os.makedirs(os.path.join(args.out, name), exist_ok=True)
        logits.tofile(os.path.join(args.out, name, f"{pname}.f32"))
        decision = 2.0 * bound_rel * lrange
        doc = {
            "format": FORMAT, "reference_set": name, "prompt": pname, "prompt_text": None, "prompt_ids": ids,
            "num_positions": len(ids), "vocab_size": VOCAB, "logits_file": f"{pname}.f32",
            "logits_dtype": "float32", "logits_byte_order": "little", "logits_shape": list(logits.shape),
            "logits_positions": list(range(len(ids))), "logit_range": lrange, "top1": top1,
            "top1_margin": t1margins, "topk": None,
            "greedy": {"ids": greedy, "margins": gmargins, "new_tokens": GREEDY, "stop_on_eos": False, "text": None},
            "tolerance_rule": "bf16 regime: max |logit - ref| <= max_abs_diff at every position; top-1 equal except "
                              "top1_exempt_positions; greedy equal over greedy_must_match_prefix steps.",
            "tolerance": {
                "weights": "bf16",
                "measured_transformers_bf16_vs_fp32_relative_to_range": rel_bf16,
                "max_abs_diff_relative_to_range": bound_rel, "max_abs_diff": bound_rel * lrange,
                "decision_margin_relative_to_range": 2.0 * bound_rel, "decision_margin": decision,
                "top1_exempt_positions": [i for i, m in enumerate(t1margins) if m <= decision],
                "greedy_must_match_prefix": next((i for i, m in enumerate(gmargins) if m <= decision), len(gmargins)),
            },
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "computation": {"library": "transformers", "dtype": "float32", "attn_implementation": "eager",
                            "device": torch.cuda.get_device_name() if DEV == "cuda" else "cpu", "tf32": False},
        }
        with open(os.path.join(args.out, name, f"{pname}.json"), "w") as f:
            json.dump(doc, f, indent=1)
        prompts.append(pname)
    index["sets"][name] = {"checkpoint": name, "prompts": prompts, "weights": "bf16",
                           "measured_bf16_vs_fp32_relative_to_range": rel_bf16,
                           "bound_relative_to_range": bound_rel}
    print(f"[gpu-ref] {name}: transformers bf16 vs fp32 max |diff| = {rel_bf16:.2e} x range -> bound "
          f"{bound_rel:.2e} x range; greedy prefixes "
          f"{[next((i for i, m in enumerate(r[3]) if m <= 2 * bound_rel * r[4]), GREEDY) for r in results.values()]}"
          f" ({time.time() - t0:.1f} s)", flush=True)
    del m32, m16
    if DEV == "cuda":
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
