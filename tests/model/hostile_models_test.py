"""Hostile model files (issue 25): every malformed hyper-parameter is a clear error with exit code 1,
never a signal (SIGFPE on a zero divisor), std::bad_alloc or a huge allocation.

- Hugging Face config.json: the committed seeds fuzz/seeds/hf_config_fuzz/*.json (the tiny llama3
  config with one field broken each), loaded by `pagoda info` from a model directory.
- GGUF: the hostile seeds of fuzz/make_seeds.py, and stories260K.gguf with its context length
  patched in place: 2^24 positions must be refused by the memory plan before anything is
  allocated for them (checked under a 2 GiB address-space limit, where a RoPE table of that
  length alone would not fit), and --max-model-len bounds what is built for such a file.
"""
import importlib.util
import os
import pathlib
import resource
import struct
import subprocess
import tempfile
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY = os.environ.get("PAGODA_BINARY", "")
SHARED = pathlib.Path(os.environ.get("PAGODA_SHARED_DIR", ROOT.parent / "shared"))
MODELS = pathlib.Path(os.environ.get("PAGODA_MODELS_DIR", ROOT / "models"))
STORIES = SHARED / "models" / "stories260K" / "stories260K.gguf"
HF_SEEDS = ROOT / "fuzz" / "seeds" / "hf_config_fuzz"

# seed -> a phrase the error must contain
HF_EXPECTED = {
    "heads_zero.json": "num_attention_heads must be positive",
    "kv_heads_zero.json": "num_kv_heads must be positive",
    "heads_negative.json": "num_attention_heads must be positive",
    "heads_not_dividing_hidden.json": "not a multiple of num_attention_heads",
    "kv_not_dividing.json": "not a multiple of num_kv_heads",
    "context_huge.json": "max_position_embeddings (context length) = 4294967295 is implausibly large",
    "context_2_63.json": "implausibly large",
    "hidden_float.json": "'hidden_size' has type float, expected an integer",
    "layers_string.json": "'num_hidden_layers' has type string, expected an integer",
    "eps_string.json": "'rms_norm_eps' has type string, expected a number",
    "theta_negative.json": "rope_theta -1 must be positive",
    "llama3_factors_inverted.json": "low_freq_factor",
    "vocab_huge.json": "vocab_size = 1099511627776 is implausibly large",
    "head_dim_odd.json": "head_dim 15 must be even",
    # found by hf_config_fuzz: an uncaught nlohmann type_error (std::terminate) before
    "model_type_int.json": "'model_type' has type number, expected a string",
    # found by hf_config_fuzz: a float beyond int64 converted to an integer (undefined behaviour)
    "llama3_original_max_huge.json": "'original_max_position_embeddings' has type float, expected an integer",
}
GGUF_EXPECTED = {
    "ctx_u32_max.gguf": "context length) = 4294967295 is implausibly large",
    "ctx_2_28.gguf": "context length) = 268435456 is implausibly large",
    "heads_zero.gguf": "attention.head_count must be positive",
    "kv_heads_zero.gguf": "num_kv_heads must be positive",
    "heads_not_dividing.gguf": "not a multiple of attention.head_count",
    "block_count_float.gguf": "'llama.block_count' has type float32, expected an integer",
    "ctx_negative_i64.gguf": "must be positive (got -5)",
}


def binary():
    if not BINARY or not os.path.exists(BINARY):
        pytest.skip("PAGODA_BINARY not set")
    return BINARY


def run(args, address_space=None, timeout=120):
    """CompletedProcess-like result with .max_rss_mib (the child's peak resident memory)."""
    def limit():
        if address_space:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen([binary(), *map(str, args)], stdout=out, stderr=subprocess.STDOUT, preexec_fn=limit)
        deadline = time.time() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.time() > deadline:
                proc.kill()
                raise AssertionError(f"{args} did not finish in {timeout}s")
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        proc.stdout = out.read().decode(errors="replace")
        proc.max_rss_mib = usage.ru_maxrss / 1024.0
        return proc


def assert_clear_error(proc, phrase):
    assert proc.returncode == 1, f"exit {proc.returncode} (negative: killed by a signal):\n{proc.stdout[-3000:]}"
    assert phrase in proc.stdout, proc.stdout[-3000:]
    assert "bad_alloc" not in proc.stdout and "terminate" not in proc.stdout


