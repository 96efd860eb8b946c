"""KV cache tiers through the real server: shared prefixes larger than a small KV pool give the
same greedy completions with the host and disk tiers as without, the tier hits are exported at
/metrics, and /health says "loading" (never refuses the connection) until the engine is ready."""
import json
import socket
import subprocess
import tempfile
import time

from conftest import BINARY, CHAT_MODEL, Server, free_port, http

# SmolLM2: 23040 bytes of f16 K/V per token; 24 blocks of 16 tokens + the null block.
KV_BYTES = 23040 * 16 * 25


def prompts():
    out = []
    for rnd in range(2):
        for p in range(6):
            ids = [(p * 7919 + k * 104729) % 49000 + 5 for k in range(160)]
            ids += [(rnd * 31 + p * 131 + k * 17 + 3) % 49000 + 5 for k in range(8)]
            out.append(ids)
    return out


def completions(server):
    texts = []
    for ids in prompts():
        status, _, body = http("POST", server.url + "/v1/completions",
                               {"model": "m", "prompt": ids, "max_tokens": 3, "temperature": 0, "ignore_eos": True},
                               timeout=120)
        assert status == 200, body
        texts.append(json.loads(body)["choices"][0]["text"])
    return texts


def serve(*extra):
    return Server(CHAT_MODEL, "--kv-cache-memory", KV_BYTES, "--max-model-len", 256, "--max-num-seqs", 4,
                  "--served-model-name", "m", *extra)


def test_tiers_keep_greedy_completions_and_count_hits():
    plain = serve()
    try:
        want = completions(plain)
        assert plain.metric("pagoda:kv_tier_hits_total", {"tier": "host"}) == 0
    finally:
        plain.stop()
    with tempfile.TemporaryDirectory() as disk:
        tiered = serve("--kv-host-gb", "0.005", "--kv-disk-dir", disk)
        try:
            assert completions(tiered) == want
            host = tiered.metric("pagoda:kv_tier_hits_total", {"tier": "host"})
            disk_hits = tiered.metric("pagoda:kv_tier_hits_total", {"tier": "disk"})
            assert host + disk_hits >= 3 * 160, tiered.metrics()  # of the second round's 6 x 160
            assert disk_hits > 0
            assert tiered.metric("pagoda:kv_tier_stores_total", {"tier": "disk"}) > 0
            assert tiered.metric("pagoda:kv_tier_rejected_total", {"tier": "disk"}) == 0
        finally:
            tiered.stop()


def test_health_says_loading_until_ready():
    """Polls /health from the moment the process starts: every answer before 200 is 503
    {"status": "loading"}, and once the port answers no connection is refused."""
    port = free_port()
    # A host tier of 1 GiB to zero makes the start-up long enough to be seen loading.
    proc = subprocess.Popen([BINARY, "serve", "--model", str(CHAT_MODEL), "--port", str(port), "--kv-host-gb", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        seen, answered = [], False
        deadline = time.time() + 90
        while time.time() < deadline:
            assert proc.poll() is None, "serve exited"
            try:
                status, headers, body = http("GET", f"http://127.0.0.1:{port}/health", timeout=5)
            except OSError as e:
                assert not answered, f"refused after the port answered once: {e}"
                time.sleep(0.01)
                continue
            answered = True
            if status == 200:
                break
            assert status == 503 and json.loads(body) == {"status": "loading"}, (status, body)
            assert headers.get("Retry-After") == "1"
            seen.append(status)
            status, _, body = http("POST", f"http://127.0.0.1:{port}/v1/completions", {"prompt": "hi", "max_tokens": 1})
            assert status in (200, 400, 404, 503), body
            if status == 503:
                assert json.loads(body)["error"]["code"] == "loading"
            time.sleep(0.01)
        assert answered and status == 200
        print(f"/health answered 'loading' {len(seen)} times before 200")
    finally:
        proc.terminate()
        proc.wait(timeout=20)
