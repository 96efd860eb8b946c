"""Mixture-of-experts checkpoints through the CLI: `pagoda info` / `memplan` report total and active
parameters and the bytes one token reads; malformed MoE files are clear errors (exit 1, a message
naming the problem), never a crash: expert count 0, top-k above the expert count, stacked expert
tensors of the wrong shape (GGUF), a missing or mistyped per-expert tensor (safetensors).
The malformed files are the tiny models of tools/make_tiny_models.py with one thing changed.
"""
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY = os.environ.get("PAGODA_BINARY", "")
MODELS = pathlib.Path(os.environ.get("PAGODA_MODELS_DIR", ROOT / "models"))
SHARED = pathlib.Path(os.environ.get("PAGODA_SHARED_DIR", ROOT.parent / "shared"))
sys.path.insert(0, str(ROOT / "tools"))
import make_tiny_models as tiny  # noqa: E402


def binary():
    if not BINARY or not os.path.exists(BINARY):
        pytest.skip("PAGODA_BINARY not set")
    return BINARY


def model(rel):
    p = MODELS / "tiny" / rel
    if not p.exists():
        pytest.skip(f"missing {p} (scripts/make_test_models.sh)")
    return p


def run(*args):
    return subprocess.run([binary(), *map(str, args)], capture_output=True, text=True, timeout=120)


def assert_clear_error(proc, phrase):
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, f"exit {proc.returncode} (negative: a signal):\n{out[-3000:]}"
    assert phrase in out, out[-3000:]


def load_ids(*args):
    """Loads the model and runs 3 tokens (dump-layers needs no tokenizer)."""
    return run("dump-layers", "--ids", "1 5 9", *args)


# ---- footprint -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["mixtral", "qwen2-moe", "qwen3-moe", "olmoe"])
def test_info_reports_total_and_active_parameters(name):
    cfg = tiny.MODELS[name]["config"]
    for path in (model(name), model(f"{name}/model-f32.gguf")):
        proc = run("info", "--model", path, "--json")
        assert proc.returncode == 0, proc.stderr
        j = json.loads(proc.stdout)
        E, k, L, H = tiny.num_experts(cfg), cfg["num_experts_per_tok"], cfg["num_hidden_layers"], cfg["hidden_size"]
        inactive = L * (E - k) * 3 * H * tiny.expert_ffn(cfg)
        assert j["parameters"] - j["active_parameters"] == inactive, j
        assert j["config"]["num_experts"] == E and j["config"]["num_experts_per_tok"] == k
        # f32 weights: 4 bytes a parameter; the untied embedding contributes one row per token
        embd = 0 if cfg["tie_word_embeddings"] else (cfg["vocab_size"] - 1) * H
        assert j["bytes_per_token"] == 4 * (j["active_parameters"] - embd), j
        text = run("info", "--model", path).stdout
        assert f"{k} of {E} experts" in text and "read/token" in text, text


