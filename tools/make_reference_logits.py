#!/usr/bin/env python3
"""Reference logits from Hugging Face transformers (torch CPU, float32, eager attention) for the
tiny random-weight models (tools/make_tiny_models.py) and the real small models, written to
testdata/reference/ in the format testdata/reference/README.md specifies.

Runs with .venv-ref (scripts/setup_python.sh --ref). Inputs:
  models/tiny/...                           made by tools/make_tiny_models.py (hashes checked
                                            against testdata/reference/models.json first)
  ../shared/models/stories260K/stories260K.gguf   (+ tok512.model for its text prompts)
  models/SmolLM2-135M-Instruct.Q4_1.gguf    (scripts/fetch_models.sh)

Weights: an HF directory is loaded with from_pretrained; a GGUF is dequantized with the gguf
package (gguf.quants.dequantize), its tensors renamed to HF names and, for llama-architecture files,
its Q/K rows permuted back from the interleaved-pair layout to HF's half-split layout. So a
quantized GGUF's reference is the dequantized weights run in float32.

Self-checks (the tool stops on failure): tiny-model hashes; HF loading with no missing or
unexpected keys and the intended rope parameters; every f32 GGUF converts back to exactly the HF
weights; rope_freqs.weight reproduces transformers' llama3 frequencies; our GGUF->HF conversion
equals transformers' own GGUF loader (gguf_file=) where it supports the file; stories260K's greedy
continuation of "Once upon a time" begins ", there was a little girl named Lily.".

Usage: tools/make_reference_logits.py [--only SET ...] [--skip-smollm2] [--threads N] [--retolerance]
"""
import argparse
import hashlib
import json
import os
import shutil
import sys
import time

import numpy as np
import torch

import gguf

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import make_tiny_models as tiny  # noqa: E402

ROOT = os.path.dirname(TOOLS)
REF = os.path.join(ROOT, "testdata", "reference")
FORMAT = "pagoda-reference-logits/1"
GREEDY_TOKENS = 32

# Tolerances, as fractions of the prompt's reference logit range (max - min over all its logits):
#   max_abs_diff     the bound on |logit - reference| at every stored position;
#   decision_margin  positions whose reference top-1/top-2 margin is at most this are exempt from the
#                    top-1 check, and the greedy continuation must match up to the first such step.
# Two regimes:
#   "tolerance" (every set): the engine computes with float32 activations (quantized weights
#     dequantized exactly), so it differs from torch only by accumulation order (~1e-6 of the range):
#     bound 1e-3, decision margin 2e-4 (tighter than the bound: a top-1 swap needs a real error).
#   "tolerance_quantized_activations" (quantized-weight sets only): the engine also quantizes the
#     activations to q8 blocks for its integer dot products, as llama.cpp does. Measured with torch
#     hooks that round every linear layer's input to q8_0 blocks: at most 9e-3 of the range on the
#     tiny models and 3.5e-2 on SmolLM2-135M (30 layers); bounds 2e-2 and 6e-2, decision margin
#     twice the bound (any larger margin cannot flip while the bound holds).
#     Mixture of experts: routing is discontinuous, so a token whose k-th and (k+1)-th router
#     probabilities lie within the activation error switches experts; on the tiny Mixtral q8_0 the
#     engine's q8 activations move one position of p100 by 2.6e-2 of the range (the parity test's
#     comparison with the dequantized-f32 forward, bound 8e-2 of the range, passes): bound 4e-2 for
#     the MoE quantized sets.
EXACT = (1e-3, 2e-4)
QUANTIZED_ACTIVATIONS = {"smollm2": 6e-2, "mixtral-q8_0": 4e-2, "mixtral-q4_0": 4e-2}  # others: 2e-2
QUANTIZED_WEIGHTS = ("q8_0", "q4_0", "q4_1")


TOLERANCE_RULE = (
    "With the chosen regime's block: max |logit - ref| <= max_abs_diff at every stored position; top-1 equal "
    "to top1 at every position except top1_exempt_positions (reference margin <= decision_margin); the first "
    "greedy_must_match_prefix ids of a 32-token greedy continuation equal greedy.ids.")


