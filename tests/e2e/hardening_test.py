"""Hardening of `pagoda serve` (issue 25), with raw sockets where the framing matters:
pipelining and stray bytes during a generation, head-of-line blocking by large bodies, rate-limit
keys, the queue bound, HTTP leniencies (NUL bodies, transfer codings, HEAD, content types, CORS,
the Authorization scheme, the connection cap) and --metrics-require-key."""
import json
import socket
import threading
import time

import pytest

from conftest import TINY_MODEL, Server, http


class Conn:
    """One raw HTTP/1.1 connection: send bytes, read whole responses (Content-Length or chunked)."""

    def __init__(self, url, timeout=60):
        host, port = url.split("//")[1].split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("connection closed by the server")
        self.buf += chunk

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self, head=False):
        """(status, headers with lower-case names, body bytes)."""
        status = int(self._line().split(b" ")[1])
        headers = {}
        while True:
            line = self._line()
            if not line:
                break
            k, v = line.decode().split(":", 1)
            headers[k.strip().lower()] = v.strip()
        if head:
            return status, headers, b""
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size = int(self._line(), 16)
                if size == 0:
                    self._line()
                    break
                body += self._exact(size)
                self._exact(2)
            return status, headers, body
        return status, headers, self._exact(int(headers.get("content-length", "0")))

    def close(self):
        self.sock.close()


def request(method, path, body=None, headers=None):
    headers = dict(headers or {})
    data = b""
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
        headers["Content-Length"] = str(len(data))
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode() + b"\r\n" + data


@pytest.fixture(scope="module")
def tiny():
    s = Server(TINY_MODEL, "--max-model-len", 512, "--max-num-seqs", 8, "--http-threads", 2)
    yield s
    s.kill()


