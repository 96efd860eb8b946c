"""`--quantization int4|int8|fp8` (on-line quantization of a 16-bit checkpoint at load) on every
command that loads a model, and `pagoda quantize` (issue 29), through the real binary:
  - each command takes the flag and runs (generate, bench, bench throughput, perplexity, info,
    memplan; serve answers a completion); the weights are the quantized formats (info's bytes by
    dtype) and the memory plan counts their bytes;
  - perplexity KL against the 16-bit model: int8 and fp8 small, int4 larger, all bounded;
  - an unknown value and an already-quantized model are refused with a clear error;
  - memplan on Llama-3-70B's config.json alone with --quantization int4 fits one 80 GB GPU with
    room for KV;
  - `pagoda quantize` writes a directory that loads, and refuses bad input."""
import json
import pathlib
import subprocess
import time

import pytest

from conftest import BINARY, MODELS_DIR, free_port, http

F16 = MODELS_DIR / "tiny" / "llama3" / "model-f16.gguf"
Q8 = MODELS_DIR / "tiny" / "llama3" / "model-q8_0.gguf"
HF = MODELS_DIR / "tiny" / "llama3"
TEXT = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def run(*args, timeout=120):
    p = subprocess.run([BINARY, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


COMMANDS = {
    "generate": ["generate", F16, "-p", "Once upon", "-n", "4", "--temperature", "0", "--device", "cpu"],
    "bench": ["bench", "--model", F16, "-p", "16", "-n", "4", "-t", "1", "--device", "cpu"],
    "bench throughput": ["bench", "throughput", F16, "--num-prompts", "2", "--input-len", "8", "--output-len", "4",
                         "-t", "1", "--device", "cpu"],
    "perplexity": ["perplexity", F16, "-f", TEXT, "-c", "64", "--chunks", "1", "--device", "cpu"],
    "info": ["info", F16],
    "memplan": ["memplan", F16],
}


@pytest.mark.parametrize("cmd", list(COMMANDS))
@pytest.mark.parametrize("mode", ["int4", "int8", "fp8"])
def test_every_command_takes_the_flag(cmd, mode):
    rc, out, err = run(*COMMANDS[cmd], "--quantization", mode)
    assert rc == 0, err


@pytest.mark.parametrize("cmd", list(COMMANDS) + ["serve"])
def test_an_unknown_value_is_refused(cmd):
    args = COMMANDS.get(cmd, ["serve", F16, "--port", str(free_port())])
    rc, out, err = run(*args, "--quantization", "int3", timeout=20)
    assert rc != 0
    assert "int3" in err and "int4" in err and "fp8" in err, err
    assert "serving" not in err


@pytest.mark.parametrize("cmd", ["generate", "perplexity", "info", "memplan"])
def test_an_already_quantized_model_is_refused(cmd):
    args = [Q8 if a == F16 else a for a in COMMANDS[cmd]]
    rc, out, err = run(*args, "--quantization", "int4", timeout=30)
    assert rc != 0
    assert "already quantized" in err and "q8_0" in err, err


def test_info_shows_the_quantized_weights():
    info = {}
    for mode in ["none", "int4", "int8", "fp8"]:
        rc, out, err = run("info", F16, "--json", "--quantization", mode)
        assert rc == 0, err
        info[mode] = json.loads(out)
    by = {m: info[m]["weight_bytes_by_dtype"] for m in info}
    # tiny llama3: 2 layers x 7 linears, embedding and norms f16 / f32 as in the file
    assert by["int4"]["q4_0"]["tensors"] == 14 and by["int8"]["q8_0"]["tensors"] == 14, by
    assert by["fp8"]["f8_e4m3_rows"]["tensors"] == 14, by  # the FP8 rows a device load keeps
    linear_f16 = by["none"]["f16"]["bytes"] - by["int4"].get("f16", {"bytes": 0})["bytes"]
    # a byte a weight and an f32 scale a row (K >= 128: at most 4 / 128 more)
    assert linear_f16 // 2 < by["fp8"]["f8_e4m3_rows"]["bytes"] <= linear_f16 // 2 * 33 // 32, by
    assert by["int4"]["q4_0"]["bytes"] * 32 == linear_f16 // 2 * 18
    assert by["int8"]["q8_0"]["bytes"] * 32 == linear_f16 // 2 * 34
    assert info["int4"]["weight_bytes"] < info["int8"]["weight_bytes"] < info["none"]["weight_bytes"]


def test_memplan_counts_the_quantized_bytes():
    plans = {}
    for mode in ["none", "int4", "int8"]:
        rc, out, err = run("memplan", F16, "--json", "--memory", "1GiB", "--quantization", mode)
        assert rc == 0, err
        plans[mode] = json.loads(out)["plan"]
    info = {}
    for mode in ["int4", "int8"]:
        rc, out, err = run("info", F16, "--json", "--quantization", mode)
        info[mode] = json.loads(out)["weight_bytes"]
        assert plans[mode]["weights"] == info[mode], (plans[mode]["weights"], info[mode])
    assert plans["int4"]["weights"] < plans["int8"]["weights"] < plans["none"]["weights"]
    assert plans["int4"]["kv_tokens"] >= plans["none"]["kv_tokens"]


def test_perplexity_kl_against_the_16bit_model(tmp_path):
    base = tmp_path / "f16.kl"
    rc, out, err = run("perplexity", F16, "-f", TEXT, "-c", 64, "--chunks", 4, "--device", "cpu", "--kv-dtype", "f32",
                       "--json", "--save-logits", base)
    assert rc == 0, err
    kl = {}
    for mode in ["int4", "int8", "fp8"]:
        rc, out, err = run("perplexity", F16, "-f", TEXT, "-c", 64, "--chunks", 4, "--device", "cpu", "--kv-dtype", "f32",
                           "--json", "--kl-base", base, "--quantization", mode)
        assert rc == 0, err
        kl[mode] = json.loads(out)["kl"]
    print("KL against the f16 model:", {m: (k["mean"], k["top1_agreement"]) for m, k in kl.items()})
    assert kl["int8"]["mean"] < 0.02 and kl["fp8"]["mean"] < 0.02, kl
    assert kl["int8"]["mean"] < kl["int4"]["mean"] < 0.3, kl
    assert kl["int8"]["top1_agreement"] >= 0.9 and kl["int4"]["top1_agreement"] >= 0.6, kl


def test_serve_runs_the_quantized_model():
    port = free_port()
    p = subprocess.Popen([BINARY, "serve", F16, "--port", str(port), "--quantization", "int4", "--device", "cpu", "-t", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                status, _, body = http("GET", f"http://127.0.0.1:{port}/health")
                if status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        status, _, body = http("POST", f"http://127.0.0.1:{port}/v1/completions",
                            {"prompt": "Once upon", "max_tokens": 4, "temperature": 0})
        assert status == 200, body
        assert json.loads(body)["usage"]["completion_tokens"] == 4
    finally:
        p.terminate()
        out = p.communicate(timeout=30)[0]
    assert "quantization int4" in out or "--quantization int4" in out, out[-2000:]


LLAMA3_70B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
    "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "hidden_act": "silu", "bos_token_id": 128000, "eos_token_id": 128001,
}


def test_memplan_llama3_70b_int4_fits_one_80gb_gpu(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA3_70B))
    rc, out, err = run("memplan", cfg, "--memory", "80GB", "--max-model-len", "8192", "--json", "--cpu-offload-gb", "0")
    assert rc != 0 and not json.loads(out)["fits"], "bf16 70B must not fit 80 GB resident"
    rc, out, err = run("memplan", cfg, "--memory", "80GB", "--max-model-len", "8192", "--json")
    assert rc == 0 and json.loads(out)["plan"]["offloaded_weights"] > 0, "auto offload: bf16 70B streams layers"
    rc, out, err = run("memplan", cfg, "--memory", "80GB", "--max-model-len", "8192", "--json", "--quantization", "int4")
    assert rc == 0, out + err
    j = json.loads(out)
    plan = j["plan"]
    print("Llama-3-70B int4 on 80 GB:", {k: plan[k] for k in ("weights", "kv_cache", "kv_tokens", "total", "budget")})
    # linears 68.45e9 parameters x 18 / 32 bytes + embedding and lm_head 2 x 1.05e9 x 2 bytes (bf16)
    assert abs(plan["weights"] - (68451041280 * 18 // 32 + 2 * 128256 * 8192 * 2 + 161 * 8192 * 2)) < 1e6, plan["weights"]
    assert plan["kv_tokens"] >= 4 * 8192, plan  # room for KV: several full-length sequences
    assert plan["total"] <= plan["budget"] <= 80e9


MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8,
    "num_experts_per_tok": 2, "vocab_size": 32000, "max_position_embeddings": 32768, "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


def test_memplan_says_what_cuda_holds_of_quantized_experts(tmp_path):
    """The CUDA executor holds a mixture of experts' experts in their blocks where the grouped MoE
    kernels read the format (int4: Q4_0) and in bf16 otherwise (fp8 rows): memplan says which, and
    its JSON's cuda_weight_bytes adds the difference (none for Q4_0, bf16 or a dense model)."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(MIXTRAL_8X7B))
    rc, out, err = run("memplan", cfg, "--memory", "200GB", "--quantization", "int4")
    assert rc == 0, out + err
    assert "are held in bf16" not in out, out
    rc, out, err = run("memplan", cfg, "--memory", "200GB", "--quantization", "int4", "--json")
    j = json.loads(out)
    assert j["cuda_weight_bytes"] == j["plan"]["weights"], "Q4_0 experts stay in their blocks"
    rc, out, err = run("memplan", cfg, "--memory", "200GB", "--quantization", "fp8")
    assert rc == 0, out + err
    assert "on CUDA the experts in f8_e4m3_rows are held in bf16" in out, out
    rc, out, err = run("memplan", cfg, "--memory", "200GB", "--quantization", "fp8", "--json")
    j = json.loads(out)
    experts = 8 * 3 * 4096 * 14336  # parameters a layer
    scales = 8 * (2 * 14336 + 4096) * 4  # fp8 rows: an f32 scale a row
    assert j["cuda_weight_bytes"] - j["plan"]["weights"] == 32 * (experts * 2 - experts - scales), j
    rc, out, err = run("memplan", cfg, "--memory", "200GB", "--json")
    j = json.loads(out)
    assert j["cuda_weight_bytes"] == j["plan"]["weights"], "bf16 experts: nothing added"
    dense = tmp_path / "dense"
    dense.mkdir()
    (dense / "config.json").write_text(json.dumps(LLAMA3_70B))
    rc, out, err = run("memplan", dense, "--memory", "80GB", "--quantization", "int4", "--json")
    j = json.loads(out)
    assert j["cuda_weight_bytes"] == j["plan"]["weights"], "a dense model: nothing added"


def test_memplan_counts_the_2of4_layouts(tmp_path):
    """A checkpoint that declares 2:4 sparsity (compressed-tensors sparsity_config, stored dense): on
    CUDA its decoder linears are held in two 2:4 layouts instead of bf16 (ours and cuSPARSELt's,
    9/16 + at most 10/16 of the bytes): memplan notes it and cuda_weight_bytes adds 3/16 of the
    layers' linear bytes; another sparsity structure adds nothing."""
    cfg = dict(LLAMA3_70B, num_hidden_layers=2)
    cfg["quantization_config"] = {"quant_method": "compressed-tensors", "format": "dense",
                                  "sparsity_config": {"format": "dense", "sparsity_structure": "2:4",
                                                      "targets": ["Linear"], "ignore": ["lm_head"]}}
    d = tmp_path / "sparse"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    rc, out, err = run("memplan", d, "--memory", "80GB")
    assert rc == 0, out + err
    assert "declares 2:4 sparsity; it runs dense" in out and "2:4 sparse" in out, out  # the default: dense
    rc, out, err = run("memplan", d, "--memory", "80GB", "--json")
    j = json.loads(out)
    assert j["cuda_weight_bytes"] == j["plan"]["weights"], "--cuda-sparsity off (the default) holds bf16"
    rc, out, err = run("memplan", d, "--memory", "80GB", "--cuda-sparsity", "auto")
    assert rc == 0 and "with --cuda-sparsity auto its linears" in out, out + err
    rc, out, err = run("memplan", d, "--memory", "80GB", "--json", "--cuda-sparsity", "auto")
    j = json.loads(out)
    H, I, kv = 8192, 28672, 8 * 128
    linears = 2 * (H * (H + 2 * kv) + H * H + 3 * H * I)  # q/k/v, o, gate/up/down of 2 layers
    assert j["config"]["sparsity"] == "2:4", j["config"]
    assert j["cuda_weight_bytes"] - j["plan"]["weights"] == linears * 2 * 3 // 16, j
    cfg["quantization_config"]["sparsity_config"]["sparsity_structure"] = "unstructured"
    (d / "config.json").write_text(json.dumps(cfg))
    rc, out, err = run("memplan", d, "--memory", "80GB", "--json", "--cuda-sparsity", "auto")
    j = json.loads(out)
    assert j["cuda_weight_bytes"] == j["plan"]["weights"], "unstructured sparsity: a dense checkpoint"
    cfg["quantization_config"]["sparsity_config"]["format"] = "sparse-24-bitmask"
    (d / "config.json").write_text(json.dumps(cfg))
    rc, out, err = run("memplan", d, "--memory", "80GB")
    assert rc != 0 and "sparse-24-bitmask" in out + err, out + err


def test_quantize_writes_a_directory_that_loads(tmp_path):
    out = tmp_path / "gptq"
    rc, o, err = run("quantize", HF, out, "--format", "gptq", "--bits", "4", "--group-size", "128")
    assert rc == 0, err
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["quantization_config"]["quant_method"] == "gptq" and cfg["quantization_config"]["bits"] == 4
    rc, o, err = run("info", out, "--json")
    assert rc == 0, err
    assert json.loads(o)["weight_bytes_by_dtype"]["q4_0"]["tensors"] == 14
    for args, needle in [
        (["quantize", HF, tmp_path / "x", "--format", "gptq4"], "gptq4"),
        (["quantize", HF, tmp_path / "x", "--format", "awq", "--bits", "8"], "4-bit"),
        (["quantize", HF, tmp_path / "x", "--format", "gptq", "--group-size", "100"], "multiple of 32"),
        (["quantize", F16, tmp_path / "x", "--format", "gptq"], "not a Hugging Face model directory"),
        (["quantize", out, tmp_path / "x", "--format", "gptq"], "already quantized"),
        (["quantize", HF, out, "--format", "gptq"], "not an empty directory"),
        (["quantize", HF, tmp_path / "x", "--format", "fp8", "--asym"], "fp8"),
    ]:
        rc, o, err = run(*args, timeout=30)
        assert rc != 0 and needle in err, (args, err)


def test_the_plan_cache_keeps_quantized_and_plain_weights_apart(tmp_path):
    # The engine plan holds the CPU's packed weights: a plan written without --quantization must not
    # be reused by an int4 start (and the other way round); each mode reuses its own.
    args = ["generate", F16, "-p", "Once upon", "-n", "4", "--temperature", "0", "--device", "cpu",
            "--plan-cache", tmp_path]
    outs = {}
    for mode in ["none", "none", "int4", "int4"]:
        rc, out, err = run(*args, "--quantization", mode)
        assert rc == 0, err
        outs.setdefault(mode, []).append((out, "reusing" in err))
    assert [r for _, r in outs["none"]] == [False, True], outs["none"]
    assert [r for _, r in outs["int4"]] == [False, True], outs["int4"]
    assert outs["none"][0][0] == outs["none"][1][0] and outs["int4"][0][0] == outs["int4"][1][0]
    assert len(list(tmp_path.glob("*.plan"))) == 2
