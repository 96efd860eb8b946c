"""Graceful shutdown: SIGTERM with streams in flight. /health turns 503 and new requests get 503
at once; short streams finish normally; a stream that outlives --shutdown-timeout is cancelled
(finish_reason "abort", then [DONE]); the process exits 0."""
import json
import threading
import time

import requests

from conftest import CHAT_MODEL, TINY_MODEL, Server, http


def read_stream(url, body, out):
    events = []
    try:
        with requests.post(url + "/v1/completions", json=body, stream=True, timeout=60) as r:
            out["status"] = r.status_code
            for line in r.iter_lines():
                if line.startswith(b"data: "):
                    events.append(line[6:])
                    if len(events) == 1:
                        out["started"].set()
    except Exception as e:  # noqa: BLE001
        out["error"] = repr(e)
    out["events"] = events
    out["finished_at"] = time.time()
    out["started"].set()


def finish_reason(events):
    assert events and events[-1] == b"[DONE]", events[-3:]
    reasons = [json.loads(e)["choices"][0]["finish_reason"] for e in events[:-1] if json.loads(e)["choices"]]
    return [r for r in reasons if r][-1]


def test_sigterm_drains_then_cancels():
    s = Server(CHAT_MODEL, "--max-model-len", 2048, "--shutdown-timeout", 5, "--max-num-seqs", 4)
    try:
        streams = []
        for max_tokens in (8, 8, 2000):
            out = {"started": threading.Event()}
            body = {"prompt": "Tell me a story", "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
                    "temperature": 0}
            t = threading.Thread(target=read_stream, args=(s.url, body, out))
            t.start()
            streams.append((t, out))
        for _, out in streams:
            assert out["started"].wait(60)
        t_term = time.time()
        s.terminate()
        time.sleep(0.3)
        status, _, body = http("GET", s.url + "/health")
        assert status == 503 and json.loads(body)["status"] == "draining"
        status, _, body = http("POST", s.url + "/v1/completions", {"prompt": "x", "max_tokens": 2})
        assert status == 503 and json.loads(body)["error"]["code"] == "shutting_down"
        for t, _ in streams:
            t.join(30)
        short1, short2, long = (out for _, out in streams)
        assert finish_reason(short1["events"]) == "length" and finish_reason(short2["events"]) == "length"
        assert finish_reason(long["events"]) == "abort"
        assert 4.5 <= long["finished_at"] - t_term <= 12, long["finished_at"] - t_term
        assert s.proc.wait(timeout=20) == 0
        log = s.output()
        assert "draining" in log and "cancelling 1 sequences" in log and "stopped" in log
    finally:
        s.kill()


def test_sigint_idle_exits_zero():
    s = Server(TINY_MODEL, "--max-model-len", 256)
    try:
        import signal
        s.terminate(signal.SIGINT)
        assert s.proc.wait(timeout=20) == 0
    finally:
        s.kill()


def test_startup_errors_exit_nonzero(tmp_path):
    import subprocess
    from conftest import BINARY, free_port
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a gguf file")
    r = subprocess.run([BINARY, "serve", "--model", str(bogus), "--port", str(free_port())], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and "cannot start the engine" in r.stderr
    s = Server(TINY_MODEL, "--max-model-len", 256)
    try:
        r = subprocess.run([BINARY, "serve", "--model", str(TINY_MODEL), "--port", str(s.port)], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 1 and f"cannot listen on 127.0.0.1:{s.port}" in r.stderr, r.stderr
    finally:
        s.kill()
