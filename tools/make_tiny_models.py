#!/usr/bin/env python3
"""Random-weight tiny models of each architecture variant Pagoda runs, for exactness tests.

Deterministic and numpy-only (numpy, safetensors, gguf from .venv-test), so CI regenerates
bit-identical files: `scripts/make_test_models.sh` runs this with --check, which compares every
file's sha256 with testdata/reference/models.json (the models the committed reference logits were
computed from) and fails loudly on any difference.

For each model it writes, under OUT/<name>/ (default OUT = models/tiny, git-ignored):
  config.json + model.safetensors     a Hugging Face directory, f32 weights (one model is sharded:
                                      model-0000k-of-00002.safetensors + model.safetensors.index.json)
  model-<type>.gguf                   GGUF conversions (f32 always; f16 / q8_0 / q4_0 for some)
and for llama-mqa also OUT/llama-mqa-bf16/ (the same weights rounded to bfloat16, HF directory).

GGUF conventions follow llama.cpp's converter (re-implemented here from the format, not copied):
  - metadata: general.architecture, <arch>.context_length / embedding_length / block_count /
    feed_forward_length / attention.head_count / head_count_kv / layer_norm_rms_epsilon /
    rope.freq_base / rope.dimension_count / vocab_size, attention.key_length / value_length when
    head_dim != hidden / heads, general.file_type, general.quantization_version (quantized), and the
    stories260K SentencePiece vocabulary (512 pieces, tokenizer.ggml.*), so each file is complete;
  - tensor names token_embd, blk.N.attn_{norm,q,k,v,output}, blk.N.attn_{q,k,v}.bias (qwen2),
    blk.N.attn_{q,k}_norm (qwen3), blk.N.ffn_{norm,gate,up,down}, output_norm, output (absent when
    the embeddings are tied), rope_freqs (llama3 rope scaling: per-frequency divisors);
  - llama / mistral (both written with general.architecture "llama", as llama.cpp does for
    MistralForCausalLM): Q and K weight rows permuted from the HF half-split RoPE layout into the
    interleaved-pair layout. qwen2 / qwen3: not permuted (llama.cpp uses NeoX rotation for them);
  - 1-D tensors (norms, biases, rope_freqs) and the MoE routers (ffn_gate_inp, ffn_gate_inp_shexp)
    stay f32 in f16 / quantized files; every other 2-D or 3-D weight (token_embd, output and the
    stacked experts included) takes the file's type (quantized with gguf.quants.quantize).

Usage:
  tools/make_tiny_models.py [--out models/tiny] [--shared ../shared]            write models + models.json
  tools/make_tiny_models.py --check [--out DIR]                                   write models, verify hashes
"""
import argparse
import hashlib
import json
import os
import shutil
import struct
import sys

import numpy as np
from safetensors.numpy import save_file

try:
    import gguf
except ImportError:  # tools/make_gpu_references.py uses only the HF writers (no gguf on the GPU machine)
    gguf = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS_JSON = os.path.join(ROOT, "testdata", "reference", "models.json")
SEED = 20250101

# The models and their family groups: tools/tiny_model_table.py (data only).
from tiny_model_table import GEMMA, MODELS, MOE, PHI3, VOCAB  # noqa: E402,F401  (importers read tiny.MODELS etc.)


def rope_dims(cfg):
    """Rotated dimensions per head: llama.cpp's converter's int(partial * hidden) // heads."""
    return int(cfg.get("partial_rotary_factor", 1.0) * cfg["hidden_size"]) // cfg["num_attention_heads"]


def long_rope(cfg):
    rs = cfg.get("rope_scaling") or {}
    return rs.get("type", rs.get("rope_type")) in ("longrope", "su")


def num_experts(cfg):
    return cfg.get("num_local_experts", cfg.get("num_experts"))


def expert_ffn(cfg):
    return cfg.get("moe_intermediate_size", cfg["intermediate_size"])


def hf_expert_names(cfg):
    """(router, gate, up, down) HF names in a layer, "{}" for the expert index."""
    if cfg["model_type"] == "mixtral":
        return ("block_sparse_moe.gate.weight", "block_sparse_moe.experts.{}.w1.weight",
                "block_sparse_moe.experts.{}.w3.weight", "block_sparse_moe.experts.{}.w2.weight")
    return ("mlp.gate.weight", "mlp.experts.{}.gate_proj.weight", "mlp.experts.{}.up_proj.weight",
            "mlp.experts.{}.down_proj.weight")

