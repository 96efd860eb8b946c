"""OpenAI-compatible API end to end: the official `openai` client, curl and raw HTTP against the
real `pagoda serve` binary on real models (SmolLM2-135M-Instruct for chat, stories260K for
completions)."""
import json
import shutil
import socket
import subprocess
import threading

import openai
import pytest
import requests

from conftest import CHAT_MODEL, TINY_MODEL, Server, http

TINY_NAME = "stories260K"


@pytest.fixture(scope="module")
def chat_server():
    s = Server(CHAT_MODEL, "--max-model-len", 1024, "--max-num-seqs", 8)
    yield s
    print(s.output()[-3000:])
    s.kill()


@pytest.fixture(scope="module")
def tiny_server():
    s = Server(TINY_MODEL, "--max-model-len", 512, "--max-num-seqs", 16)
    yield s
    s.kill()


@pytest.fixture(scope="module")
def guarded_server():
    """API keys, a request-rate limit and a small body limit."""
    s = Server(TINY_MODEL, "--max-model-len", 256, "--api-key", "key-one", "--api-key", "key-two",
               "--rate-limit", "rps=1", "--max-body-bytes", 65536, "--served-model-name", "tiny")
    yield s
    s.kill()


def client(server, key="none"):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=120)


# ---- chat ----

def test_models(chat_server):
    models = client(chat_server).models.list()
    assert [m.id for m in models.data] == ["SmolLM2-135M-Instruct.Q4_1"]
    status, _, body = http("GET", chat_server.url + "/v1/models/SmolLM2-135M-Instruct.Q4_1")
    assert status == 200 and json.loads(body)["max_model_len"] == 1024