KEY_ORDER = ["format", "reference_set", "prompt", "prompt_text", "prompt_ids", "num_positions", "vocab_size",
             "logits_file", "logits_dtype", "logits_byte_order", "logits_shape", "logits_positions", "logit_range",
             "top1", "top1_margin", "topk", "greedy", "tolerance_rule", "tolerance",
             "tolerance_quantized_activations", "checkpoints", "versions", "computation"]


def dump_prompt_json(path, doc):
    ordered = {k: doc[k] for k in KEY_ORDER if k in doc}
    ordered.update({k: v for k, v in doc.items() if k not in ordered})
    with open(path, "w") as f:
        json.dump(ordered, f, indent=1)
        f.write("\n")


def retolerance():
    """Recomputes the tolerance blocks of every committed JSON from its stored margins (no model runs)."""
    with open(os.path.join(REF, "index.json")) as f:
        index = json.load(f)
    n = 0
    for set_name, entry in index["sets"].items():
        for prompt in entry["prompts"]:
            path = os.path.join(REF, set_name, f"{prompt}.json")
            with open(path) as f:
                doc = json.load(f)
            doc["greedy"].pop("must_match_prefix", None)
            doc.pop("tolerance", None)
            doc.pop("tolerance_quantized_activations", None)
            doc["tolerance_rule"] = TOLERANCE_RULE
            doc.update(tolerances(set_name, entry["weights"], doc["logit_range"], doc["top1_margin"],
                                  doc["greedy"]["margins"]))
            dump_prompt_json(path, doc)
            n += 1
        index["sets"][set_name] = {k: entry[k] for k in ("weights", "checkpoints", "prompts")}
    with open(os.path.join(REF, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    log(f"rewrote the tolerances of {n} prompt files")


def tolerance_block(rel, rel_margin, lrange, top1_margin, greedy_margins):
    decision = rel_margin * lrange
    return {
        "max_abs_diff_relative_to_range": rel,
        "max_abs_diff": rel * lrange,
        "decision_margin_relative_to_range": rel_margin,
        "decision_margin": decision,
        "top1_exempt_positions": [int(i) for i, m in enumerate(top1_margin) if m <= decision],
        "greedy_must_match_prefix": next((i for i, m in enumerate(greedy_margins) if m <= decision),
                                         len(greedy_margins)),
    }


def tolerances(set_name, weights, lrange, top1_margin, greedy_margins):
    """{"tolerance": ..., "tolerance_quantized_activations": ... or None} for one prompt."""
    out = {"tolerance": dict(weights=weights, **tolerance_block(*EXACT, lrange, top1_margin, greedy_margins)),
           "tolerance_quantized_activations": None}
    if weights in QUANTIZED_WEIGHTS:
        rel = QUANTIZED_ACTIVATIONS.get(set_name, 2e-2)
        out["tolerance_quantized_activations"] = dict(
            weights=weights, **tolerance_block(rel, 2 * rel, lrange, top1_margin, greedy_margins))
    return out


def log(*a):
    print("[ref]", *a, flush=True)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---- GGUF -> HF state dict --------------------------------------------------------------------

LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                "output.weight": "lm_head.weight"}


def gguf_field(r, key, default=None):
    f = r.fields.get(key)
    return default if f is None else f.contents()


def gguf_state_dict(path):
    """(state dict of float32 numpy arrays in HF names and layout, metadata dict, extra tensors)."""
    r = gguf.GGUFReader(path)
    arch = gguf_field(r, "general.architecture")
    heads = gguf_field(r, f"{arch}.attention.head_count")
    kv = gguf_field(r, f"{arch}.attention.head_count_kv", heads)
    sd, extra = {}, {}
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        name = t.name
        if name in GLOBAL_NAMES:
            hf = GLOBAL_NAMES[name]
        elif name.startswith("blk."):
            _, layer, rest = name.split(".", 2)
            hf = f"model.layers.{int(layer)}.{LAYER_NAMES[rest]}"
            if arch == "llama" and rest in ("attn_q.weight", "attn_k.weight"):
                a = tiny.interleaved_to_hf(a, heads if rest == "attn_q.weight" else kv)
        else:
            extra[name] = a
            continue
        sd[hf] = np.ascontiguousarray(a)
    meta = {k: gguf_field(r, k) for k in r.fields if not k.startswith("tokenizer.ggml.") and not k.startswith("GGUF.")}
    return sd, meta, extra


def moe_gguf_state_dict(path, cfg):
    """A mixture-of-experts GGUF (written as llama.cpp's converter does) as an HF state dict of float32
    arrays: stacked ffn_*_exps split into per-expert tensors, Q/K un-permuted for llama-arch files."""
    r = gguf.GGUFReader(path)
    arch = gguf_field(r, "general.architecture")
    heads, kv, _ = tiny.dims(cfg)
    router, gate, up, down = tiny.hf_expert_names(cfg)
    per_layer = dict(LAYER_NAMES, **{
        "ffn_gate_inp.weight": router,
        "ffn_gate_inp_shexp.weight": "mlp.shared_expert_gate.weight",
        "ffn_gate_shexp.weight": "mlp.shared_expert.gate_proj.weight",
        "ffn_up_shexp.weight": "mlp.shared_expert.up_proj.weight",
        "ffn_down_shexp.weight": "mlp.shared_expert.down_proj.weight"})
    stacked = {"ffn_gate_exps.weight": gate, "ffn_up_exps.weight": up, "ffn_down_exps.weight": down}
    sd = {}
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        if t.name in GLOBAL_NAMES:
            sd[GLOBAL_NAMES[t.name]] = np.ascontiguousarray(a)
            continue
        _, layer, rest = t.name.split(".", 2)
        p = f"model.layers.{int(layer)}."
        if rest in stacked:
            for e in range(a.shape[0]):
                sd[p + stacked[rest].format(e)] = np.ascontiguousarray(a[e])
            continue
        if arch == "llama" and rest in ("attn_q.weight", "attn_k.weight"):
            a = tiny.interleaved_to_hf(a, heads if rest == "attn_q.weight" else kv)
        sd[p + per_layer[rest]] = np.ascontiguousarray(a)
    return sd


def hf_config_from_gguf(meta, sd):
    arch = meta["general.architecture"]
    p = arch + "."
    heads = meta[p + "attention.head_count"]
    hidden = meta[p + "embedding_length"]
    cfg = {
        "model_type": {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}[arch],
        "vocab_size": int(sd["model.embed_tokens.weight"].shape[0]),
        "hidden_size": hidden, "intermediate_size": meta[p + "feed_forward_length"],
        "num_hidden_layers": meta[p + "block_count"], "num_attention_heads": heads,
        "num_key_value_heads": meta.get(p + "attention.head_count_kv", heads),
        "head_dim": meta.get(p + "attention.key_length", hidden // heads),
        "max_position_embeddings": meta[p + "context_length"],
        "rms_norm_eps": float(meta[p + "attention.layer_norm_rms_epsilon"]),
        "rope_theta": float(meta.get(p + "rope.freq_base", 10000.0)),
        "tie_word_embeddings": "lm_head.weight" not in sd,
        "hidden_act": "silu", "torch_dtype": "float32",
    }
    return cfg


# ---- model construction -----------------------------------------------------------------------

def build_model(config_dict, state_dict):
    """A transformers model from a config dict and a numpy state dict (float32, eager)."""
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.for_model(**config_dict)
    cfg._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="eager")
    tensors = {k: torch.from_numpy(np.array(v)) for k, v in state_dict.items()}
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    allowed_missing = {"lm_head.weight"} if cfg.tie_word_embeddings else set()
    if set(missing) - allowed_missing or unexpected:
        raise SystemExit(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    if cfg.tie_word_embeddings:
        model.tie_weights()
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    model.eval()
    return model


def load_hf_dir(path):
    from transformers import AutoModelForCausalLM
    model, info = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                                       output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys",
                                                        "error_msgs")}
    if bad:
        raise SystemExit(f"{path}: loading problems {bad}")
    model.eval()
    return model


