"""Operating `pagoda serve` (issue 28): an access log line per request, the periodic stats line,
process metrics at /metrics and --metrics-prefix vllm (vLLM's names for its dashboards)."""
import re
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
