"""The tiny random-weight models tools/make_tiny_models.py writes: one entry per architecture
variant (its Hugging Face config and what to write besides the f32 files), and the family groups the
writer treats specially. Data only; changing an entry changes the models' hashes in
testdata/reference/models.json (make_tiny_models.py --check fails until they are regenerated).
"""

import numpy as np

VOCAB = 512  # stories260K's SentencePiece vocabulary, which every tiny model carries

# Each model: HF config.json (hand-written in the style real checkpoints use; llama3 / mistral /
# llama-mqa in the transformers-4 spelling rope_theta + rope_scaling, qwen2 / qwen3 in the
# transformers-5 spelling rope_parameters, so both parser branches are exercised) and extras:
#   gguf_types   GGUF files to write, besides f32
#   shards       number of safetensors shards (1: model.safetensors)
#   bf16_copy    also write <name>-bf16 (HF directory, bf16 weights)
MODELS = {
    "llama3": dict(
        config={
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "vocab_size": VOCAB, "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 2,
            "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16,
            "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            # Small original context so the llama3 rule changes the frequencies of a 16-dim head:
            # wavelengths < 16 are kept, > 64 divided by 8, in between smoothly interpolated.
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
            "tie_word_embeddings": True, "attention_bias": False, "mlp_bias": False,
            "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
        },
        gguf_types=["f16", "q8_0"], shards=1, bf16_copy=False,
        description="Llama 3: GQA 8/2, llama3 rope scaling (factor 8, low 1, high 4, original 64), "
                    "theta 5e5, tied embeddings"),
    "qwen2": dict(
        config={
            "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
            "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 1024, "rms_norm_eps": 1e-6,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
            "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": None,
            "max_window_layers": 2, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
            "torch_dtype": "float32",
        },
        gguf_types=["q4_0"], shards=2, bf16_copy=False,
        description="Qwen2: q/k/v biases, GQA 4/2, theta 1e6, untied; HF checkpoint in 2 shards + index"),
    "qwen3": dict(
        config={
            "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
            "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
            "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
            "tie_word_embeddings": True, "attention_bias": False, "use_sliding_window": False,
            "sliding_window": None, "max_window_layers": 3, "hidden_act": "silu",
            "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
        },
        gguf_types=["f16"], shards=1, bf16_copy=False,
        description="Qwen3: q_norm/k_norm, head_dim 32 != hidden/heads 16, GQA 4/2, theta 1e6, tied"),
    "mistral": dict(
        config={
            "architectures": ["MistralForCausalLM"], "model_type": "mistral",
            "vocab_size": VOCAB, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
            "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
            "sliding_window": 4096, "tie_word_embeddings": False, "hidden_act": "silu",
            "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
        },
        gguf_types=[], shards=1, bf16_copy=False,
        description="Mistral: GQA 4/2, sliding_window 4096 (> every tested length), theta 1e6, untied; "
                    "GGUF arch 'llama' as llama.cpp writes it"),
    "llama-mqa": dict(
        config={
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 3,
            "num_attention_heads": 4, "num_key_value_heads": 1,
            "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
            "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
        },
        gguf_types=["q8_0", "q4_0"], shards=1, bf16_copy=True,
        description="Llama 2 style: MQA (1 kv head), theta 1e4, untied, context 256"),
    # Gemma: real layer structure at tiny sizes. Windows far below the prompt lengths (33, 100 and
    # 32 greedy tokens) so the sliding layers' masks matter; soft-caps small enough that dropping
    # them moves the logits well past the bound; query_pre_attn_scalar = head_dim != hidden/heads
    # (llama.cpp's rule for the non-27B GGUFs, which carry no such key).
    "gemma2": dict(
        config={
            "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
            "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
            "max_position_embeddings": 1024, "rms_norm_eps": 1e-6,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
            "query_pre_attn_scalar": 32, "sliding_window": 16,
            "layer_types": ["sliding_attention", "full_attention"] * 2,
            "attn_logit_softcapping": 10.0, "final_logit_softcapping": 15.0,
            "tie_word_embeddings": True, "attention_bias": False, "hidden_activation": "gelu_pytorch_tanh",
            "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "float32",
        },
        gguf_types=[], shards=1, bf16_copy=False,
        description="Gemma 2: (1+w) pre/post norms, GeGLU tanh, sqrt(hidden) embedding scale, sliding window 16 "
                    "on alternate layers, attention soft-cap 10, final soft-cap 15, GQA 4/2, head_dim 32, tied"),
    "gemma3": dict(
        config={
            "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
            "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 7,
            "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32,
            "max_position_embeddings": 1024, "rms_norm_eps": 1e-6,
            "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
            "query_pre_attn_scalar": 32, "sliding_window": 8,
            "layer_types": ["sliding_attention"] * 5 + ["full_attention", "sliding_attention"],
            "attn_logit_softcapping": None, "final_logit_softcapping": None,
            "tie_word_embeddings": True, "attention_bias": False, "hidden_activation": "gelu_pytorch_tanh",
            "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "float32",
        },
        gguf_types=[], shards=1, bf16_copy=False,
        description="Gemma 3: q/k (1+w) norms, five sliding (window 8, local theta 1e4) to one global layer "
                    "(theta 1e6, linear rope x8), pre/post norms, GeGLU tanh, MQA 4/1, head_dim 32, tied"),
    # Mixture of experts: few experts (4-8) and top-2 so that the prompts route tokens to every
    # expert of every layer; expert widths that are whole q8_0 / q4_0 blocks.
    "mixtral": dict(
        config={
            "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
            "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "num_local_experts": 4, "num_experts_per_tok": 2, "router_jitter_noise": 0.0,
            "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
            "sliding_window": None, "tie_word_embeddings": False, "hidden_act": "silu",
            "output_router_logits": False, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
        },
        gguf_types=["q8_0", "q4_0"], shards=1, bf16_copy=False,
        description="Mixtral: 4 experts top-2 (renormalised), expert ffn 96, GQA 4/2, theta 1e6, untied; GGUF arch "
                    "'llama' with expert_count, stacked ffn_*_exps"),
    "qwen2-moe": dict(
        config={
            "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe",
            "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2,
            "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 96, "norm_topk_prob": False, "decoder_sparse_step": 1,
            "mlp_only_layers": [], "max_position_embeddings": 1024, "rms_norm_eps": 1e-6,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
            "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": None,
            "max_window_layers": 2, "hidden_act": "silu", "output_router_logits": False,
            "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
        },
        gguf_types=[], shards=1, bf16_copy=False,
        description="Qwen2-MoE: 8 experts top-2 (not renormalised), expert ffn 32, sigmoid-gated shared expert "
                    "ffn 96, q/k/v biases, GQA 4/2, theta 1e6, untied"),
    "qwen3-moe": dict(
        config={
            "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
            "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
            "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
            "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
            "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
            "tie_word_embeddings": True, "attention_bias": False, "use_sliding_window": False,
            "sliding_window": None, "max_window_layers": 2, "hidden_act": "silu", "output_router_logits": False,
            "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
        },
        gguf_types=["f16"], shards=1, bf16_copy=False,
        description="Qwen3-MoE: 8 experts top-2 (renormalised), expert ffn 64, per-head q/k norm, head_dim 32, "
                    "GQA 4/2, theta 1e6, tied"),
    "olmoe": dict(
        config={
            "architectures": ["OlmoeForCausalLM"], "model_type": "olmoe",
            "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 4,
            "num_experts": 8, "num_experts_per_tok": 2, "norm_topk_prob": False, "clip_qkv": None,
            "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu",
            "output_router_logits": False, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
            "torch_dtype": "float32",
        },
        gguf_types=[], shards=1, bf16_copy=False,
        description="OLMoE: 8 experts top-2 (not renormalised), expert ffn 64, RMSNorm over the whole q and k "
                    "projections, MHA 4/4, theta 1e4, untied"),
    # Phi-3 family: fused qkv_proj / gate_up_proj checkpoints. LongRoPE with a small original
    # context (64) and a 4x longer one (factor 4: attention factor sqrt(1 + ln 4 / ln 64)), so the
    # prompts cover both regimes (tools/make_reference_logits.py: sets "<name>" in the long one at
    # the default context, "<name>-short" loaded with max_model_len 64); factors far from 1.
    "phi3": dict(
        config={
            "architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
            "vocab_size": VOCAB, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 4,
            "max_position_embeddings": 256, "original_max_position_embeddings": 64,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "rope_scaling": {"type": "longrope",
                             "short_factor": [round(1.0 + 0.05 * i, 4) for i in range(16)],
                             "long_factor": [round(float(np.exp(i * np.log(32.0) / 15)), 4) for i in range(16)]},
            "sliding_window": 48, "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu",
            "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attention_dropout": 0.0,
            "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "float32",
        },
        gguf_types=["q8_0"], shards=1, bf16_copy=False,
        long_rope_short_context=64,
        description="Phi-3-mini-128k shape: fused qkv / gate_up, MHA 4/4, LongRoPE (original 64, context 256, short "
                    "and long factors), sliding window 48 on every layer, theta 1e4, untied"),
    "phi4-mini": dict(
        config={
            "architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
            "vocab_size": VOCAB, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "partial_rotary_factor": 0.75,
            "max_position_embeddings": 256, "original_max_position_embeddings": 64,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "rope_scaling": {"type": "longrope",
                             "short_factor": [round(1.0 + 0.1 * i, 4) for i in range(12)],
                             "long_factor": [round(float(np.exp(i * np.log(24.0) / 11)), 4) for i in range(12)]},
            "sliding_window": 262144, "tie_word_embeddings": True, "attention_bias": False, "hidden_act": "silu",
            "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attention_dropout": 0.0,
            "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "float32",
        },
        gguf_types=["f16"], shards=1, bf16_copy=False,
        long_rope_short_context=64,
        description="Phi-4-mini shape: partial rotary 0.75 (24 of 32 dims), GQA 4/2, LongRoPE (original 64, context "
                    "256), window 262144 as the real config, tied"),
    "phi4": dict(
        config={
            "architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
            "vocab_size": VOCAB, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 1,
            "max_position_embeddings": 1024, "original_max_position_embeddings": 1024,
            "rms_norm_eps": 1e-5, "rope_theta": 250000.0, "rope_scaling": None, "sliding_window": None,
            "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu",
            "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attention_dropout": 0.0,
            "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "float32",
        },
        gguf_types=[], shards=1, bf16_copy=False,
        description="Phi-4 (14B) shape: plain RoPE theta 2.5e5, no window (llama.cpp writes 0), GQA 4/1, untied"),
}

GEMMA = ("gemma2", "gemma3_text")
MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe")
PHI3 = ("phi3",)
