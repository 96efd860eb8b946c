"""Operating `pagoda serve` (issue 28): an access log line per request, the periodic stats line,
process metrics at /metrics and --metrics-prefix vllm (vLLM's names for its dashboards), and the
speculative-decoding counters of a server started with --speculative-config."""
import json
import os
import re
import subprocess
import time

from conftest import TINY_MODEL, http


def complete(s, stream=False, max_tokens=8):
    body = {"model": "stories260K", "prompt": "Once upon a time", "max_tokens": max_tokens, "temperature": 0,
            "stream": stream}
    status, _, data = http("POST", s.url + "/v1/completions", body)
    assert status == 200, data
    return data


def wait_for(s, pattern, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = re.search(pattern, s.output())
        if m:
            return m
        time.sleep(0.1)
    raise AssertionError(f"{pattern!r} not in the server log:\n{s.output()[-3000:]}")


def test_access_log_line_per_request(server_factory):
    s = server_factory(TINY_MODEL, "--max-model-len", 256)
    complete(s, max_tokens=8)
    m = wait_for(s, r'\[access\] 127\.0\.0\.1 "POST /v1/completions" 200 prompt_tokens=(\d+) '
                    r'completion_tokens=(\d+) ([\d.]+) ms')
    assert int(m.group(1)) > 0 and int(m.group(2)) == 8
    complete(s, stream=True, max_tokens=5)
    wait_for(s, r'"POST /v1/completions" 200 prompt_tokens=\d+ completion_tokens=5 [\d.]+ ms stream')
    status, _, _ = http("GET", s.url + "/no/such/route")
    assert status == 404
    wait_for(s, r'"GET /no/such/route" 404 [\d.]+ ms')
    wait_for(s, r'"GET /health" 200 [\d.]+ ms')


def test_no_access_log(server_factory):
    s = server_factory(TINY_MODEL, "--max-model-len", 256, "--no-access-log")
    complete(s)
    time.sleep(0.5)
    assert "[access]" not in s.output()


def test_stats_line_while_serving(server_factory):
    s = server_factory(TINY_MODEL, "--max-model-len", 256, "--stats-interval", "0.5")
    time.sleep(1.2)
    assert "Avg generation throughput" not in s.output(), "stats lines while idle from the start"
    complete(s, max_tokens=64)
    m = wait_for(s, r"Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: ([\d.]+) tokens/s, "
                    r"Running: (\d+) reqs, Waiting: (\d+) reqs, KV cache usage: ([\d.]+)%")
    assert float(m.group(2)) > 0


def test_process_metrics(server_factory):
    s = server_factory(TINY_MODEL, "--max-model-len", 256)
    text = s.metrics()
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
                 "process_max_fds", "process_start_time_seconds", "process_virtual_memory_bytes"):
        assert s.metric(name) is not None, f"{name} missing:\n{text}"
    assert s.metric("process_resident_memory_bytes") > 1e6
    assert abs(s.metric("process_start_time_seconds") - time.time()) < 600
    assert s.metric("process_open_fds") >= 3


def test_metrics_prefix_vllm(server_factory):
    s = server_factory(TINY_MODEL, "--max-model-len", 256, "--metrics-prefix", "vllm")
    complete(s)
    text = s.metrics()
    assert "pagoda:" not in text
    assert s.metric("vllm:num_requests_running") is not None, text
    assert s.metric("vllm:generation_tokens_total") >= 8, text
    assert s.metric("vllm:e2e_request_latency_seconds_count") >= 1, text
    assert "# TYPE vllm:time_to_first_token_seconds histogram" in text
    assert s.metric("process_cpu_seconds_total") is not None


def test_speculative_decoding_metrics(server_factory):
    """vLLM's spec-decode counters at /metrics; greedy output the same as without speculation."""
    plain = server_factory(TINY_MODEL, "--max-model-len", 256)
    spec = server_factory(TINY_MODEL, "--max-model-len", 256, "--speculative-config",
                          '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 2}')
    a, b = complete(plain, max_tokens=48), complete(spec, max_tokens=48)
    assert json.loads(a)["choices"][0]["text"] == json.loads(b)["choices"][0]["text"]
    assert plain.metric("pagoda:spec_decode_num_drafts_total") == 0
    drafts = spec.metric("pagoda:spec_decode_num_drafts_total")
    draft_tokens = spec.metric("pagoda:spec_decode_num_draft_tokens_total")
    accepted = spec.metric("pagoda:spec_decode_num_accepted_tokens_total")
    assert drafts > 0 and draft_tokens >= drafts and 0 <= accepted <= draft_tokens, spec.metrics()
    per_pos = [spec.metric("pagoda:spec_decode_num_accepted_tokens_per_pos_total", {"position": str(i)}) for i in range(3)]
    assert sum(per_pos) == accepted, spec.metrics()
    assert spec.metric("pagoda:generation_tokens_total") == 48


def test_speculative_options_are_checked():
    r = subprocess.run([os.environ.get("PAGODA_BINARY", "build/pagoda"), "serve", "--model", TINY_MODEL,
                        "--speculative-config", '{"method": "ngram", "k": 3}'], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unknown key 'k'" in r.stderr, r.stderr