def check_rope(model, cfg):
    """The config transformers parsed must give the rope we meant."""
    rp = getattr(model.config, "rope_parameters", None) or {}
    if "full_attention" in rp:  # per layer type (Gemma 3)
        for t, want in cfg["rope_parameters"].items():
            for k, v in want.items():
                assert rp[t].get(k) == v, (t, rp[t], want)
        return
    theta = tiny.rope_theta(cfg)
    assert abs(rp.get("rope_theta", getattr(model.config, "rope_theta", None)) - theta) < 1e-6 * theta, rp
    rs = cfg.get("rope_scaling") or {}
    want_type = {"su": "longrope"}.get(rs.get("rope_type", rs.get("type")), rs.get("rope_type", rs.get("type", "default")))
    assert rp.get("rope_type", "default") == want_type, (rp, want_type)
    if tiny.long_rope(cfg):
        check_long_rope(model, cfg)


def check_long_rope(model, cfg):
    """transformers' LongRoPE tables are ours: inv_freq = theta^(-2i/d) / factor_i (short list up to
    the original context, long beyond it), cos / sin x sqrt(1 + ln(ctx / orig) / ln(orig))."""
    import math
    rot = model.model.rotary_emb
    d = tiny.rope_dims(cfg)
    orig, ctx = cfg["original_max_position_embeddings"], cfg["max_position_embeddings"]
    want_scale = math.sqrt(1 + math.log(ctx / orig) / math.log(orig))
    assert abs(rot.attention_scaling - want_scale) < 1e-12, (rot.attention_scaling, want_scale)
    base = 1.0 / (tiny.rope_theta(cfg) ** (np.arange(0, d, 2, dtype=np.float64) / d))
    for n, key in ((orig, "short_factor"), (orig + 1, "long_factor")):
        pos = torch.arange(n).unsqueeze(0)
        x = torch.zeros(1, n, 1)
        cos, _ = rot(x, pos)
        want = base / np.array(cfg["rope_scaling"][key], dtype=np.float64)
        angle = (n - 1) * want
        got = cos[0, -1, : d // 2].double().numpy()
        np.testing.assert_allclose(got, np.cos(angle) * want_scale, atol=2e-4)
    log(f"  longrope: {d} rotated dims, attention factor {want_scale:.6f}, short list up to position {orig}, long beyond")


def inv_freq_of(model):
    for name, buf in model.named_buffers():
        if name.endswith("rotary_emb.inv_freq"):
            return buf.detach().double().numpy()
    raise SystemExit("no rotary_emb.inv_freq buffer")


# ---- running ----------------------------------------------------------------------------------

@torch.no_grad()
def forward_logits(model, ids):
    out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
    return out.logits[0].float().numpy()


@torch.no_grad()
def greedy(model, ids, n):
    """n greedy tokens (no stop token), each from a full forward pass; and each step's margin."""
    seq, new, margins = list(ids), [], []
    for _ in range(n):
        last = forward_logits(model, seq)[-1]
        order = np.argsort(-last, kind="stable")
        new.append(int(order[0]))
        margins.append(float(last[order[0]] - last[order[1]]))
        seq.append(int(order[0]))
    return new, margins


def write_prompt(set_dir, set_name, prompt, logits, greedy_ids, greedy_margins, weights, common,
                 positions=None, topk=20, tokenizer=None):
    """Writes <prompt>.f32 (rows = positions) and <prompt>.json."""
    T, V = logits.shape
    positions = list(range(T)) if positions is None else positions
    full = logits[positions]
    order = np.argsort(-logits, axis=1, kind="stable")
    top1 = order[:, 0]
    margin = logits[np.arange(T), order[:, 0]] - logits[np.arange(T), order[:, 1]]
    lrange = float(logits.max() - logits.min())
    tols = tolerances(set_name, weights, lrange, [float(m) for m in margin], greedy_margins)
    fname = f"{prompt['name']}.f32"
    full.astype("<f4").tofile(os.path.join(set_dir, fname))
    doc = {
        "format": FORMAT,
        "reference_set": set_name,
        "prompt": prompt["name"],
        "prompt_text": prompt.get("text"),
        "prompt_ids": [int(i) for i in prompt["ids"]],
        "num_positions": T,
        "vocab_size": V,
        "logits_file": fname,
        "logits_dtype": "float32",
        "logits_byte_order": "little",
        "logits_shape": [len(positions), V],
        "logits_positions": [int(p) for p in positions],
        "logit_range": lrange,
        "top1": [int(i) for i in top1],
        "top1_margin": [float(m) for m in margin],
        "topk": None,
        "greedy": {
            "new_tokens": len(greedy_ids),
            "ids": greedy_ids,
            "margins": greedy_margins,
            "stop_on_eos": False,
            "text": tokenizer(greedy_ids) if tokenizer else None,
        },
    }
    doc["tolerance_rule"] = TOLERANCE_RULE
    doc.update(tols)
    if len(positions) < T:
        k = min(topk, V)
        ids = order[:, :k]
        doc["topk"] = {"k": k, "ids": ids.tolist(),
                       "logits": [[float(x) for x in row] for row in np.take_along_axis(logits, ids, 1)]}
    doc.update(common)
    dump_prompt_json(os.path.join(set_dir, f"{prompt['name']}.json"), doc)
    t = tols["tolerance"]
    return {"name": prompt["name"], "length": T, "exempt": len(t["top1_exempt_positions"]),
            "greedy_prefix": t["greedy_must_match_prefix"],
            "min_margin": float(margin.min()), "range": lrange}


def run_set(set_name, model, prompts, weights, checkpoints, index, versions, **kw):
    set_dir = os.path.join(REF, set_name)
    if os.path.isdir(set_dir):
        shutil.rmtree(set_dir)
    os.makedirs(set_dir)
    common = {"checkpoints": checkpoints, "versions": versions,
              "computation": {"library": "transformers", "dtype": "float32", "attn_implementation": "eager",
                              "device": "cpu"}}
    summary = []
    positions_by_prompt = kw.pop("positions", {})
    greedy_n = kw.pop("greedy_tokens", GREEDY_TOKENS)
    for p in prompts:
        logits = forward_logits(model, p["ids"])
        g_ids, g_margins = greedy(model, p["ids"], greedy_n)
        summary.append(write_prompt(set_dir, set_name, p, logits, g_ids, g_margins, weights, common,
                                    positions=positions_by_prompt.get(p["name"]), **kw))
    index["sets"][set_name] = {"weights": weights,
                               "checkpoints": checkpoints, "prompts": [p["name"] for p in prompts]}
    for s in summary:
        log(f"  {set_name}/{s['name']}: {s['length']} positions, range {s['range']:.2f}, min top-1 margin "
            f"{s['min_margin']:.4f}, exempt {s['exempt']}, greedy must-match {s['greedy_prefix']}/{greedy_n}")
    return summary


# ---- prompts ----------------------------------------------------------------------------------

def tiny_prompts(vocab):
    rng = np.random.default_rng(7)
    out = []
    for n in (1, 7, 33, 100):
        ids = [1] + [int(x) for x in rng.integers(3, vocab, size=n - 1)]
        out.append({"name": f"p{n}", "ids": ids})
    return out


def long_rope_prompts(orig):
    """One prompt a token past LongRoPE's original context (the long regime's first length)."""
    rng = np.random.default_rng(11)
    return [{"name": f"p{orig + 1}", "ids": [1] + [int(x) for x in rng.integers(3, tiny.VOCAB, size=orig)]}]


STORY = ("Once upon a time, there was a little dog named Max. Max liked to run in the park with his friend, "
         "a small girl called Sue. One day, the sun was hot and Max was very thirsty. Sue gave him some cold "
         "water from her bottle. Max was happy and wagged his tail. Then they saw a big red ball under a tree. "
         "Max ran to get it, but a cat was sitting next to the ball. The cat looked at Max and said, \"This is "
         "my ball.\" Max was sad, but Sue had an idea.")


def stories_prompts(shared):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=os.path.join(shared, "models", "stories260K", "tok512.model"))
    story = [1] + sp.encode(STORY)
    assert len(story) >= 100, len(story)
    prompts = [
        {"name": "bos", "ids": [1], "text": ""},
        {"name": "once", "ids": [1] + sp.encode("Once upon a time"), "text": "Once upon a time"},
        {"name": "story33", "ids": story[:33], "text": sp.decode(story[1:33])},
        {"name": "story100", "ids": story[:100], "text": sp.decode(story[1:100])},
    ]
    return prompts, (lambda ids: sp.decode(ids))