COMPLETION = {"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0, "ignore_eos": True}


# ---- defect 4: bytes during a generation ----

def test_pipelined_requests_answered_in_order(tiny):
    c = Conn(tiny.url)
    c.send(request("POST", "/v1/completions", COMPLETION))
    time.sleep(0.3)  # the first completion is generating: the next request arrives meanwhile
    c.send(request("POST", "/v1/completions", dict(COMPLETION, max_tokens=3)) + request("GET", "/health"))
    s1, _, b1 = c.response()
    s2, _, b2 = c.response()
    s3, _, b3 = c.response()
    assert (s1, s2, s3) == (200, 200, 200)
    assert json.loads(b1)["usage"]["completion_tokens"] == 48
    assert json.loads(b2)["usage"]["completion_tokens"] == 3
    assert json.loads(b3) == {"status": "ok"}
    c.close()


def test_stray_crlf_during_stream_keeps_the_stream(tiny):
    c = Conn(tiny.url)
    c.send(request("POST", "/v1/completions", dict(COMPLETION, stream=True)))
    time.sleep(0.3)
    c.send(b"\r\n")
    status, headers, body = c.response()
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = [e for e in body.decode().split("\n\n") if e.strip()]
    assert events[-1] == "data: [DONE]"
    # The connection still serves requests after the stray bytes.
    c.send(request("GET", "/health"))
    assert c.response()[0] == 200
    c.close()


def test_stray_crlf_during_non_stream_response(tiny):
    c = Conn(tiny.url)
    c.send(request("POST", "/v1/completions", COMPLETION))
    time.sleep(0.3)
    c.send(b"\r\n\r\n")
    status, _, body = c.response()
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 48
    c.close()


def test_client_eof_still_cancels(tiny):
    c = Conn(tiny.url)
    c.send(request("POST", "/v1/completions", dict(COMPLETION, max_tokens=400, stream=True)))
    time.sleep(0.3)
    c.close()
    deadline = time.time() + 20
    while time.time() < deadline and tiny.metric("pagoda:num_requests_running") not in (0, None):
        time.sleep(0.1)
    assert tiny.metric("pagoda:num_requests_running") in (0, None, 0.0)


# ---- defect 5: head-of-line blocking ----

def test_large_bodies_do_not_block_health(server_factory):
    s = server_factory(TINY_MODEL, "--max-model-len", 512, "--http-threads", 2, "--max-body-bytes", 64 << 20)
    # ~13 MB each to tokenize: seconds of work, so the checks below run while it is in progress
    # on a fast machine too.
    text = "Once upon a time, there was a little girl named Lily. " * 240000
    done = {}

    def big(i):
        status, _, _ = http("POST", s.url + "/tokenize", {"prompt": text}, timeout=300)
        done[i] = (status, time.monotonic())

    threads = [threading.Thread(target=big, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.3)  # the bodies are being uploaded and tokenized
    health_at = []
    for _ in range(5):
        status, _, _ = http("GET", s.url + "/health", timeout=60)
        assert status == 200
        health_at.append(time.monotonic())
        status, _, body = http("GET", s.url + "/metrics", timeout=60)
        assert status == 200
    for t in threads:
        t.join()
    assert all(st == 200 for st, _ in done.values())
    # Every health check came back while the large requests were still being processed.
    assert max(health_at) < min(t for _, t in done.values()), (health_at, done)


# ---- defect 1: rate-limit keys ----

def test_rate_limit_without_keys_is_per_address(server_factory):
    s = server_factory(TINY_MODEL, "--max-model-len", 256, "--rate-limit", "rps=1")
    body = {"prompt": "Once", "max_tokens": 1}
    first = http("POST", s.url + "/v1/completions", body, headers={"Authorization": "Bearer x1",
                                                                     "Content-Type": "application/json"})
    second = http("POST", s.url + "/v1/completions", body, headers={"Authorization": "Bearer x2",
                                                                      "Content-Type": "application/json"})
    assert first[0] == 200
    assert second[0] == 429, second


def test_rate_limit_key_is_the_key_not_the_header(server_factory):
    s = server_factory(TINY_MODEL, "--max-model-len", 256, "--rate-limit", "rps=1", "--api-key", "K1")
    body = {"prompt": "Once", "max_tokens": 1}
    ct = {"Content-Type": "application/json"}
    assert http("POST", s.url + "/v1/completions", body, headers={"Authorization": "Bearer K1", **ct})[0] == 200
    # The same key with another spelling of the scheme: authenticated (RFC 7235), same bucket.
    status, _, reply = http("POST", s.url + "/v1/completions", body, headers={"Authorization": "BEARER K1", **ct})
    assert status == 429, reply
    status, _, reply = http("POST", s.url + "/v1/completions", body, headers={"Authorization": "bearer   K1", **ct})
    assert status == 429, reply


# ---- defect 6: more sequences than the queue can ever hold ----

def test_request_larger_than_the_queue_is_400(server_factory):
    s = server_factory(TINY_MODEL, "--max-model-len", 256, "--max-num-seqs", 2, "--max-queued-requests", 2)
    status, headers, body = http("POST", s.url + "/v1/completions", {"prompt": ["a", "b", "c"], "max_tokens": 1, "n": 2})
    assert status == 400, body
    err = json.loads(body)["error"]
    assert err["code"] == "too_many_sequences" and "6 sequences" in err["message"] and "at most 4" in err["message"]
    assert "Retry-After" not in headers
    status, _, body = http("POST", s.url + "/v1/completions", {"prompt": ["a", "b"], "max_tokens": 1, "n": 2})
    assert status == 200, body


# ---- defect 8: HTTP leniencies ----

def test_nul_and_trailing_garbage_rejected(tiny):
    body = json.dumps({"prompt": "Once", "max_tokens": 1}).encode() + b"\0garbage"
    status, _, reply = http("POST", tiny.url + "/v1/completions", body, headers={"Content-Type": "application/json"})
    assert status == 400 and json.loads(reply)["error"]["code"] == "invalid_json"
    status, _, _ = http("POST", tiny.url + "/v1/completions", json.dumps({"prompt": "x"}).encode() + b" }",
                        headers={"Content-Type": "application/json"})
    assert status == 400


def test_transfer_encoding_other_than_chunked_is_501(tiny):
    c = Conn(tiny.url)
    c.send(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n")
    status, headers, _ = c.response()
    assert status == 501 and headers.get("connection") == "close"
    c.close()
    # Plain chunked still works.
    c = Conn(tiny.url)
    data = json.dumps({"prompt": "Once", "max_tokens": 1}).encode()
    c.send(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n" + f"{len(data):x}".encode() + b"\r\n" + data + b"\r\n0\r\n\r\n")
    assert c.response()[0] == 200
    c.close()


def test_head_on_get_routes(tiny):
    c = Conn(tiny.url)
    c.send(request("HEAD", "/health"))
    status, headers, _ = c.response(head=True)
    assert status == 200 and int(headers["content-length"]) > 0
    # No body followed: the next response on the connection starts right away.
    c.send(request("GET", "/health"))
    status, _, body = c.response()
    assert status == 200 and json.loads(body) == {"status": "ok"}
    c.close()


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_post_requires_json_content_type(tiny, content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    c = Conn(tiny.url)
    data = json.dumps({"prompt": "Once", "max_tokens": 1}).encode()
    head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    c.send(head.encode() + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    status, _, body = c.response()
    assert status == 415, body
    c.close()
    status, _, _ = http("POST", tiny.url + "/v1/completions", data, headers={"Content-Type": "application/json; charset=utf-8"})
    assert status == 200


def test_cors_off_by_default(tiny):
    status, headers, _ = http("OPTIONS", tiny.url + "/v1/completions",
                              headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert status == 405
    assert "Access-Control-Allow-Origin" not in headers
    status, headers, _ = http("GET", tiny.url + "/v1/models", headers={"Origin": "https://evil.example"})
    assert status == 200 and "Access-Control-Allow-Origin" not in headers


def test_cors_allowed_origins(server_factory):
    s = server_factory(TINY_MODEL, "--max-model-len", 256, "--allowed-origins", "https://app.example, http://localhost:3000")
    pre = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "content-type, authorization"}
    status, headers, _ = http("OPTIONS", s.url + "/v1/chat/completions", headers=pre)
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == "https://app.example"
    assert "POST" in headers["Access-Control-Allow-Methods"]
    assert "Content-Type" in headers["Access-Control-Allow-Headers"]
    status, headers, _ = http("POST", s.url + "/v1/completions", {"prompt": "Once", "max_tokens": 1},
                              headers={"Origin": "http://localhost:3000", "Content-Type": "application/json"})
    assert status == 200 and headers["Access-Control-Allow-Origin"] == "http://localhost:3000"
    status, headers, _ = http("POST", s.url + "/v1/completions", {"prompt": "Once", "max_tokens": 1, "stream": True},
                              headers={"Origin": "http://localhost:3000", "Content-Type": "application/json"})
    assert status == 200 and headers["Access-Control-Allow-Origin"] == "http://localhost:3000"
    status, headers, _ = http("OPTIONS", s.url + "/v1/completions", headers=dict(pre, Origin="https://evil.example"))
    assert status == 405 and "Access-Control-Allow-Origin" not in headers
    any_origin = server_factory(TINY_MODEL, "--max-model-len", 256, "--allowed-origins", "*")
    status, headers, _ = http("GET", any_origin.url + "/health", headers={"Origin": "https://x.example"})
    assert status == 200 and headers["Access-Control-Allow-Origin"] == "*"


def test_connection_cap_refuses_at_once(server_factory):
    s = server_factory(TINY_MODEL, "--max-model-len", 256, "--max-connections", 4)
    held = [Conn(s.url) for _ in range(4)]
    time.sleep(0.3)
    extra = Conn(s.url, timeout=5)
    extra.send(request("GET", "/health"))
    status, headers, body = extra.response()
    assert status == 503 and "too many open connections" in body.decode()
    extra.close()
    for c in held:
        c.close()
    time.sleep(0.3)
    assert http("GET", s.url + "/health")[0] == 200


# ---- defect 9: --metrics-require-key ----

def test_metrics_require_key(server_factory):
    s = server_factory(TINY_MODEL, "--max-model-len", 256, "--api-key", "K1", "--metrics-require-key")
    # (the fixture's health probe passed without a key)
    assert http("GET", s.url + "/metrics")[0] == 401
    assert http("GET", s.url + "/metrics", headers={"Authorization": "Bearer K1"})[0] == 200
    assert http("GET", s.url + "/health")[0] == 200
    open_metrics = server_factory(TINY_MODEL, "--max-model-len", 256, "--api-key", "K1")
    assert http("GET", open_metrics.url + "/metrics")[0] == 200
