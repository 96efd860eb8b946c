"""`--tensor-parallel-size` through the real binary (issue 33; docs/decisions.md D78):
  - `pagoda memplan --tensor-parallel-size N` prints each rank's plan from the sharding plan
    (model/tensor_parallel_plan.h): Llama-3-8B's and -70B's configs split into halves / quarters,
    KV heads replicated when fewer than the ranks, a quantized GGUF's cuts on its blocks; size 1
    is the one-GPU plan; what does not divide (heads, quantization blocks) is refused by name;
  - generate, bench and serve run the model over several ranks: on the CPU, rank 0 and `pagoda tp-worker`
    processes over shared memory, the same greedy text as one process; a worker that dies ends rank 0
    with exit status 70 naming it (never a hang), a rank 0 that dies ends its workers; what does not
    split (heads, a speculative draft model) is refused by name.
The CUDA ranks (NCCL, or host-staged on one GPU) are tests/gpu/cuda_tensor_parallel_test.cc.
The plan's tiling and numerics are tests/unit/tensor_parallel_plan_test.cc and
tests/unit/tensor_parallel_layer_test.cc."""
import json
import os
import pathlib
import signal
import subprocess
import time

from conftest import BINARY, CHAT_MODEL, TINY_MODEL, http

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


def generate(model, n, size, *extra):
    rc, out, err = run("generate", "-m", model, "-p", "The capital of France is", "-n", n, "--device", "cpu",
                       "--temperature", "0", "--tensor-parallel-size", size, *extra, timeout=180)
    assert rc == 0, err
    return out, err


def test_cpu_ranks_generate_what_one_rank_generates():
    """Rank 0 and `pagoda tp-worker` processes over shared memory (runtime/shm_tensor_parallel_comm.h)
    give the one-process greedy continuation: stories260K at 2 and 4 ranks (KV heads split), the
    SmolLM2 Q4_1 GGUF at 3 ranks (cut on its 32-element blocks)."""
    for model, sizes, n in ((TINY_MODEL, (2, 4), 24), (CHAT_MODEL, (3,), 12)):
        want, _ = generate(model, n, 1)
        assert want.strip()
        for size in sizes:
            got, err = generate(model, n, size)
            assert got == want, (model, size, got, want)
            assert f"{size} ranks (shm communicator)" in err and f"rank {size - 1} of {size} ready" in err, err


def test_bench_and_serve_run_tensor_parallel(server_factory):
    rc, out, err = run("bench", "-m", TINY_MODEL, "-p", "16", "-n", "8", "-r", "1", "--device", "cpu",
                       "--tensor-parallel-size", "2", timeout=180)
    assert rc == 0 and "tg8" in out, err
    want, _ = generate(TINY_MODEL, 16, 1)
    server = server_factory(TINY_MODEL, "--device", "cpu", "--tensor-parallel-size", "2")
    status, _, body = http("POST", server.url + "/v1/completions",
                           {"model": "stories260K", "prompt": "The capital of France is", "max_tokens": 16, "temperature": 0})
    assert status == 200, body
    assert json.loads(body)["choices"][0]["text"].strip() == want.strip()


def worker_pids(pid):
    """The children of `pid` (the tensor-parallel workers of a server)."""
    path = pathlib.Path(f"/proc/{pid}/task/{pid}/children")
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def alive(pid):
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_a_dead_worker_ends_rank_0_naming_it(server_factory):
    server = server_factory(TINY_MODEL, "--device", "cpu", "--tensor-parallel-size", "2")
    workers = worker_pids(server.proc.pid)
    assert len(workers) == 1, workers
    os.kill(workers[0], signal.SIGKILL)
    rc = server.proc.wait(timeout=20)  # never a hang
    out = server.output()
    assert rc == 70, (rc, out[-2000:])
    assert f"rank 1 (pid {workers[0]}) was killed by signal 9" in out, out[-2000:]


def test_a_dead_rank_0_ends_its_workers(server_factory):
    server = server_factory(TINY_MODEL, "--device", "cpu", "--tensor-parallel-size", "4")
    workers = worker_pids(server.proc.pid)
    assert len(workers) == 3, workers
    server.proc.kill()
    server.proc.wait(timeout=10)
    deadline = time.time() + 10
    while any(alive(w) for w in workers) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(alive(w) for w in workers), "a worker outlived rank 0"


def test_what_does_not_split_is_refused_by_name():
    rc, _, err = run("generate", "-m", CHAT_MODEL, "-p", "Once", "-n", "2", "--device", "cpu", "--tensor-parallel-size", "2")
    assert rc != 0 and "query heads" in err, err  # SmolLM2: 9 heads
    rc, _, err = run("generate", "-m", TINY_MODEL, "-p", "Once", "-n", "2", "--device", "cpu", "--tensor-parallel-size", "2",
                     "--spec-method", "draft", "--spec-model", TINY_MODEL)
    assert rc != 0 and "speculative method draft" in err and "ngram runs" in err, err
    for bad in ("0", "65"):
        rc, _, err = run("generate", "-m", TINY_MODEL, "-p", "Once", "-n", "2", "--tensor-parallel-size", bad)
        assert rc != 0 and "--tensor-parallel-size" in err, err