def test_chat_non_stream_and_usage(chat_server):
    c = client(chat_server)
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "Name the capital city of France."}]
    # (Asked as "What is the capital of France?" the 135M model's first token is a near tie between
    # "The" and "L" (0.08 logits apart): any change of float summation order flips it to French.
    # This wording answers with a clear margin.)
    r = c.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=messages, max_tokens=24, temperature=0)
    assert r.id.startswith("chatcmpl-") and r.object == "chat.completion"
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert "Paris" in choice.message.content
    assert choice.finish_reason in ("stop", "length")
    # prompt_tokens is what /tokenize says the rendered chat prompt has.
    status, _, body = http("POST", chat_server.url + "/tokenize", {"messages": messages})
    assert status == 200
    assert r.usage.prompt_tokens == json.loads(body)["count"]
    assert 1 <= r.usage.completion_tokens <= 24
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_stream_matches_non_stream(chat_server):
    c = client(chat_server)
    messages = [{"role": "user", "content": [{"type": "text", "text": "Name three colors."}]}]
    full = c.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=messages, max_tokens=20, temperature=0)
    chunks = list(c.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=messages, max_tokens=20,
                                            temperature=0, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == full.choices[0].message.content
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == [full.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert all(ch.usage is None for ch in chunks[:-1])


def test_chat_logprobs(chat_server):
    r = client(chat_server).chat.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1", messages=[{"role": "user", "content": "Say hi"}], max_tokens=5,
        temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        # Greedy: the chosen token is the most likely one.
        assert entry.top_logprobs[0].token == entry.token
        assert abs(entry.top_logprobs[0].logprob - entry.logprob) < 1e-4
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob >= entry.top_logprobs[2].logprob
        assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token or "\ufffd" in entry.token
    assert "".join(e.token for e in content) == r.choices[0].message.content


def test_chat_max_completion_tokens_length(chat_server):
    r = client(chat_server).chat.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1", messages=[{"role": "user", "content": "Write a long story."}],
        max_completion_tokens=7, temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 7 and r.choices[0].finish_reason == "length"


# ---- completions (stories260K) ----

def test_completion_greedy_reference(tiny_server):
    r = client(tiny_server).completions.create(model=TINY_NAME, prompt="Once upon a time", max_tokens=10, temperature=0)
    assert r.id.startswith("cmpl-") and r.object == "text_completion"
    # The model card's greedy continuation.
    assert r.choices[0].text.startswith(", there was a little girl named Lily")
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 10


def test_completion_prompt_forms_and_echo(tiny_server):
    c = client(tiny_server)
    status, _, body = http("POST", tiny_server.url + "/tokenize", {"prompt": "Once upon a time"})
    ids = json.loads(body)["tokens"]
    by_text = c.completions.create(model=TINY_NAME, prompt="Once upon a time", max_tokens=6, temperature=0)
    by_ids = c.completions.create(model=TINY_NAME, prompt=ids, max_tokens=6, temperature=0)
    assert by_ids.choices[0].text == by_text.choices[0].text
    many = c.completions.create(model=TINY_NAME, prompt=["Once upon a time", "The dog"], max_tokens=6, temperature=0)
    assert [ch.index for ch in many.choices] == [0, 1]
    assert many.choices[0].text == by_text.choices[0].text
    lists = c.completions.create(model=TINY_NAME, prompt=[ids, ids[:2]], max_tokens=4, temperature=0)
    assert len(lists.choices) == 2 and lists.usage.prompt_tokens == len(ids) + 2
    echo = c.completions.create(model=TINY_NAME, prompt="Once upon a time", max_tokens=6, temperature=0, echo=True)
    assert echo.choices[0].text == "Once upon a time" + by_text.choices[0].text
    # detokenize round trip
    status, _, body = http("POST", tiny_server.url + "/detokenize", {"tokens": ids[1:]})  # without BOS
    assert status == 200 and json.loads(body)["prompt"] == "Once upon a time"


def test_completion_stop(tiny_server):
    c = client(tiny_server)
    base = c.completions.create(model=TINY_NAME, prompt="Once upon a time", max_tokens=20, temperature=0)
    assert "little" in base.choices[0].text
    r = c.completions.create(model=TINY_NAME, prompt="Once upon a time", max_tokens=20, temperature=0, stop=["little", "zzz"])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == base.choices[0].text.split("little")[0]
    s = list(c.completions.create(model=TINY_NAME, prompt="Once upon a time", max_tokens=20, temperature=0, stop="little",
                                  stream=True))
    assert "".join(ch.choices[0].text for ch in s) == r.choices[0].text
    assert s[-1].choices[0].finish_reason == "stop"


def test_n_and_seed(tiny_server):
    c = client(tiny_server)
    kw = dict(model=TINY_NAME, prompt="The cat", max_tokens=24, temperature=1.0, n=3)
    a = c.completions.create(seed=42, **kw)
    b = c.completions.create(seed=42, **kw)
    d = c.completions.create(seed=7, **kw)
    ta, tb, td = ([ch.text for ch in sorted(x.choices, key=lambda ch: ch.index)] for x in (a, b, d))
    assert [ch.index for ch in sorted(a.choices, key=lambda ch: ch.index)] == [0, 1, 2]
    assert ta == tb, "same seed, same output"
    assert ta != td, "different seed, different output"
    assert len(set(ta)) > 1, "n samples differ from each other"
    assert a.usage.completion_tokens == sum(c.usage.completion_tokens for c in [a]) and a.usage.completion_tokens <= 72
    # Streaming with n > 1: every index appears and finishes once.
    chunks = list(c.completions.create(seed=42, stream=True, **kw))
    texts = {}
    finished = {}
    for ch in chunks:
        for choice in ch.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
            if choice.finish_reason:
                finished[choice.index] = choice.finish_reason
    assert [texts[i] for i in range(3)] == ta and sorted(finished) == [0, 1, 2]


def test_completion_logprobs(tiny_server):
    r = client(tiny_server).completions.create(model=TINY_NAME, prompt="Once upon a time", max_tokens=5, temperature=0,
                                               logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 5
    assert "".join(lp.tokens) == r.choices[0].text
    assert all(x <= 0 for x in lp.token_logprobs)
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    for token, top in zip(lp.tokens, lp.top_logprobs):
        assert token in top and max(top.values()) == top[token]


# ---- errors as typed exceptions ----

def test_typed_errors(tiny_server):
    c = client(tiny_server)
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=TINY_NAME, prompt="x", temperature=5)
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=TINY_NAME, prompt="x", max_tokens=100000)
    assert "512" in e.value.message and "100000" in e.value.message  # the numbers
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=TINY_NAME, prompt="once " * 600, max_tokens=4)
    assert "maximum length is 512" in e.value.message
    with pytest.raises(openai.NotFoundError) as e:
        c.completions.create(model="no-such-model", prompt="x")
    assert e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model=TINY_NAME, messages=[{"role": "user", "content": "x"}])  # no chat template