def test_memplan_reports_active_parameters_of_a_published_shape():
    proc = run("memplan", "--model", ROOT / "testdata" / "configs" / "qwen3-30b-a3b.json", "--memory", "80GiB", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    j = json.loads(proc.stdout)
    assert abs(j["parameters"] / 1e9 - 30.5) < 0.1 and abs(j["active_parameters"] / 1e9 - 3.3) < 0.1, j
    # bf16: 2 bytes a parameter; the untied embedding contributes one row
    assert j["bytes_per_token"] == 2 * (j["active_parameters"] - (151936 - 1) * 2048), j


# ---- malformed GGUF ------------------------------------------------------------------------------

def patched_u32(tmp_path, src, key, value):
    """`src` with the u32 metadata `key` set to `value` (patched in place)."""
    data = bytearray(src.read_bytes())
    needle = struct.pack("<Q", len(key)) + key.encode()
    at = data.find(needle)
    assert at > 0, key
    at += len(needle)
    (t,) = struct.unpack_from("<I", data, at)
    assert t == 4, f"{key} has GGUF type {t}, expected u32"
    struct.pack_into("<I", data, at + 4, value)
    out = tmp_path / "patched.gguf"
    out.write_bytes(bytes(data))
    return out


@pytest.mark.parametrize("key,value,phrase", [
    ("llama.expert_count", 0, None),  # llama with 0 experts is a dense llama: then its tensors are missing
    ("llama.expert_used_count", 0, "experts per token (top-k) 0 must be in [1, expert count 4]"),
    ("llama.expert_used_count", 5, "experts per token (top-k) 5 must be in [1, expert count 4]"),
])
def test_gguf_expert_counts_are_checked(tmp_path, key, value, phrase):
    f = patched_u32(tmp_path, model("mixtral/model-f32.gguf"), key, value)
    if phrase is None:
        assert_clear_error(load_ids("--model", f, "--out", tmp_path / "d"), "missing tensor 'blk.0.ffn_gate.weight'")
    else:
        assert_clear_error(run("info", "--model", f), phrase)


def test_gguf_zero_experts_of_an_moe_architecture(tmp_path):
    f = patched_u32(tmp_path, model("qwen3-moe/model-f32.gguf"), "qwen3moe.expert_count", 0)
    assert_clear_error(run("info", "--model", f), "expert count (num_experts) must be positive (got 0)")


def write_mixtral_gguf(tmp_path, change):
    """The tiny Mixtral GGUF (f32) with change(tensors) applied to its (name, array) list."""
    if tiny.gguf is None:
        pytest.skip("no gguf package")
    cfg = tiny.MODELS["mixtral"]["config"]
    w = tiny.make_weights("mixtral", cfg)
    tensors = change(tiny.gguf_tensors(cfg, w))
    original = tiny.gguf_tensors
    tiny.gguf_tensors = lambda c, ww: tensors
    try:
        out = tmp_path / "bad.gguf"
        tiny.write_gguf(str(out), "mixtral", cfg, w, "f32", tiny.read_vocab(str(SHARED)))
    finally:
        tiny.gguf_tensors = original
    return out


@pytest.mark.parametrize("tensor,mangle,phrase", [
    ("blk.1.ffn_up_exps.weight", lambda a: a[:3], "tensor 'blk.1.ffn_up_exps.weight' has shape [3, 96, 64] f32, "
                                                  "expected [4, 96, 64] (4 experts of [96, 64])"),
    ("blk.0.ffn_down_exps.weight", lambda a: a[:, :, :64], "tensor 'blk.0.ffn_down_exps.weight' has shape [4, 64, 64]"),
    ("blk.0.ffn_gate_exps.weight", lambda a: a[0], "tensor 'blk.0.ffn_gate_exps.weight' has shape [96, 64]"),
    ("blk.0.ffn_gate_inp.weight", lambda a: a[:2], "tensor 'blk.0.ffn_gate_inp.weight' has shape [2, 64]"),
])
def test_gguf_stacked_expert_shapes_are_checked(tmp_path, tensor, mangle, phrase):
    f = write_mixtral_gguf(tmp_path, lambda ts: [(n, np.ascontiguousarray(mangle(a)) if n == tensor else a) for n, a in ts])
    assert_clear_error(load_ids("--model", f, "--out", tmp_path / "d"), phrase)


def test_gguf_missing_stacked_tensor(tmp_path):
    f = write_mixtral_gguf(tmp_path, lambda ts: [(n, a) for n, a in ts if n != "blk.1.ffn_gate_exps.weight"])
    assert_clear_error(load_ids("--model", f, "--out", tmp_path / "d"),
                       "model is missing tensor 'blk.1.ffn_gate_exps.weight' (expected shape [4, 96, 64])")


# ---- malformed safetensors -----------------------------------------------------------------------

def hf_copy(tmp_path, name, change_weights=None, change_config=None):
    src = model(name)
    d = tmp_path / name
    d.mkdir()
    cfg = json.loads((src / "config.json").read_text())
    if change_config:
        change_config(cfg)
    (d / "config.json").write_text(json.dumps(cfg))
    if change_weights is None:
        (d / "model.safetensors").symlink_to((src / "model.safetensors").resolve())
    else:
        from safetensors.numpy import load_file, save_file
        w = load_file(str(src / "model.safetensors"))
        change_weights(w)
        save_file(w, str(d / "model.safetensors"), metadata={"format": "pt"})
    return d


def test_hf_missing_expert_tensor(tmp_path):
    d = hf_copy(tmp_path, "qwen3-moe", lambda w: w.pop("model.layers.1.mlp.experts.5.up_proj.weight"))
    assert_clear_error(load_ids("--model", d, "--out", tmp_path / "o"),
                       "model is missing tensor 'model.layers.1.mlp.experts.5.up_proj.weight' (expected shape [64, 64])")


def test_hf_expert_of_another_shape(tmp_path):
    def change(w):
        k = "model.layers.0.block_sparse_moe.experts.2.w2.weight"
        w[k] = np.ascontiguousarray(w[k][:, :64])
    d = hf_copy(tmp_path, "mixtral", change)
    assert_clear_error(load_ids("--model", d, "--out", tmp_path / "o"),
                       "tensor 'model.layers.0.block_sparse_moe.experts.2.w2.weight' has shape [64, 64] f32, expected [64, 96]")


def test_hf_expert_of_another_dtype(tmp_path):
    def change(w):
        k = "model.layers.1.mlp.experts.3.gate_proj.weight"
        w[k] = w[k].astype(np.float16)
    d = hf_copy(tmp_path, "olmoe", change)
    assert_clear_error(load_ids("--model", d, "--out", tmp_path / "o"),
                       "expert tensor 'model.layers.1.mlp.experts.3.gate_proj.weight' has dtype f16, expert 0's has f32")


@pytest.mark.parametrize("key,value,phrase", [
    ("num_experts", 0, "expert count (num_experts) must be positive (got 0)"),
    ("num_experts_per_tok", 9, "experts per token (top-k) 9 must be in [1, expert count 8]"),
    ("num_experts_per_tok", None, "missing integer 'num_experts_per_tok'"),
    ("moe_intermediate_size", "64", "'moe_intermediate_size' has type string, expected an integer"),
    ("decoder_sparse_step", 2, "dense MLP layers among the sparse ones"),
])
def test_hf_config_expert_fields_are_checked(tmp_path, key, value, phrase):
    def change(cfg):
        if value is None:
            cfg.pop(key)
        else:
            cfg[key] = value
    d = hf_copy(tmp_path, "qwen3-moe", change_config=change)
    assert_clear_error(run("info", "--model", d), phrase)
