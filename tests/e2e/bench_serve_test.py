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


def test_bench_serve_paired_comparison_of_two_servers():
    """--compare-url: every prompt goes once to each server; the report pairs them."""
    a = Server(TINY_MODEL, "--max-model-len", 256)
    b = Server(TINY_MODEL, "--max-model-len", 256)
    try:
        j = json.loads(run("bench", "serve", "--url", a.url, "--compare-url", b.url, "--num-prompts", 12,
                           "--max-concurrency", 4, "--input-len", 16, "--output-len", 6, "--seed", 3, "--jitter-ms", 5,
                           "--json"))
        assert j["completed"] == 24 and j["failed"] == 0 and j["total_output_tokens"] == 24 * 6
        c = j["compare"]
        assert [arm["url"] for arm in c["arms"]] == [a.url, b.url]
        assert [arm["completed"] for arm in c["arms"]] == [12, 12]
        t = c["ttft"]
        assert t["pairs"] == 12 and len(c["pair_ttft_ms"]) == 12
        diffs = sorted(y - x for x, y in c["pair_ttft_ms"])
        assert abs(t["median_diff_ms"] - (diffs[5] + diffs[6]) / 2) < 1e-6
        lo, hi = t["median_diff_ci95_ms"]
        assert lo <= t["median_diff_ms"] <= hi
        lo, hi = t["median_ttft_delta_ci95_ms"]
        assert lo <= hi and abs(t["median_ttft_delta_ms"] - (t["median_ttft_b_ms"] - t["median_ttft_a_ms"])) < 1e-6
        # Each server got exactly one request per prompt.
        for s in (a, b):
            assert s.metric("pagoda:request_success_total", {"finished_reason": "length"}) == 12
        text = run("bench", "serve", "--url", a.url, "--compare-url", b.url, "--num-prompts", 2, "--input-len", 8,
                   "--output-len", 4)
        assert "Median paired TTFT diff (ms):" in text and "Pairs:" in text
    finally:
        a.kill()
        b.kill()


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
