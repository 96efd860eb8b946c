"""`--load-format dummy` (random weights of a config.json's shape, no checkpoint) through the real
binary, on a tiny Llama config written here:
  - `pagoda bench` on the config's directory and on the config.json itself exits 0, also with
    --quantization int4; bench's JSON names the load;
  - `generate` without a tokenizer is refused with a message naming --tokenizer; with one (the
    stories260K GGUF, a 512-token vocabulary) it generates;
  - `info` describes the random weights of the config (parameters as memplan counts them), and
    without the flag says that a config.json alone needs it;
  - a GGUF path and an unknown value are refused with a clear error.
The random source's values and the loads' logits are tests/model/random_weights_test.cc."""
import json
import subprocess

import pytest

from conftest import BINARY, TINY_MODEL

CONFIG = {
    "model_type": "llama", "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 2,
    "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False, "vocab_size": 512,
    "torch_dtype": "bfloat16",
}


def run(*args, timeout=120):
    p = subprocess.run([BINARY, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


@pytest.fixture
def config_dir(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    return tmp_path


@pytest.mark.parametrize("quantization", ["none", "int4"])
@pytest.mark.parametrize("as_file", [False, True])
def test_bench_runs_on_a_config_alone(config_dir, quantization, as_file):
    model = config_dir / "config.json" if as_file else config_dir
    rc, out, err = run("bench", "-m", model, "--load-format", "dummy", "-p", "16", "-n", "4", "-t", "1", "-r", "1",
                       "--device", "cpu", "--quantization", quantization, "--json")
    assert rc == 0, err
    result = json.loads(out)
    assert result["model"] == str(model)
    assert "llama" in result["config"]


def test_generate_without_a_tokenizer_names_the_flag(config_dir):
    rc, out, err = run("generate", config_dir, "--load-format", "dummy", "-p", "Once upon", "-n", "4", "--device", "cpu")
    assert rc == 1, err
    assert "--tokenizer" in err and "dummy" in err, err


def test_generate_with_a_tokenizer(config_dir):
    if not TINY_MODEL.exists():
        pytest.skip(f"{TINY_MODEL} missing")
    rc, out, err = run("generate", config_dir, "--load-format", "dummy", "--tokenizer", TINY_MODEL, "-p", "Once upon",
                       "-n", "4", "--temperature", "0", "--ignore-eos", "--device", "cpu")
    assert rc == 0, err


def test_a_gguf_path_is_refused(tmp_path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    rc, out, err = run("bench", "-m", gguf, "--load-format", "dummy", "-p", "16", "-n", "4", "-t", "1", "--device", "cpu")
    assert rc != 0
    assert "--load-format dummy" in err and "config.json" in err, err


def test_an_unknown_value_is_refused(config_dir):
    rc, out, err = run("bench", "-m", config_dir, "--load-format", "random", "-p", "16", "-n", "4", "--device", "cpu")
    assert rc != 0
    assert "random" in err and "dummy" in err, err


def test_info_describes_the_random_weights(config_dir):
    rc, out, err = run("info", config_dir, "--load-format", "dummy", "--json")
    assert rc == 0, err
    info = json.loads(out)
    assert info["format"] == "random"
    D, F, L, V, kv = 128, 384, 2, 512, 2 * 16
    per_layer = 2 * D + D * D + 2 * kv * D + D * D + 3 * D * F  # norms, q, k, v, o, gate / up / down
    assert info["parameters"] == 2 * V * D + D + L * per_layer  # embedding, untied head, final norm
    assert info["weight_bytes"] == 2 * info["parameters"]  # bf16
    rc, out, err = run("info", config_dir)
    assert rc == 1
    assert "--load-format dummy" in err, err