GGUF_TYPES = {
    "f32": (gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32),
    "f16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
    "q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    "q4_0": (gguf.GGMLQuantizationType.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
} if gguf is not None else {}


def dims(cfg):
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", cfg["hidden_size"] // heads)
    return heads, kv, hd


def rope_theta(cfg):
    rp = cfg.get("rope_parameters", {})
    rp = rp.get("full_attention", rp)
    return cfg.get("rope_theta", rp.get("rope_theta", 10000.0))


def make_weights(name, cfg):
    """HF state dict (name -> float32 array), drawn from a generator seeded per model."""
    rng = np.random.default_rng([SEED, int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")])
    H, I, L, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    heads, kv, hd = dims(cfg)
    tied = cfg["tie_word_embeddings"]

    def normal(shape, std):
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)

    def linear(out_f, in_f):
        return normal((out_f, in_f), 1.0 / np.sqrt(in_f))

    gemma = cfg["model_type"] in GEMMA
    if cfg["model_type"] in PHI3:  # the checkpoint's own fused projections
        w = {"model.embed_tokens.weight": normal((V, H), 4.0 / np.sqrt(H) if tied else 1.0)}
        for l in range(L):
            p = f"model.layers.{l}."
            w[p + "input_layernorm.weight"] = (1.0 + normal((H,), 0.1)).astype(np.float32)
            w[p + "self_attn.qkv_proj.weight"] = linear((heads + 2 * kv) * hd, H)
            w[p + "self_attn.o_proj.weight"] = linear(H, heads * hd)
            w[p + "post_attention_layernorm.weight"] = (1.0 + normal((H,), 0.1)).astype(np.float32)
            w[p + "mlp.gate_up_proj.weight"] = linear(2 * I, H)
            w[p + "mlp.down_proj.weight"] = linear(H, I)
        w["model.norm.weight"] = (1.0 + normal((H,), 0.1)).astype(np.float32)
        if not tied:
            w["lm_head.weight"] = normal((V, H), 4.0 / np.sqrt(H))
        return w

    def norm(n):  # Gemma's modules store w of the effective (1 + w) weight
        return normal((n,), 0.1) if gemma else (1.0 + normal((n,), 0.1)).astype(np.float32)

    w = {}
    # Logits of std ~4 either way: tied -> the embedding is also the output layer (Gemma scales its
    # input rows by sqrt(hidden), so its embedded tokens have std ~4).
    w["model.embed_tokens.weight"] = normal((V, H), 4.0 / np.sqrt(H) if tied else 1.0)
    for l in range(L):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = norm(H)
        w[p + "self_attn.q_proj.weight"] = linear(heads * hd, H)
        w[p + "self_attn.k_proj.weight"] = linear(kv * hd, H)
        w[p + "self_attn.v_proj.weight"] = linear(kv * hd, H)
        w[p + "self_attn.o_proj.weight"] = linear(H, heads * hd)
        if cfg["model_type"] == "qwen2":
            w[p + "self_attn.q_proj.bias"] = normal((heads * hd,), 0.2)
            w[p + "self_attn.k_proj.bias"] = normal((kv * hd,), 0.2)
            w[p + "self_attn.v_proj.bias"] = normal((kv * hd,), 0.2)
        if cfg["model_type"] == "qwen2_moe":
            w[p + "self_attn.q_proj.bias"] = normal((heads * hd,), 0.2)
            w[p + "self_attn.k_proj.bias"] = normal((kv * hd,), 0.2)
            w[p + "self_attn.v_proj.bias"] = normal((kv * hd,), 0.2)
        if cfg["model_type"] in ("qwen3", "gemma3_text", "qwen3_moe"):
            w[p + "self_attn.q_norm.weight"] = norm(hd)
            w[p + "self_attn.k_norm.weight"] = norm(hd)
        if cfg["model_type"] == "olmoe":  # over the whole projections
            w[p + "self_attn.q_norm.weight"] = norm(heads * hd)
            w[p + "self_attn.k_norm.weight"] = norm(kv * hd)
        w[p + "post_attention_layernorm.weight"] = norm(H)
        if gemma:
            w[p + "pre_feedforward_layernorm.weight"] = norm(H)
            w[p + "post_feedforward_layernorm.weight"] = norm(H)
        if cfg["model_type"] in MOE:
            E, Fe = num_experts(cfg), expert_ffn(cfg)
            router, gate, up, down = hf_expert_names(cfg)
            # Router logits of std ~2 so the top-k choice varies from token to token.
            w[p + router] = normal((E, H), 2.0 / np.sqrt(H))
            for e in range(E):
                w[p + gate.format(e)] = linear(Fe, H)
                w[p + up.format(e)] = linear(Fe, H)
                w[p + down.format(e)] = linear(H, Fe)
            if cfg.get("shared_expert_intermediate_size"):
                Fs = cfg["shared_expert_intermediate_size"]
                w[p + "mlp.shared_expert.gate_proj.weight"] = linear(Fs, H)
                w[p + "mlp.shared_expert.up_proj.weight"] = linear(Fs, H)
                w[p + "mlp.shared_expert.down_proj.weight"] = linear(H, Fs)
                w[p + "mlp.shared_expert_gate.weight"] = linear(1, H)
            continue
        w[p + "mlp.gate_proj.weight"] = linear(I, H)
        w[p + "mlp.up_proj.weight"] = linear(I, H)
        w[p + "mlp.down_proj.weight"] = linear(H, I)
    w["model.norm.weight"] = norm(H)
    if not tied:
        w["lm_head.weight"] = normal((V, H), 4.0 / np.sqrt(H))
    return w


# ---- HF half-split <-> GGUF interleaved RoPE row order ----------------------------------------
# HF row h*hd + t*hd/2 + j (pair (j, j + hd/2)) <-> interleaved row h*hd + 2j + t (pair (2j, 2j+1)).

def hf_to_interleaved(w, n_head):
    out = w.shape[0]
    hd = out // n_head
    return w.reshape(n_head, 2, hd // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def interleaved_to_hf(w, n_head):
    out = w.shape[0]
    hd = out // n_head
    return w.reshape(n_head, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_divisors(cfg):
    """Per-frequency divisors of the llama3 rule (new_freq = freq / divisor), as rope_freqs.weight."""
    _, _, hd = dims(cfg)
    rs = cfg["rope_scaling"]
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old_ctx = rs["original_max_position_embeddings"]
    theta = rope_theta(cfg)
    out = []
    for i in range(0, hd, 2):
        freq = 1.0 / (theta ** (i / hd))
        wavelen = 2 * np.pi / freq
        if wavelen < old_ctx / high:
            out.append(1.0)
        elif wavelen > old_ctx / low:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def gguf_arch(cfg):
    return {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma2": "gemma2",
            "gemma3_text": "gemma3", "mixtral": "llama", "qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe",
            "olmoe": "olmoe", "phi3": "phi3"}[cfg["model_type"]]


def gemma_gguf_tensors(cfg, w):
    """llama.cpp's Gemma converter: norm weights stored as 1 + w, post-norms by their own names."""
    one = np.float32(1.0)
    t = [("token_embd.weight", w["model.embed_tokens.weight"])]
    for l in range(cfg["num_hidden_layers"]):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        t += [(b + "attn_norm.weight", one + w[p + "input_layernorm.weight"]),
              (b + "attn_q.weight", w[p + "self_attn.q_proj.weight"]),
              (b + "attn_k.weight", w[p + "self_attn.k_proj.weight"]),
              (b + "attn_v.weight", w[p + "self_attn.v_proj.weight"]),
              (b + "attn_output.weight", w[p + "self_attn.o_proj.weight"])]
        if p + "self_attn.q_norm.weight" in w:
            t += [(b + "attn_q_norm.weight", one + w[p + "self_attn.q_norm.weight"]),
                  (b + "attn_k_norm.weight", one + w[p + "self_attn.k_norm.weight"])]
        t += [(b + "post_attention_norm.weight", one + w[p + "post_attention_layernorm.weight"]),
              (b + "ffn_norm.weight", one + w[p + "pre_feedforward_layernorm.weight"]),
              (b + "ffn_gate.weight", w[p + "mlp.gate_proj.weight"]),
              (b + "ffn_up.weight", w[p + "mlp.up_proj.weight"]),
              (b + "ffn_down.weight", w[p + "mlp.down_proj.weight"]),
              (b + "post_ffw_norm.weight", one + w[p + "post_feedforward_layernorm.weight"])]
    t.append(("output_norm.weight", one + w["model.norm.weight"]))
    return t


def phi3_gguf_tensors(cfg, w):
    """llama.cpp's Phi-3 converter: the fused projections as attn_qkv and ffn_up (gate rows, then up
    rows), NeoX rotation (no permutation), LongRoPE's lists as rope_factors_long / _short."""
    t = []
    if long_rope(cfg):
        t += [("rope_factors_long.weight", np.array(cfg["rope_scaling"]["long_factor"], dtype=np.float32)),
              ("rope_factors_short.weight", np.array(cfg["rope_scaling"]["short_factor"], dtype=np.float32))]
    t.append(("token_embd.weight", w["model.embed_tokens.weight"]))
    for l in range(cfg["num_hidden_layers"]):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        t += [(b + "attn_norm.weight", w[p + "input_layernorm.weight"]),
              (b + "attn_qkv.weight", w[p + "self_attn.qkv_proj.weight"]),
              (b + "attn_output.weight", w[p + "self_attn.o_proj.weight"]),
              (b + "ffn_norm.weight", w[p + "post_attention_layernorm.weight"]),
              (b + "ffn_up.weight", w[p + "mlp.gate_up_proj.weight"]),
              (b + "ffn_down.weight", w[p + "mlp.down_proj.weight"])]
    t.append(("output_norm.weight", w["model.norm.weight"]))
    if "lm_head.weight" in w and not cfg["tie_word_embeddings"]:
        t.append(("output.weight", w["lm_head.weight"]))
    return t


def gguf_tensors(cfg, w):
    """(GGUF name, array) in file order, Q/K permuted for llama-arch files."""
    if cfg["model_type"] in GEMMA:
        return gemma_gguf_tensors(cfg, w)
    if cfg["model_type"] in PHI3:
        return phi3_gguf_tensors(cfg, w)
    heads, kv, _ = dims(cfg)
    permute = gguf_arch(cfg) == "llama"
    t = [("token_embd.weight", w["model.embed_tokens.weight"])]
    for l in range(cfg["num_hidden_layers"]):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        q, k = w[p + "self_attn.q_proj.weight"], w[p + "self_attn.k_proj.weight"]
        if permute:
            q, k = hf_to_interleaved(q, heads), hf_to_interleaved(k, kv)
        t += [(b + "attn_norm.weight", w[p + "input_layernorm.weight"]),
              (b + "attn_q.weight", q), (b + "attn_k.weight", k),
              (b + "attn_v.weight", w[p + "self_attn.v_proj.weight"]),
              (b + "attn_output.weight", w[p + "self_attn.o_proj.weight"])]
        if cfg["model_type"] in ("qwen2", "qwen2_moe"):
            t += [(b + "attn_q.bias", w[p + "self_attn.q_proj.bias"]),
                  (b + "attn_k.bias", w[p + "self_attn.k_proj.bias"]),
                  (b + "attn_v.bias", w[p + "self_attn.v_proj.bias"])]
        if cfg["model_type"] in ("qwen3", "qwen3_moe", "olmoe"):
            t += [(b + "attn_q_norm.weight", w[p + "self_attn.q_norm.weight"]),
                  (b + "attn_k_norm.weight", w[p + "self_attn.k_norm.weight"])]
        if cfg["model_type"] in MOE:
            # llama.cpp's converter: router ffn_gate_inp, experts stacked [E, F, D] / [E, D, F] as
            # ffn_{gate,up,down}_exps, the shared expert as ffn_*_shexp and its gate ffn_gate_inp_shexp.
            E = num_experts(cfg)
            router, gate, up, down = hf_expert_names(cfg)
            t += [(b + "ffn_norm.weight", w[p + "post_attention_layernorm.weight"]),
                  (b + "ffn_gate_inp.weight", w[p + router]),
                  (b + "ffn_gate_exps.weight", np.stack([w[p + gate.format(e)] for e in range(E)])),
                  (b + "ffn_down_exps.weight", np.stack([w[p + down.format(e)] for e in range(E)])),
                  (b + "ffn_up_exps.weight", np.stack([w[p + up.format(e)] for e in range(E)]))]
            if cfg.get("shared_expert_intermediate_size"):
                t += [(b + "ffn_gate_inp_shexp.weight", w[p + "mlp.shared_expert_gate.weight"]),
                      (b + "ffn_gate_shexp.weight", w[p + "mlp.shared_expert.gate_proj.weight"]),
                      (b + "ffn_up_shexp.weight", w[p + "mlp.shared_expert.up_proj.weight"]),
                      (b + "ffn_down_shexp.weight", w[p + "mlp.shared_expert.down_proj.weight"])]
            continue
        t += [(b + "ffn_norm.weight", w[p + "post_attention_layernorm.weight"]),
              (b + "ffn_gate.weight", w[p + "mlp.gate_proj.weight"]),
              (b + "ffn_up.weight", w[p + "mlp.up_proj.weight"]),
              (b + "ffn_down.weight", w[p + "mlp.down_proj.weight"])]
    t.append(("output_norm.weight", w["model.norm.weight"]))
    if "lm_head.weight" in w:
        t.append(("output.weight", w["lm_head.weight"]))
    if "rope_scaling" in cfg and cfg["rope_scaling"].get("rope_type") == "llama3":
        t.append(("rope_freqs.weight", llama3_rope_divisors(cfg)))
    return t


def read_vocab(shared):
    path = os.path.join(shared, "models", "stories260K", "stories260K.gguf")
    if not os.path.exists(path):
        sys.exit(f"make_tiny_models: {path} not found (the stories260K vocabulary goes into every GGUF)")
    r = gguf.GGUFReader(path)
    f = r.fields
    return {
        "tokens": f["tokenizer.ggml.tokens"].contents(),
        "scores": f["tokenizer.ggml.scores"].contents(),
        "types": f["tokenizer.ggml.token_type"].contents(),
        "bos": f["tokenizer.ggml.bos_token_id"].contents(),
        "eos": f["tokenizer.ggml.eos_token_id"].contents(),
        "unk": f["tokenizer.ggml.unknown_token_id"].contents(),
    }


def write_gguf(path, name, cfg, w, type_name, vocab):
    qtype, ftype = GGUF_TYPES[type_name]
    arch = gguf_arch(cfg)
    heads, kv, hd = dims(cfg)
    wr = gguf.GGUFWriter(path, arch)
    wr.add_name(f"pagoda-tiny-{name}")
    wr.add_context_length(cfg["max_position_embeddings"])
    wr.add_embedding_length(cfg["hidden_size"])
    wr.add_block_count(cfg["num_hidden_layers"])
    wr.add_feed_forward_length(cfg["intermediate_size"])
    wr.add_head_count(heads)
    wr.add_head_count_kv(kv)
    wr.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    wr.add_rope_freq_base(rope_theta(cfg))
    wr.add_rope_dimension_count(rope_dims(cfg) if cfg["model_type"] in PHI3 else hd)
    if hd != cfg["hidden_size"] // heads:
        wr.add_key_length(hd)
        wr.add_value_length(hd)
    wr.add_vocab_size(cfg["vocab_size"])
    if cfg["model_type"] in MOE:  # what llama.cpp's MoE converters write
        wr.add_expert_count(num_experts(cfg))
        wr.add_expert_used_count(cfg["num_experts_per_tok"])
        if cfg["model_type"] in ("qwen2_moe", "qwen3_moe"):
            wr.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        if cfg.get("shared_expert_intermediate_size"):
            wr.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    if cfg["model_type"] in GEMMA:  # what llama.cpp's Gemma converters write
        wr.add_sliding_window(cfg["sliding_window"])
        if cfg.get("attn_logit_softcapping"):
            wr.add_attn_logit_softcapping(cfg["attn_logit_softcapping"])
        if cfg.get("final_logit_softcapping"):
            wr.add_final_logit_softcapping(cfg["final_logit_softcapping"])
        full = cfg["rope_parameters"].get("full_attention")
        if full is not None and full.get("rope_type") == "linear":
            wr.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            wr.add_rope_scaling_factor(full["factor"])
        local = cfg["rope_parameters"].get("sliding_attention")
        if local is not None and local.get("rope_theta", 10000.0) != 10000.0:
            wr.add_rope_freq_base_swa(local["rope_theta"])
        if cfg["model_type"] == "gemma3_text" and cfg["layer_types"] != [
                "sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(cfg["num_hidden_layers"])]:
            wr.add_sliding_window_pattern([t == "sliding_attention" for t in cfg["layer_types"]])
        wr.add_add_space_prefix(False)
    if cfg["model_type"] in PHI3:  # what llama.cpp's Phi-3 converter writes
        if "original_max_position_embeddings" in cfg:
            wr.add_rope_scaling_orig_ctx_len(cfg["original_max_position_embeddings"])
        wr.add_sliding_window(cfg.get("sliding_window") or 0)
        if long_rope(cfg):
            import math
            scale = cfg["max_position_embeddings"] / cfg["original_max_position_embeddings"]
            orig = cfg["original_max_position_embeddings"]
            wr.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0)
    wr.add_file_type(ftype)
    if qtype not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
        wr.add_quantization_version(gguf.GGML_QUANT_VERSION)
    wr.add_tokenizer_model("llama")
    wr.add_token_list(vocab["tokens"])
    wr.add_token_scores(vocab["scores"])
    wr.add_token_types(vocab["types"])
    wr.add_bos_token_id(vocab["bos"])
    wr.add_eos_token_id(vocab["eos"])
    wr.add_unk_token_id(vocab["unk"])
    for tname, arr in gguf_tensors(cfg, w):
        # The MoE routers stay f32 in every file, as llama.cpp's converter and quantizer keep them.
        if arr.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32 or "ffn_gate_inp" in tname:
            wr.add_tensor(tname, np.ascontiguousarray(arr, dtype=np.float32))
        elif qtype == gguf.GGMLQuantizationType.F16:
            wr.add_tensor(tname, arr.astype(np.float16))
        else:
            q = gguf.quants.quantize(np.ascontiguousarray(arr, dtype=np.float32), qtype)
            wr.add_tensor(tname, q, raw_shape=q.shape, raw_dtype=qtype)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def bf16_bits(a):
    """float32 -> bfloat16 bit patterns (round to nearest even), as uint16."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def write_bf16_safetensors(path, w):
    """safetensors.numpy cannot write bfloat16 (numpy has none): header and bytes by hand."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for key in sorted(w):
        b = bf16_bits(w[key]).tobytes()
        header[key] = {"dtype": "BF16", "shape": list(w[key].shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def write_hf_dir(d, cfg, w, shards):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    if shards == 1:
        save_file(w, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        return
    keys = sorted(w)
    per = (len(keys) + shards - 1) // shards
    weight_map = {}
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: w[k] for k in keys[s * per:(s + 1) * per]}
        save_file(part, os.path.join(d, fname), metadata={"format": "pt"})
        weight_map.update({k: fname for k in part})
    index = {"metadata": {"total_size": int(sum(a.nbytes for a in w.values()))}, "weight_map": weight_map}
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
        f.write("\n")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build(out, shared):
    """Writes every model; returns the models.json object (paths relative to OUT's parent)."""
    vocab = read_vocab(shared)
    base = os.path.basename(os.path.normpath(out))  # "tiny": paths are relative to the models dir
    manifest = {}
    for name, spec in MODELS.items():
        cfg = spec["config"]
        w = make_weights(name, cfg)
        d = os.path.join(out, name)
        if os.path.isdir(d):
            shutil.rmtree(d)
        write_hf_dir(d, cfg, w, spec["shards"])
        checkpoints = [{"path": f"{base}/{name}", "format": "hf", "weights": "f32", "reference": name}]
        for t in ["f32"] + spec["gguf_types"]:
            write_gguf(os.path.join(d, f"model-{t}.gguf"), name, cfg, w, t, vocab)
            checkpoints.append({"path": f"{base}/{name}/model-{t}.gguf", "format": "gguf", "weights": t,
                                "reference": name if t == "f32" else f"{name}-{t}"})
        if spec.get("long_rope_short_context"):
            # LongRoPE's short regime: the same files at a context within the original one.
            for c in [c for c in checkpoints if c["weights"] == "f32"]:
                checkpoints.append(dict(c, reference=f"{name}-short", max_model_len=spec["long_rope_short_context"]))
        dirs = [(name, d)]
        if spec["bf16_copy"]:
            bd = os.path.join(out, f"{name}-bf16")
            if os.path.isdir(bd):
                shutil.rmtree(bd)
            os.makedirs(bd)
            bcfg = dict(cfg, torch_dtype="bfloat16")
            with open(os.path.join(bd, "config.json"), "w") as f:
                json.dump(bcfg, f, indent=2, sort_keys=True)
                f.write("\n")
            write_bf16_safetensors(os.path.join(bd, "model.safetensors"), w)
            checkpoints.append({"path": f"{base}/{name}-bf16", "format": "hf", "weights": "bf16",
                                "reference": f"{name}-bf16"})
            dirs.append((f"{name}-bf16", bd))
        files = {}
        for _, dd in dirs:
            for fn in sorted(os.listdir(dd)):
                p = os.path.join(dd, fn)
                files[f"{base}/{os.path.relpath(p, out)}"] = {"sha256": sha256(p), "bytes": os.path.getsize(p)}
        heads, kv, hd = dims(cfg)
        manifest[name] = {
            "description": spec["description"],
            "model_type": cfg["model_type"],
            "gguf_architecture": gguf_arch(cfg),
            "gguf_rope_layout": "interleaved" if gguf_arch(cfg) == "llama" else "half-split",
            "hyperparameters": {"vocab_size": cfg["vocab_size"], "hidden_size": cfg["hidden_size"],
                                "intermediate_size": cfg["intermediate_size"],
                                "num_layers": cfg["num_hidden_layers"], "num_heads": heads,
                                "num_kv_heads": kv, "head_dim": hd,
                                "context_length": cfg["max_position_embeddings"],
                                "rope_theta": rope_theta(cfg), "tied_embeddings": cfg["tie_word_embeddings"]},
            "checkpoints": checkpoints,
            "files": files,
        }
    return {
        "generator": "tools/make_tiny_models.py",
        "seed": SEED,
        "versions": {"numpy": np.__version__, "gguf": _version("gguf"), "safetensors": _version("safetensors")},
        "paths_relative_to": "the models directory (PAGODA_MODELS_DIR, default <repo>/models)",
        "models": manifest,
    }


def _version(pkg):
    try:
        from importlib.metadata import version
        return version(pkg)
    except Exception:  # noqa: BLE001
        return "?"


def check(manifest):
    """Compares freshly written files with the committed models.json; returns a list of problems."""
    if not os.path.exists(MODELS_JSON):
        return [f"{MODELS_JSON} missing: run tools/make_tiny_models.py (without --check) and commit it"]
    with open(MODELS_JSON) as f:
        want = json.load(f)
    problems = []
    for name, m in want["models"].items():
        if name not in manifest["models"]:
            problems.append(f"model {name} is in models.json but the generator no longer makes it")
            continue
        got_files = manifest["models"][name]["files"]
        for path, meta in m["files"].items():
            got = got_files.get(path)
            if got is None:
                problems.append(f"{path}: not generated")
            elif got["sha256"] != meta["sha256"]:
                problems.append(f"{path}: sha256 {got['sha256']} != committed {meta['sha256']}")
        for path in got_files:
            if path not in m["files"]:
                problems.append(f"{path}: generated but not in models.json")
    for name in manifest["models"]:
        if name not in want["models"]:
            problems.append(f"model {name} is generated but not in models.json")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "tiny"))
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--check", action="store_true", help="verify against testdata/reference/models.json "
                    "instead of rewriting it")
    args = ap.parse_args()
    manifest = build(args.out, args.shared)
    if args.check:
        problems = check(manifest)
        if problems:
            print("make_tiny_models: REGENERATED MODELS DIFFER FROM THE ONES THE REFERENCES WERE MADE FROM:",
                  file=sys.stderr)
            for p in problems:
                print("  " + p, file=sys.stderr)
            print(f"(committed versions: {json.load(open(MODELS_JSON)).get('versions') if os.path.exists(MODELS_JSON) else None}, "
                  f"here: {manifest['versions']})", file=sys.stderr)
            sys.exit(1)
        n = sum(len(m["files"]) for m in manifest["models"].values())
        print(f"make_tiny_models: {n} files in {args.out} match testdata/reference/models.json")
        return
    os.makedirs(os.path.dirname(MODELS_JSON), exist_ok=True)
    with open(MODELS_JSON, "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=False)
        f.write("\n")
    print(f"make_tiny_models: wrote {len(manifest['models'])} models to {args.out} and {MODELS_JSON}")


if __name__ == "__main__":
    main()