def smollm2_prompts(models_dir):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(models_dir, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    chat = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                   add_generation_prompt=True, tokenize=False)
    long_ids = tok.encode(STORY)[:100]
    assert len(long_ids) == 100
    prompts = [
        {"name": "one", "ids": tok.encode("The"), "text": "The"},
        {"name": "text10", "ids": tok.encode("The quick brown fox jumps over the lazy dog."),
         "text": "The quick brown fox jumps over the lazy dog."},
        {"name": "chat", "ids": tok.encode(chat), "text": chat},
        {"name": "long", "ids": long_ids, "text": tok.decode(long_ids)},
    ]
    assert len(prompts[0]["ids"]) == 1
    return prompts, (lambda ids: tok.decode(ids))


# ---- cross-check against transformers' GGUF loader --------------------------------------------

def transformers_gguf_state(path):
    from transformers import AutoModelForCausalLM
    try:
        m = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                 dtype=torch.float32)
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__}: {str(e)[:200]}"
    return {k: v.detach().numpy() for k, v in m.state_dict().items()}, None


def cross_check(path, ours):
    theirs, err = transformers_gguf_state(path)
    if theirs is None:
        log(f"  cross-check {os.path.basename(path)}: transformers cannot load it ({err}); skipped")
        return False
    for k, v in ours.items():
        if k not in theirs:
            raise SystemExit(f"cross-check {path}: transformers has no {k}")
        if not np.array_equal(theirs[k], v):
            raise SystemExit(f"cross-check {path}: {k} differs from transformers' GGUF loader "
                             f"(max diff {np.abs(theirs[k] - v).max()})")
    log(f"  cross-check {os.path.relpath(path, ROOT) if path.startswith(ROOT) else path}: "
        f"{len(ours)} tensors equal to transformers' GGUF loader")
    return True