def test_auth_and_rate_limit(guarded_server):
    with pytest.raises(openai.AuthenticationError):
        client(guarded_server, key="wrong").models.list()
    status, headers, body = http("GET", guarded_server.url + "/v1/models")
    assert status == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"
    assert http("GET", guarded_server.url + "/health")[0] == 200  # health and metrics stay open
    assert http("GET", guarded_server.url + "/metrics")[0] == 200
    c = client(guarded_server, key="key-one")
    assert c.models.list().data[0].id == "tiny"
    # rps=1 with a burst of 1: of 5 requests sent at once, about one passes.
    results = []

    def one():
        try:
            c.completions.create(model="tiny", prompt="Once", max_tokens=2)
            results.append("ok")
        except openai.RateLimitError as e:
            results.append("429")
            assert int(e.response.headers["retry-after"]) >= 1
            assert e.body["code"] == "rate_limit_exceeded"

    threads = [threading.Thread(target=one) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results.count("429") >= 2 and results.count("ok") >= 1, results
    # Another key has its own bucket.
    client(guarded_server, key="key-two").completions.create(model="tiny", prompt="Once", max_tokens=2)


def test_queue_full(server_factory):
    s = server_factory(TINY_MODEL, "--max-model-len", 2048, "--max-num-seqs", 1, "--max-queued-requests", 1)
    c = client(s)
    # More sequences than running + waiting could ever hold: a 400 saying why, not a 429 to retry.
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=TINY_NAME, prompt="Once", max_tokens=4, n=3)
    assert e.value.body["code"] == "too_many_sequences"
    stream = c.completions.create(model=TINY_NAME, prompt="Once", max_tokens=1900, stream=True,
                                  extra_body={"ignore_eos": True})
    next(iter(stream))  # running now
    with pytest.raises(openai.RateLimitError) as e:
        c.completions.create(model=TINY_NAME, prompt="Once", max_tokens=4, n=2)
    assert e.value.body["code"] == "queue_full"
    assert "1 sequences running, 0 waiting" in e.value.body["message"]
    stream.close()


# ---- raw HTTP: SSE framing and bad input ----

def test_curl_sse_framing(tiny_server):
    curl = shutil.which("curl")
    if not curl:
        pytest.skip("curl is not installed (apt-get install curl)")
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    out = subprocess.run([curl, "-sN", "-D", "-", "-H", "Content-Type: application/json", "-d", body,
                          tiny_server.url + "/v1/completions"], capture_output=True, timeout=60, check=True).stdout
    head, _, payload = out.partition(b"\r\n\r\n")
    assert b"HTTP/1.1 200" in head and b"text/event-stream" in head.lower()
    assert b"transfer-encoding: chunked" in head.lower()
    events = payload.split(b"\n\n")
    assert events[-1] == b"" and events[-2] == b"data: [DONE]"
    parsed = [json.loads(e[len(b"data: "):]) for e in events[:-2]]
    assert all(e.startswith(b"data: ") for e in events[:-1])
    assert parsed[-1]["choices"] == [] and parsed[-1]["usage"]["completion_tokens"] == 5
    assert "".join(p["choices"][0]["text"] for p in parsed[:-1]).startswith(", there was")
    # Error body through curl.
    out = subprocess.run([curl, "-s", "-w", "\n%{http_code}", "-H", "Content-Type: application/json", "-d", "{bad json",
                          tiny_server.url + "/v1/completions"], capture_output=True, timeout=30, check=True).stdout
    body, _, code = out.rpartition(b"\n")
    assert code == b"400"
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"} and "JSON" in err["message"]


