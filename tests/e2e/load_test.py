"""1,000 concurrent streaming clients on loopback (asyncio + aiohttp, bounded in count and time):
all complete with exact token counts; then 1,000 more of which half disconnect mid-stream: those
are cancelled (request_success_total{finished_reason="abort"}), the rest complete, and afterwards
no request runs or waits and every KV block is free (kv_cache_usage_perc == 0)."""
import asyncio
import json
import resource
import time

import aiohttp
import pytest

from conftest import TINY_MODEL, Server

N = 1000
TOKENS = 24


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 8192) if hard != resource.RLIM_INFINITY else 8192
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


async def stream_one(session, url, i, disconnect_after=None, max_tokens=TOKENS):
    body = {"prompt": "Once upon a time", "max_tokens": max_tokens, "temperature": 0.8, "seed": i,
            "ignore_eos": True, "stream": True}
    chunks = 0
    async with session.post(url + "/v1/completions", json=body) as resp:
        if resp.status != 200:
            return ("status", resp.status, await resp.text())
        buffer = b""
        async for data in resp.content.iter_any():
            buffer += data
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                payload = event[len(b"data: "):]
                if payload == b"[DONE]":
                    return ("done", chunks, None)
                j = json.loads(payload)
                if j["choices"] and j["choices"][0]["text"]:
                    chunks += 1
                if disconnect_after is not None and chunks >= disconnect_after:
                    resp.close()  # drop the connection mid-stream
                    return ("disconnected", chunks, None)
    return ("eof", chunks, None)


async def run_clients(url, specs, timeout):
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        return await asyncio.gather(*(stream_one(session, url, i, **spec) for i, spec in enumerate(specs)),
                                    return_exceptions=True)


def wait_for(predicate, timeout, interval=0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


@pytest.fixture(scope="module")
def server():
    if raise_fd_limit() < 2 * N + 200:
        pytest.skip("the open-file limit is too low for 1,000 client + 1,000 server sockets")
    s = Server(TINY_MODEL, "--max-model-len", 512, "--max-num-seqs", 256, "--max-queued-requests", 4 * N,
               "--max-num-batched-tokens", 4096)
    yield s
    print(s.output()[-3000:])
    s.kill()


def test_thousand_streams_complete(server):
    t0 = time.time()
    results = asyncio.run(run_clients(server.url, [{}] * N, timeout=240))
    elapsed = time.time() - t0
    bad = [r for r in results if not (isinstance(r, tuple) and r[0] == "done" and r[1] == TOKENS)]
    assert not bad, f"{len(bad)} of {N} streams failed; first: {bad[:3]}"
    print(f"{N} concurrent streams x {TOKENS} tokens in {elapsed:.1f} s")
    assert server.metric("pagoda:request_success_total", {"finished_reason": "length"}) == N
    assert wait_for(lambda: server.metric("pagoda:num_requests_running") == 0, 10)
    assert server.proc.poll() is None


def test_half_disconnect_frees_every_block(server):
    aborted_before = server.metric("pagoda:request_success_total", {"finished_reason": "abort"}) or 0
    # Odd clients drop after 2 chunks of a long generation; even ones read to the end.
    specs = [{"disconnect_after": 2, "max_tokens": 400} if i % 2 else {} for i in range(N)]
    results = asyncio.run(run_clients(server.url, specs, timeout=240))
    done = [r for r in results if isinstance(r, tuple) and r[0] == "done"]
    dropped = [r for r in results if isinstance(r, tuple) and r[0] == "disconnected"]
    assert len(done) == N // 2 and all(r[1] == TOKENS for r in done), [r for r in results if r not in done][:3]
    assert len(dropped) == N // 2
    # Every dropped stream is cancelled, not run to its 400 tokens: nothing runs or waits soon after.
    assert wait_for(lambda: server.metric("pagoda:num_requests_running") == 0
                    and server.metric("pagoda:num_requests_waiting") == 0, 20), server.metrics()
    assert server.metric("pagoda:request_success_total", {"finished_reason": "abort"}) - aborted_before == N // 2
    assert wait_for(lambda: server.metric("pagoda:kv_cache_usage_perc") == 0, 10), server.metrics()
    # 400-token runs would have produced far more tokens than the survivors' and the drops' few.
    generated = server.metric("pagoda:generation_tokens_total")
    assert generated < 2 * N * TOKENS + (N // 2) * 60, generated
