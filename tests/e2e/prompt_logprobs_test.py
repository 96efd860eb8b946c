"""Prompt logprobs end to end, through the official `openai` client against `pagoda serve`:
OpenAI's legacy `echo` + `logprobs` on /v1/completions (the prompt tokens lead the logprobs
object, the first one null) and vLLM's `prompt_logprobs` extension on completions and chat.

The figures are checked against an independent path: the logits `pagoda dump-layers` writes for
the same ids (each prompt logprob is -(logsumexp(row) - row[next token])), and `pagoda perplexity`
over the same chunk (its perplexity is exp of the mean NLL of the chunk's second half)."""
import json
import math
import struct
import subprocess

import openai
import pytest

from conftest import BINARY, CHAT_MODEL, MODELS_DIR, Server, http
from perplexity_test import TEXT

F32 = MODELS_DIR / "tiny" / "llama3" / "model-f32.gguf"
CTX = 64


def run(*args):
    p = subprocess.run([BINARY, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.fixture(scope="module")
def chunk():
    """The perplexity tool's first chunk of TEXT: BOS, then the text's tokens 1..CTX-1."""
    ids = [int(x) for x in run("tokenize", "--model", F32, "--no-bos", "--file", TEXT).split()]
    bos = int(run("tokenize", "--model", F32, "--text", "x").split()[0])
    return [bos] + ids[1:CTX]


@pytest.fixture(scope="module")
def server():
    s = Server(F32, "--kv-dtype", "f32", "--max-model-len", 256, "--max-num-seqs", 8)
    yield s
    s.kill()


def client(s):
    return openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=120)


def model_name(s):
    return client(s).models.list().data[0].id


@pytest.fixture(scope="module")
def dumped_nll(chunk, tmp_path_factory):
    """nll[i] = -log p(chunk[i + 1] | chunk[:i + 1]) from dump-layers' logits."""
    out = tmp_path_factory.mktemp("dump")
    run("dump-layers", "--model", F32, "--ids", " ".join(map(str, chunk)), "--out", out / "d")
    vocab = json.loads((out / "d" / "meta.json").read_text())["vocab"]
    logits = struct.unpack(f"<{CTX * vocab}f", (out / "d" / "logits.f32").read_bytes())
    nll = []
    for i in range(CTX - 1):
        row = logits[i * vocab:(i + 1) * vocab]
        m = max(row)
        nll.append(m + math.log(sum(math.exp(x - m) for x in row)) - row[chunk[i + 1]])
    return nll


def test_echo_with_logprobs_gives_the_prompt_logprobs_of_the_dumped_logits(server, chunk, dumped_nll):
    c = client(server)
    r = c.completions.create(model=model_name(server), prompt=chunk, echo=True, logprobs=2, max_tokens=3, temperature=0)
    lp = r.choices[0].logprobs
    assert r.usage.prompt_tokens == CTX
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == CTX + 3
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    worst = max(abs(-lp.token_logprobs[i + 1] - dumped_nll[i]) for i in range(CTX - 1))
    assert worst <= 1e-4, worst
    # The prompt NLL is minus the sum of the returned prompt logprobs.
    assert abs(-sum(lp.token_logprobs[1:CTX]) - sum(dumped_nll)) <= 1e-3
    for i in range(1, CTX):
        top = lp.top_logprobs[i]
        assert lp.tokens[i] in top and 2 <= len(top) <= 3  # the prompt token and the top 2
        assert max(top.values()) >= lp.token_logprobs[i] - 1e-6
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    assert all(x is not None for x in lp.token_logprobs[CTX:])  # the completion's own
    # Streamed, the same entries arrive (the prompt's in the first chunk).
    chunks = list(c.completions.create(model=model_name(server), prompt=chunk, echo=True, logprobs=2, max_tokens=3,
                                       temperature=0, stream=True))
    assert len(chunks[0].choices[0].logprobs.tokens) == CTX + 1
    streamed = [x for ch in chunks if ch.choices and ch.choices[0].logprobs for x in ch.choices[0].logprobs.token_logprobs]
    assert streamed == lp.token_logprobs


def test_perplexity_over_the_chunk_equals_the_prompt_logprobs(server, chunk):
    r = client(server).completions.create(model=model_name(server), prompt=chunk, echo=True, logprobs=0, max_tokens=1,
                                          temperature=0)
    lps = r.choices[0].logprobs.token_logprobs
    scored = [-lps[i + 1] for i in range(CTX // 2, CTX - 1)]  # llama-perplexity scores the second half
    want = json.loads(run("perplexity", F32, "-f", TEXT, "-c", CTX, "--device", "cpu", "--kv-dtype", "f32", "--json",
                          "--chunks", 1))
    assert want["scored_tokens"] == len(scored)
    got = math.exp(sum(scored) / len(scored))
    assert abs(got - want["perplexity"]) <= 1e-4 * want["perplexity"], (got, want["perplexity"])


def test_vllm_prompt_logprobs_on_completions_and_after_a_prefix_hit(server, chunk):
    c = client(server)
    name = model_name(server)
    c.completions.create(model=name, prompt=chunk, max_tokens=1)  # the prompt's blocks in the prefix cache
    hit = c.completions.create(model=name, prompt=chunk, max_tokens=1)
    assert hit.usage.prompt_tokens_details.cached_tokens > 0
    echo = c.completions.create(model=name, prompt=chunk, echo=True, logprobs=0, max_tokens=1, temperature=0)
    r = c.completions.create(model=name, prompt=chunk, max_tokens=2, temperature=0, extra_body={"prompt_logprobs": 3})
    assert r.usage.prompt_tokens_details.cached_tokens == 0  # every position computed
    plp = r.choices[0].model_extra["prompt_logprobs"]
    assert len(plp) == CTX and plp[0] is None
    for i in range(1, CTX):
        entry = plp[i]
        mine = entry[str(chunk[i])]
        assert abs(mine["logprob"] - echo.choices[0].logprobs.token_logprobs[i]) <= 1e-6
        assert mine["rank"] >= 1 and isinstance(mine["decoded_token"], str)
        ranks = sorted(v["rank"] for v in entry.values())
        assert ranks[0] == 1 and 3 <= len(entry) <= 4  # the prompt token and the top 3
        best = max(v["logprob"] for v in entry.values())
        assert all(v["rank"] == 1 for v in entry.values() if v["logprob"] == best)
    # Without echo the text is the completion's only; the logprobs field stays as asked (none).
    assert r.choices[0].logprobs is None
    # n = 2: every choice carries them.
    two = c.completions.create(model=name, prompt=chunk, max_tokens=2, temperature=0, n=2, extra_body={"prompt_logprobs": 0})
    for ch in two.choices:
        got = ch.model_extra["prompt_logprobs"]
        assert [None if e is None else e[str(chunk[i])]["logprob"] for i, e in enumerate(got)] == \
               [None if e is None else e[str(chunk[i])]["logprob"] for i, e in enumerate(plp)]


def test_out_of_range_prompt_logprobs_are_400s(server):
    for value in (21, -1, "3", True):
        with pytest.raises(openai.BadRequestError) as e:
            client(server).completions.create(model=model_name(server), prompt="x", max_tokens=1,
                                              extra_body={"prompt_logprobs": value})
        assert e.value.body["param"] == "prompt_logprobs"


def test_chat_prompt_logprobs_at_the_top_level():
    s = Server(CHAT_MODEL, "--max-model-len", 512, "--max-num-seqs", 4)
    try:
        c = client(s)
        r = c.chat.completions.create(model=model_name(s), messages=[{"role": "user", "content": "Say hi."}],
                                      max_tokens=3, temperature=0, extra_body={"prompt_logprobs": 1})
        plp = r.model_extra["prompt_logprobs"]
        assert len(plp) == r.usage.prompt_tokens and plp[0] is None
        ids = json.loads(http("POST", s.url + "/tokenize", {"messages": [{"role": "user", "content": "Say hi."}]})[2])["tokens"]
        assert len(ids) == len(plp)
        for i in range(1, len(ids)):
            assert str(ids[i]) in plp[i] and all(v["logprob"] <= 0 for v in plp[i].values())
    finally:
        s.kill()