def phi3_gguf_state_dict(path):
    """A Phi-3 GGUF (llama.cpp's converter's names) as an HF state dict of float32 arrays."""
    r = gguf.GGUFReader(path)
    per_layer = {"attn_norm.weight": "input_layernorm.weight", "attn_qkv.weight": "self_attn.qkv_proj.weight",
                 "attn_output.weight": "self_attn.o_proj.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
                 "ffn_up.weight": "mlp.gate_up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight"}
    sd = {}
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        if t.name in GLOBAL_NAMES:
            sd[GLOBAL_NAMES[t.name]] = np.ascontiguousarray(a)
        elif t.name.startswith("blk."):
            _, layer, rest = t.name.split(".", 2)
            sd[f"model.layers.{int(layer)}.{per_layer[rest]}"] = np.ascontiguousarray(a)
    return sd


def check_gemma_gguf(path, cfg, hf_sd):
    """A Gemma or MoE GGUF holds exactly the converter's form of the HF weights (Gemma: norms as 1 + w;
    MoE: experts stacked; llama.cpp's names); transformers' own GGUF loader is not consulted (its
    mapping of these is not the reference)."""
    r = gguf.GGUFReader(path)
    got = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32) for t in r.tensors}
    want = dict(tiny.gguf_tensors(cfg, hf_sd))
    if set(got) != set(want):
        raise SystemExit(f"{path}: tensors {sorted(set(got) ^ set(want))} differ from the converter's set")
    for k, v in want.items():
        if not np.array_equal(got[k].reshape(v.shape), v):
            raise SystemExit(f"{path}: {k} is not the converter's form of the HF weight")
    log(f"  {os.path.basename(path)}: {len(want)} tensors are the converter's form of the HF weights")


