"""`pagoda bench serve` against a real server, `pagoda bench throughput` offline, and the classic
`pagoda bench --model` form still working."""
import json
import subprocess

from conftest import BINARY, TINY_MODEL, Server


def run(*args, timeout=300, stderr=False):
    r = subprocess.run([BINARY, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return (r.stdout, r.stderr) if stderr else r.stdout


def test_bench_serve_concurrency_and_rate():
    s = Server(TINY_MODEL, "--max-model-len", 256)
    try:
        j = json.loads(run("bench", "serve", "--url", s.url, "--num-prompts", 24, "--max-concurrency", 6,
                           "--input-len", 32, "--output-len", 12, "--seed", 1, "--goodput", "ttft:60000", "e2el:60000",
                           "--json"))
        assert j["completed"] == 24 and j["failed"] == 0
        assert j["total_output_tokens"] == 24 * 12 and j["total_input_tokens"] == 24 * 32
        assert 0 < j["mean_ttft_ms"] < j["mean_e2el_ms"]
        assert j["median_itl_ms"] > 0 and j["p99_itl_ms"] >= j["median_itl_ms"]
        assert j["request_goodput"] == j["request_throughput"]  # generous SLOs: every request is good
        assert j["output_throughput"] > 0
        # The server counted exactly these requests and their tokens.
        assert s.metric("pagoda:request_success_total", {"finished_reason": "length"}) == 24
        assert s.metric("pagoda:prompt_tokens_total") >= 24 * 32 - 24 * 16  # prefix hits may skip some
        j = json.loads(run("bench", "serve", "--url", s.url, "--num-prompts", 10, "--request-rate", 20,
                           "--input-len", 8, "--output-len", 4, "--goodput", "ttft:0.001", "--json"))
        assert j["completed"] == 10 and j["request_goodput"] == 0  # impossible SLO: nothing is good
        text, log = run("bench", "serve", "--url", s.url, "--num-prompts", 2, "--input-len", 8, "--output-len", 4,
                        stderr=True)
        assert "Serving Benchmark Result" in text and "Mean TTFT (ms)" in text
        # Progress (issue 28): on a pipe, the plain final line of the requests that ended.
        assert "requests: 100% (2/2 requests)" in log and ", done" in log, log
    finally:
        s.kill()


def test_bench_throughput_and_classic_bench():
    j = json.loads(run("bench", "throughput", "--model", TINY_MODEL, "--num-prompts", 8, "--input-len", 16,
                       "--output-len", 8, "--sequential", 2, "--json"))
    assert j["batched_output_tokens"] == 64
    assert j["batched_output_tokens_per_s"] > 0 and j["sequential_output_tokens_per_s"] > 0
    assert 0 < j["kv_utilisation"] <= 1
    out = run("bench", "--model", TINY_MODEL, "-p", 8, "-n", 4, "-r", 1)
    assert "pp8" in out and "tg4" in out
    r = subprocess.run([BINARY, "bench"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--model is required" in r.stderr
