"""`--tensor-parallel-size` through the real binary (issue 33; docs/decisions.md D78):
  - `pagoda memplan --tensor-parallel-size N` prints each rank's plan from the sharding plan
    (model/tensor_parallel_plan.h): Llama-3-8B's and -70B's configs split into halves / quarters,
    KV heads replicated when fewer than the ranks, a quantized GGUF's cuts on its blocks; size 1
    is the one-GPU plan; what does not divide (heads, quantization blocks) is refused by name;
  - generate, bench, bench throughput and serve accept 1 and refuse > 1, naming what is missing
    (the multi-GPU executor), before loading anything.
The plan's tiling and numerics are tests/unit/tensor_parallel_plan_test.cc and
tests/unit/tensor_parallel_layer_test.cc."""
import json
import pathlib
import subprocess

from conftest import BINARY, CHAT_MODEL, TINY_MODEL

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "testdata" / "configs"
L8B = CONFIGS / "llama-3-8b.json"
L70B = CONFIGS / "llama-3-70b.json"


def run(*args, timeout=120):
    p = subprocess.run([BINARY, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def memplan_json(*args):
    rc, out, err = run("memplan", *args, "--json")
    assert rc == 0, err
    return json.loads(out)


def test_memplan_splits_weights_and_kv_per_rank():
    base = [L8B, "--memory", "80GB", "--max-model-len", "4096"]
    whole = memplan_json(*base)
    one = memplan_json(*base, "--tensor-parallel-size", "1")
    assert one == whole  # size 1 is the one-GPU plan
    W, kv = whole["plan"]["weights"], whole["plan"]["kv_bytes_per_token"]
    for n in (2, 4, 8):
        tp = memplan_json(*base, "--tensor-parallel-size", str(n))["tensor_parallel"]
        assert tp["size"] == n and len(tp["ranks"]) == n and tp["kv_head_replicas"] == 1
        total = sum(r["weights"] for r in tp["ranks"])
        # The shards add up to the model; only the small replicated norms are counted n times.
        assert W <= total < W * 1.001, (n, total, W)
        for i, r in enumerate(tp["ranks"]):
            assert r["heads"] == 32 // n and r["first_head"] == i * 32 // n
            assert r["kv_heads"] == 8 // n and r["first_kv_head"] == i * 8 // n
            assert r["plan"]["kv_bytes_per_token"] * n == kv
            assert abs(r["weights"] - W / n) < 0.01 * W
        assert tp["ranks"][-1]["vocab_end"] == 128256
        assert tp["num_blocks"] == min(r["plan"]["num_blocks"] for r in tp["ranks"])
    # A 141 GB model does not fit one 141 GB GPU's budget without offload, but two halves do.
    tp2 = memplan_json(L70B, "--memory", "141GB", "--max-model-len", "8192", "--tensor-parallel-size", "2")
    assert tp2["fits"] and all(r["plan"]["total"] <= r["plan"]["budget"] for r in tp2["tensor_parallel"]["ranks"])
    rc, text, err = run("memplan", L70B, "--memory", "141GB", "--tensor-parallel-size", "2")
    assert rc == 0 and "tensor parallel size 2" in text and "rank 1: query heads [32, 64), KV heads [4, 8)" in text, text


def test_fewer_kv_heads_than_ranks_are_replicated(tmp_path):
    cfg = json.loads(L8B.read_text())
    cfg.update(hidden_size=1536, num_attention_heads=12, num_key_value_heads=2, intermediate_size=8960)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    tp = memplan_json(path, "--memory", "24GB", "--tensor-parallel-size", "4")["tensor_parallel"]
    assert tp["kv_head_replicas"] == 2
    assert [r["first_kv_head"] for r in tp["ranks"]] == [0, 0, 1, 1]
    assert all(r["kv_heads"] == 1 for r in tp["ranks"])
    half = memplan_json(path, "--memory", "24GB", "--tensor-parallel-size", "2")["tensor_parallel"]
    # A replicated KV head costs each rank as much as at 2 ranks: the cache does not shrink further.
    assert tp["ranks"][0]["plan"]["kv_bytes_per_token"] == half["ranks"][0]["plan"]["kv_bytes_per_token"]


def test_quantized_gguf_cuts_on_its_blocks():
    tp = memplan_json(CHAT_MODEL, "--memory", "8GB", "--tensor-parallel-size", "3")["tensor_parallel"]
    assert tp["k_block"] == 32 and len(tp["ranks"]) == 3  # Q4_1: 9 heads, 3 KV heads, ffn 1536 at 3 ranks
    assert tp["ranks"][2]["vocab_end"] == 49152


def test_memplan_refuses_what_does_not_divide(tmp_path):
    rc, _, err = run("memplan", L8B, "--memory", "80GB", "--tensor-parallel-size", "3")
    assert rc == 2 and "does not divide the 32 query heads" in err, err
    cfg = json.loads(L8B.read_text())
    cfg.update(hidden_size=576, num_attention_heads=9, num_key_value_heads=3, intermediate_size=1536)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    rc, _, err = run("memplan", path, "--memory", "8GB", "--weight-dtype", "q4_k", "--tensor-parallel-size", "3")
    assert rc == 2 and "attn_output.weight" in err and "quantization block (256)" in err, err
    rc, _, err = run("memplan", L8B, "--memory", "80GB", "--tensor-parallel-size", "2", "-ngl", "16")
    assert rc == 2 and "--tensor-parallel-size" in err and "--n-gpu-layers" in err, err
    rc, _, err = run("memplan", L8B, "--tensor-parallel-size", "0")
    assert rc != 0 and "--tensor-parallel-size" in err, err


def test_running_commands_accept_one_and_refuse_more():
    missing = "multi-GPU execution is not built yet"
    for cmd in (["generate", "-m", TINY_MODEL, "-p", "Once", "-n", "2"],
                ["bench", "-m", TINY_MODEL, "-p", "8", "-n", "4"],
                ["bench", "throughput", "-m", TINY_MODEL, "--num-prompts", "2", "--input-len", "8", "--output-len", "4"],
                ["serve", "-m", TINY_MODEL, "--port", "0"]):
        rc, _, err = run(*cmd, "--tensor-parallel-size", "2", timeout=30)
        assert rc == 2 and missing in err and "--tensor-parallel-size 2" in err, (cmd, err)
    rc, out, err = run("generate", "-m", TINY_MODEL, "-p", "Once", "-n", "2", "--device", "cpu", "--temperature", "0",
                       "--tensor-parallel-size", "1")
    assert rc == 0 and out.strip(), err