BAD_INPUTS = [
    (b"{not json", 400),
    (b"", 400),
    (b"[]", 400),
    (b'{"prompt": "\xff\xfe bad utf8"}', 400),
    (b'{"prompt": "x", "max_tokens": -5}', 400),
    (b'{"prompt": "x", "max_tokens": "ten"}', 400),
    (b'{"prompt": "x", "max_tokens": 1e999}', 400),
    (b'{"prompt": "x", "max_tokens": 123456789012345678901234567890}', 400),
    (b'{"prompt": "x", "temperature": [1]}', 400),
    (b'{"prompt": {"a": 1}}', 400),
    (b'{"prompt": [99999999]}', 400),
    (b'{"prompt": "x", "stop": {"a": 1}}', 400),
    (b'{"prompt": "x", "n": 100000}', 400),
    (b'{"prompt": "x", "seed": "abc"}', 400),
    (b'{"prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400),
    (b'{"prompt": "Once", "max_tokens": 2, "unknown_field": {"nested": [1, 2, 3]}, "another": null}', 200),
]


@pytest.mark.parametrize("body,status", BAD_INPUTS, ids=[str(i) for i in range(len(BAD_INPUTS))])
def test_bad_input(tiny_server, body, status):
    got, headers, resp = http("POST", tiny_server.url + "/v1/completions", body)
    assert got == status, resp[:300]
    payload = json.loads(resp)
    if status != 200:
        assert payload["error"]["type"] == "invalid_request_error" and payload["error"]["message"]


def test_routes_methods_and_limits(tiny_server, guarded_server):
    status, _, body = http("GET", tiny_server.url + "/v1/nothing")
    assert status == 404 and json.loads(body)["error"]["type"] == "not_found_error"
    status, headers, body = http("GET", tiny_server.url + "/v1/completions")
    assert status == 405 and headers.get("Allow") == "POST"
    status, _, body = http("DELETE", tiny_server.url + "/health")
    assert status == 405
    # Body over the limit: 413 (the client may see the connection close while still sending).
    try:
        r = requests.post(guarded_server.url + "/v1/completions", data=b"x" * 200000,
                          headers={"Authorization": "Bearer key-one", "Content-Type": "application/json"}, timeout=30)
        assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large"
    except requests.ConnectionError:
        pass
    with socket.create_connection(("127.0.0.1", guarded_server.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 413")
    # Oversized headers: 431.
    with socket.create_connection(("127.0.0.1", tiny_server.port), timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40000 + b"\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 431")
    # Garbage that is not HTTP: 400 and close.
    with socket.create_connection(("127.0.0.1", tiny_server.port), timeout=10) as sock:
        sock.sendall(b"\x00\x01\x02 hello\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 400")
    # Keep-alive: several requests on one connection; then a pipelined pair.
    with requests.Session() as s:
        for _ in range(3):
            assert s.get(tiny_server.url + "/health").status_code == 200
    with socket.create_connection(("127.0.0.1", tiny_server.port), timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while data.count(b"HTTP/1.1 200") < 2:
            chunk = sock.recv(65536)
            assert chunk
            data += chunk
    assert tiny_server.proc.poll() is None and http("GET", tiny_server.url + "/health")[0] == 200


def test_concurrent_mixed_requests_survive(tiny_server):
    """Many threads mixing good and bad requests; the server stays up and answers each correctly."""
    errors = []

    def worker(i):
        try:
            c = client(tiny_server)
            if i % 3 == 0:
                with pytest.raises(openai.BadRequestError):
                    c.completions.create(model=TINY_NAME, prompt="x", top_p=0)
            else:
                r = c.completions.create(model=TINY_NAME, prompt="Once upon a time", max_tokens=8, temperature=0,
                                         stream=(i % 2 == 0))
                if i % 2 == 0:
                    text = "".join(ch.choices[0].text for ch in r)
                else:
                    text = r.choices[0].text
                assert text.startswith(", there was")
        except Exception as e:  # noqa: BLE001 - collected and reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors


def test_idle_and_slow_clients_are_dropped(server_factory):
    import time
    s = server_factory(TINY_MODEL, "--max-model-len", 256, "--idle-timeout", 1)
    # Slow-loris: half a request line, then nothing. The server closes the connection.
    with socket.create_connection(("127.0.0.1", s.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        t0 = time.time()
        assert sock.recv(4096) == b""
        assert 0.5 <= time.time() - t0 <= 5
    # An idle keep-alive connection is closed after the timeout too.
    with socket.create_connection(("127.0.0.1", s.port), timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        t0 = time.time()
        assert sock.recv(4096) == b""
        assert 0.5 <= time.time() - t0 <= 5
    assert http("GET", s.url + "/health")[0] == 200


def test_tokens_per_minute_limit_with_refund(server_factory):
    """tpm=120: each request is charged prompt (5) + max_tokens (50) = 55 tokens at admission and
    refunded what it did not generate. The first stops after one token (stop=","), so it gives 49
    back; that refund is what lets the third request in (without it the third would be refused)."""
    s = server_factory(TINY_MODEL, "--max-model-len", 256, "--rate-limit-tpm", 120)
    c = client(s)
    first = c.completions.create(model=TINY_NAME, prompt="Once upon a time", max_tokens=50, temperature=0, stop=",")
    assert first.usage.prompt_tokens == 5 and first.usage.completion_tokens == 1
    for _ in range(2):
        r = c.completions.create(model=TINY_NAME, prompt="Once upon a time", max_tokens=50, temperature=0,
                                 extra_body={"ignore_eos": True})
        assert r.usage.completion_tokens == 50
    with pytest.raises(openai.RateLimitError) as e:
        c.completions.create(model=TINY_NAME, prompt="Once upon a time", max_tokens=50, temperature=0)
    assert int(e.value.response.headers["retry-after"]) >= 10  # ~50 tokens short at 2 tokens/s