# ---- main -------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=os.path.join(ROOT, "models"))
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--only", nargs="*", help="reference sets to (re)make; default all")
    ap.add_argument("--skip-smollm2", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--retolerance", action="store_true",
                    help="only recompute the tolerance blocks of the committed JSON files (no model runs)")
    args = ap.parse_args()
    if args.retolerance:
        retolerance()
        return
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    import transformers
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "gguf": tiny._version("gguf"), "numpy": np.__version__, "python": sys.version.split()[0]}
    want = (lambda name: args.only is None or name in args.only)
    index_path = os.path.join(REF, "index.json")
    index = {"format": FORMAT, "sets": {}}
    if os.path.exists(index_path) and args.only:
        with open(index_path) as f:
            index = json.load(f)
    index["format"] = FORMAT
    index["roots"] = {"models": "PAGODA_MODELS_DIR (default <repo>/models)",
                      "shared": "PAGODA_SHARED_DIR (default <repo>/../shared)"}
    t0 = time.time()

    # Tiny models.
    with open(tiny.MODELS_JSON) as f:
        manifest = json.load(f)
    for rel, meta in ((r, m) for mm in manifest["models"].values() for r, m in mm["files"].items()):
        p = os.path.join(args.models, rel)
        if not os.path.exists(p) or sha256(p) != meta["sha256"]:
            raise SystemExit(f"{p} missing or differs from models.json: run scripts/make_test_models.sh first")
    prompts = tiny_prompts(tiny.VOCAB)
    for name, m in manifest["models"].items():
        cfg = tiny.MODELS[name]["config"]
        hf_dir = os.path.join(args.models, "tiny", name)
        hf_model = load_hf_dir(hf_dir)
        check_rope(hf_model, cfg)
        hf_sd = {k: v.detach().numpy() for k, v in hf_model.state_dict().items()}
        if cfg["model_type"] in tiny.MOE:
            # transformers holds the experts fused ([E, 2F, D] modules): compare in checkpoint names.
            from safetensors.numpy import load_file
            hf_sd = load_file(os.path.join(hf_dir, "model.safetensors"))
        by_ref = {}
        for c in m["checkpoints"]:
            c = dict(c, root="models", sha256=m["files"].get(c["path"], {}).get("sha256"))
            by_ref.setdefault(c["reference"], []).append(c)
        for ref_name, cps in by_ref.items():
            weights = cps[0]["weights"]
            if ref_name == name:
                model = hf_model
                for c in cps:
                    if c["format"] != "gguf":
                        continue
                    path = os.path.join(args.models, c["path"])
                    if cfg["model_type"] in tiny.GEMMA + tiny.MOE + tiny.PHI3:
                        check_gemma_gguf(path, cfg, hf_sd)
                        if cfg["model_type"] in tiny.MOE:
                            sd = moe_gguf_state_dict(path, cfg)
                            for k, v in hf_sd.items():
                                if not np.array_equal(sd[k], v):
                                    raise SystemExit(f"{path}: {k} does not convert back to the HF weights")
                        continue
                    sd, _, extra = gguf_state_dict(path)
                    for k, v in sd.items():
                        if not np.array_equal(v, hf_sd[k]):
                            raise SystemExit(f"{path}: {k} does not convert back to the HF weights")
                    if "rope_freqs.weight" in extra:
                        hd = tiny.dims(cfg)[2]
                        base = 1.0 / (tiny.rope_theta(cfg) ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
                        ours = base / extra["rope_freqs.weight"].astype(np.float64)
                        np.testing.assert_allclose(ours, inv_freq_of(hf_model), rtol=1e-6)
                        log(f"  {name}: rope_freqs.weight reproduces transformers' llama3 inv_freq")
                    log(f"  {name}: {os.path.basename(path)} converts back to the HF weights exactly")
                    cross_check(path, sd)
            else:
                c = cps[0]
                path = os.path.join(args.models, c["path"])
                if c["format"] == "gguf" and cfg["model_type"] in tiny.MOE + tiny.PHI3:
                    # Through from_pretrained: it maps per-expert checkpoint names onto the modules.
                    import tempfile
                    with tempfile.TemporaryDirectory() as tmp:
                        sd = moe_gguf_state_dict(path, cfg) if cfg["model_type"] in tiny.MOE else phi3_gguf_state_dict(path)
                        tiny.write_hf_dir(tmp, cfg, sd, 1)
                        model = load_hf_dir(tmp)
                elif c["format"] == "gguf":
                    sd, _, _ = gguf_state_dict(path)
                    model = build_model(cfg, sd)
                else:
                    model = load_hf_dir(path)  # bf16 weights, upcast to float32 exactly
            if not want(ref_name):
                continue
            log(f"reference set {ref_name} ({weights})")
            # MoE sets add a prompt of one token repeated: every position routes to the same experts.
            set_prompts = prompts + ([{"name": "same16", "ids": [77] * 16}] if cfg["model_type"] in tiny.MOE else [])
            if tiny.long_rope(cfg):
                # transformers picks LongRoPE's list per forward pass by the sequence length, the engine
                # once by its context: prompts whose every forward pass (prompt + 31 greedy tokens) is
                # in the regime of the set's context.
                orig = cfg["original_max_position_embeddings"]
                ctx = cps[0].get("max_model_len", cfg["max_position_embeddings"])
                if ctx <= orig:
                    set_prompts = [p for p in prompts if len(p["ids"]) + GREEDY_TOKENS - 1 <= orig]
                else:
                    set_prompts = [p for p in prompts + long_rope_prompts(orig) if len(p["ids"]) > orig]
            run_set(ref_name, model, set_prompts, weights, cps, index, versions)

    # stories260K (real, f32 GGUF, llama arch: interleaved Q/K).
    stories = os.path.join(args.shared, "models", "stories260K", "stories260K.gguf")
    if want("stories260K"):
        sd, meta, _ = gguf_state_dict(stories)
        cfg = hf_config_from_gguf(meta, sd)
        model = build_model(cfg, sd)
        cross_check(stories, sd)
        sp_prompts, decode = stories_prompts(args.shared)
        log("reference set stories260K (f32)")
        cps = [{"root": "shared", "path": "models/stories260K/stories260K.gguf", "format": "gguf", "weights": "f32",
                "reference": "stories260K", "sha256": sha256(stories)}]
        run_set("stories260K", model, sp_prompts, "f32", cps, index, versions, tokenizer=decode)
        with open(os.path.join(REF, "stories260K", "once.json")) as f:
            text = json.load(f)["greedy"]["text"]
        log(f"  stories260K greedy 'Once upon a time' -> {text!r}")
        if not text.startswith(", there was a little girl named Lily."):
            raise SystemExit("stories260K greedy continuation does not begin ', there was a little girl named Lily.'")

    # SmolLM2-135M-Instruct Q4_1 (token_embd Q8_0), dequantized.
    smol = os.path.join(args.models, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if want("smollm2") and not args.skip_smollm2:
        if not os.path.exists(smol):
            raise SystemExit(f"{smol} missing: run scripts/fetch_models.sh")
        sd, meta, _ = gguf_state_dict(smol)
        cfg = hf_config_from_gguf(meta, sd)
        model = build_model(cfg, sd)
        cross_check(smol, sd)
        sm_prompts, decode = smollm2_prompts(args.models)
        positions = {"one": [0], "text10": [0, 4, len(sm_prompts[1]["ids"]) - 1],
                     "chat": [len(sm_prompts[2]["ids"]) - 1], "long": [99]}
        log("reference set smollm2 (q4_1, dequantized)")
        cps = [{"root": "models", "path": "SmolLM2-135M-Instruct.Q4_1.gguf", "format": "gguf", "weights": "q4_1",
                "reference": "smollm2", "sha256": sha256(smol)}]
        run_set("smollm2", model, sm_prompts, "q4_1", cps, index, versions, positions=positions,
                tokenizer=decode)

    with open(index_path, "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    log(f"done in {time.time() - t0:.0f}s; {len(index['sets'])} sets in {index_path}")


if __name__ == "__main__":
    main()