def test_every_hf_seed_is_listed():
    hostile = {p.name for p in HF_SEEDS.glob("*.json")} - {"llama3_tiny.json", "qwen3_tiny.json",
                                                              "mistral_rope_parameters.json"}
    assert hostile == set(HF_EXPECTED)


def hf_dir(tmp_path, seed):
    """A model directory: the seed as config.json beside the tiny llama3 model's weights."""
    weights = MODELS / "tiny" / "llama3" / "model.safetensors"
    if not weights.exists():
        pytest.skip(f"missing {weights} (scripts/make_test_models.sh)")
    (tmp_path / "config.json").write_bytes((HF_SEEDS / seed).read_bytes())
    (tmp_path / "model.safetensors").symlink_to(weights.resolve())
    return tmp_path


@pytest.mark.parametrize("seed", sorted(HF_EXPECTED))
def test_hf_config_hostile_values_are_clear_errors(tmp_path, seed):
    assert_clear_error(run(["info", "--model", hf_dir(tmp_path, seed)]), HF_EXPECTED[seed])


def test_hf_config_valid_seed_loads(tmp_path):
    proc = run(["info", "--model", hf_dir(tmp_path, "llama3_tiny.json")])
    assert proc.returncode == 0, proc.stdout


def make_seeds_module():
    spec = importlib.util.spec_from_file_location("make_seeds", ROOT / "fuzz" / "make_seeds.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("seed", sorted(GGUF_EXPECTED))
def test_gguf_hostile_seeds_are_clear_errors(tmp_path, seed):
    data = make_seeds_module().gguf_seeds(str(SHARED))[seed]
    f = tmp_path / seed
    f.write_bytes(data)
    assert_clear_error(run(["info", "--model", f]), GGUF_EXPECTED[seed])


def patched_stories(tmp_path, key, value):
    """stories260K.gguf with the u32 metadata `key` set to `value` (patched in place)."""
    if not STORIES.exists():
        pytest.skip(f"missing {STORIES}")
    data = bytearray(STORIES.read_bytes())
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


@pytest.mark.parametrize("value,phrase", [(0xFFFFFFFF, "implausibly large"), (1 << 28, "implausibly large"),
                                          (0, "must be positive")])
def test_gguf_context_length_refused_without_allocating(tmp_path, value, phrase):
    f = patched_stories(tmp_path, "llama.context_length", value)
    proc = run(["generate", "--model", f, "--prompt", "Once", "-n", "2"], address_space=2 << 30)
    assert_clear_error(proc, phrase)


def test_gguf_long_context_refused_by_the_plan_before_the_rope_table(tmp_path):
    # 2^24 positions pass validation; the KV cache for one such sequence does not fit the CPU
    # default budget, so the memory plan refuses it. Before, the RoPE table for 2^24 positions
    # (512 MiB for stories260K's 8-wide heads) was built and filled first.
    f = patched_stories(tmp_path, "llama.context_length", 1 << 24)
    proc = run(["generate", "--model", f, "--prompt", "Once", "-n", "2"], address_space=2 << 30)
    assert_clear_error(proc, "--max-model-len")
    assert proc.max_rss_mib < 256, f"peak RSS {proc.max_rss_mib:.0f} MiB before refusing"
    # The same file with a bounded --max-model-len runs (the RoPE table has 256 positions).
    ok = run(["generate", "--model", f, "--prompt", "Once", "-n", "2", "--max-model-len", 256],
             address_space=2 << 30)
    assert ok.returncode == 0, ok.stdout[-3000:]


def test_gguf_tokenizer_key_of_wrong_type(tmp_path):
    ms = make_seeds_module()
    kvs = ms.llama_kvs() + [("tokenizer.ggml.model", ms.STR, "llama"),
                            ("tokenizer.ggml.tokens", ms.ARR, (ms.I32, [1, 2, 3]))]
    f = tmp_path / "tokens_int.gguf"
    f.write_bytes(ms.gguf_file(kvs, [("token_embd.weight", [8, 16], "f32")]))
    proc = run(["tokenize", "--model", f, "--text", "x"])
    assert_clear_error(proc, "tokenizer.ggml.tokens has type array of int32, expected a non-empty array of strings")
