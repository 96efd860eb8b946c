"""The remaining OpenAI / vLLM request parameters end to end, through the official `openai` client
against the real `pagoda serve`: logit_bias, logprobs under a structured-output constraint,
echo, suffix (fill in the middle, on a GGUF whose vocabulary has FIM tokens), n with best_of,
stream_options.continuous_usage_stats, chat_template_kwargs, truncate_prompt_tokens, add_special_tokens,
return_tokens_as_token_ids, GET /version, and the known fields we do not honour (400s)."""
import json
import math
import pathlib
import shutil

import numpy as np
import openai
import pytest

from conftest import CHAT_MODEL, TINY_MODEL, Server, http

TINY = "stories260K"
CHAT = "SmolLM2-135M-Instruct.Q4_1"


@pytest.fixture(scope="module")
def tiny_server():
    s = Server(TINY_MODEL, "--max-model-len", 512, "--max-num-seqs", 16)
    yield s
    s.kill()


@pytest.fixture(scope="module")
def chat_server():
    s = Server(CHAT_MODEL, "--max-model-len", 1024, "--max-num-seqs", 8)
    yield s
    s.kill()


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)


def tokenize(server, text, add_special=True):
    status, _, body = http("POST", server.url + "/tokenize", {"prompt": text, "add_special_tokens": add_special})
    assert status == 200, body
    return json.loads(body)["tokens"]


# ---- logit_bias ----

def test_logit_bias_bans_and_forces_tokens(tiny_server):
    c = client(tiny_server)
    kw = dict(model=TINY, prompt="Once upon a time", max_tokens=6, temperature=0, logprobs=1,
              extra_body={"return_tokens_as_token_ids": True})
    ids = lambda r: [int(t.split(":")[1]) for t in r.choices[0].logprobs.tokens]  # noqa: E731
    base = c.completions.create(**kw)
    first = ids(base)[0]
    banned = c.completions.create(logit_bias={str(first): -100}, **kw)
    assert ids(banned)[0] != first
    # The reported logprobs are of the unbiased distribution: the banned token is still listed
    # as the most likely one at the first position.
    assert f"token_id:{first}" in banned.choices[0].logprobs.top_logprobs[0]
    forced_id = tokenize(tiny_server, " dog", add_special=False)[-1]
    forced = c.completions.create(logit_bias={str(forced_id): 100}, **kw)
    assert ids(forced) == [forced_id] * 6
    # Streaming and n > 1 see the same bias.
    chunks = list(c.completions.create(logit_bias={str(forced_id): 100}, stream=True, n=2, **kw))
    texts = {}
    for ch in chunks:
        for choice in ch.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
    assert texts == {0: forced.choices[0].text, 1: forced.choices[0].text}


def tokenize_piece(server, token_id):
    status, _, body = http("POST", server.url + "/detokenize", {"tokens": [token_id]})
    assert status == 200
    return json.loads(body)["prompt"]


def test_logit_bias_on_chat_and_its_errors(chat_server, tiny_server):
    c = client(chat_server)
    forced_id = tokenize(chat_server, " yes", add_special=False)[-1]
    r = c.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "Say something."}], max_tokens=4,
                                  temperature=0.8, seed=1, logit_bias={str(forced_id): 100})
    assert r.choices[0].message.content == " yes" * 4
    t = client(tiny_server)
    for bias, why in [({"512": 1}, "outside the vocabulary"), ({"5": 101}, "[-100, 100]"), ({"x": 1}, "token ids")]:
        with pytest.raises(openai.BadRequestError) as e:
            t.completions.create(model=TINY, prompt="Once", max_tokens=2, logit_bias=bias)
        assert e.value.body["param"] == "logit_bias" and why in e.value.body["message"], e.value.body


# ---- logprobs of the distribution sampled from (structured output) ----

def test_logprobs_under_a_constraint_are_of_the_allowed_tokens(tiny_server):
    c = client(tiny_server)
    choices = ["yes", "no", "maybe"]
    eos = "</s>"
    for temperature in (0, 1.0):
        # Token ids as labels: several tokens share a text (byte-fallback pieces), and the
        # completions format keys top_logprobs by the label.
        r = c.completions.create(model=TINY, prompt="Is it?", max_tokens=8, temperature=temperature, seed=5, logprobs=5,
                                 extra_body={"guided_choice": choices, "return_tokens_as_token_ids": True})
        assert r.choices[0].text in choices
        lp = r.choices[0].logprobs
        text = lambda label: tokenize_piece(tiny_server, int(label.split(":")[1]))  # noqa: E731
        # The end token the constraint allows once a choice is complete is part of the tokens.
        assert text(lp.tokens[-1]) == eos and "".join(text(t) for t in lp.tokens[:-1]) == r.choices[0].text
        done = ""
        for token, top in zip(lp.tokens, lp.top_logprobs):
            # Only tokens the constraint allows here are listed, and they carry the whole mass
            # when fewer than 5 are allowed.
            assert token in top
            for label in top:
                t = text(label)
                assert any(ch.startswith(done + t) for ch in choices) or (t == eos and done in choices), (done, t, top)
            mass = sum(math.exp(v) for v in top.values())
            assert mass <= 1 + 1e-4
            if len(top) < 5:
                assert abs(mass - 1) < 1e-3, top
            done += text(token) if text(token) != eos else ""


def test_chat_logprobs_streaming_with_json_schema(chat_server):
    c = client(chat_server)
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
              "additionalProperties": False}
    kw = dict(model=CHAT, messages=[{"role": "user", "content": "Name a city as JSON."}], max_tokens=24, temperature=0,
              logprobs=True, top_logprobs=3,
              response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema, "strict": True}})
    full = c.chat.completions.create(**kw)
    json.loads(full.choices[0].message.content)
    entries = [e for ch in c.chat.completions.create(stream=True, **kw) if ch.choices and ch.choices[0].logprobs
               for e in ch.choices[0].logprobs.content]
    assert [e.token for e in entries] == [e.token for e in full.choices[0].logprobs.content]
    assert entries[-1].token == "<|im_end|>"  # the end token, allowed once the object is closed
    assert "".join(e.token for e in entries[:-1]) == full.choices[0].message.content
    for e in entries:
        assert e.top_logprobs[0].token == e.token  # greedy: the chosen token is the best allowed one
        assert sum(math.exp(t.logprob) for t in e.top_logprobs) <= 1 + 1e-4
    # The first token must open the object: every listed alternative does too.
    assert all(t.token.startswith("{") for t in entries[0].top_logprobs), entries[0].top_logprobs


# ---- echo, suffix ----

def test_echo_streamed_and_with_n(tiny_server):
    c = client(tiny_server)
    kw = dict(model=TINY, prompt="Once upon a time", max_tokens=5, temperature=0, echo=True)
    full = c.completions.create(**kw)
    assert full.choices[0].text.startswith("Once upon a time")
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(stream=True, **kw))
    assert streamed == full.choices[0].text
    many = c.completions.create(n=2, **kw)
    assert [ch.text for ch in many.choices] == [full.choices[0].text] * 2


def test_suffix_without_fim_tokens_is_a_400(tiny_server, chat_server):
    for server, name in [(tiny_server, TINY), (chat_server, CHAT)]:
        with pytest.raises(openai.BadRequestError) as e:
            client(server).completions.create(model=name, prompt="def f(", suffix="    return x\n", max_tokens=4)
        assert e.value.body["param"] == "suffix" and "no FIM tokens" in e.value.body["message"]


def fim_gguf(dest):
    """stories260K with three of its 5-byte pieces respelled as CodeLlama's FIM tokens (<PRE>,
    <SUF>, <MID>, control tokens): same file layout, a vocabulary that can fill in the middle."""
    import gguf
    shutil.copy(TINY_MODEL, dest)
    reader = gguf.GGUFReader(str(dest), "r+")
    tokens = reader.fields["tokenizer.ggml.tokens"]
    types = reader.fields["tokenizer.ggml.token_type"]
    n = len(tokens.data)
    picked = [i for i in range(n - 1, 0, -1) if len(bytes(tokens.parts[tokens.data[i]])) == 5][:3]
    assert len(picked) == 3
    ids = {}
    for name, i in zip(["<PRE>", "<SUF>", "<MID>"], picked):
        tokens.parts[tokens.data[i]][:] = np.frombuffer(name.encode(), dtype=np.uint8)
        types.parts[types.data[i]][0] = 3  # CONTROL
        ids[name] = i
    reader.data.flush()
    return ids


def test_suffix_fills_in_the_middle(tmp_path):
    path = tmp_path / "stories260K-fim.gguf"
    fim = fim_gguf(path)
    s = Server(path, "--max-model-len", 256)
    try:
        c = client(s)
        name = c.models.list().data[0].id
        prefix, suffix = "Once upon a time", " and they lived happily."
        r = c.completions.create(model=name, prompt=prefix, suffix=suffix, max_tokens=8, temperature=0)
        bos = tokenize(s, "", add_special=True)
        ids = bos + [fim["<PRE>"]] + tokenize(s, prefix, False) + [fim["<SUF>"]] + tokenize(s, suffix, False) + [fim["<MID>"]]
        by_ids = c.completions.create(model=name, prompt=ids, max_tokens=8, temperature=0)
        assert r.usage.prompt_tokens == len(ids)
        assert r.choices[0].text == by_ids.choices[0].text and r.usage.completion_tokens == 8
        # Without the suffix the prompt (and so the continuation's context) is another one.
        plain = c.completions.create(model=name, prompt=prefix, max_tokens=8, temperature=0)
        assert plain.usage.prompt_tokens == len(bos) + len(tokenize(s, prefix, False))
    finally:
        s.kill()


def fim_keys_gguf(dest, keys):
    """stories260K with tokenizer.ggml FIM keys added (`keys`: key -> token id), its vocabulary
    unchanged: no token is spelled as a known FIM marker, so only the keys name them."""
    import gguf
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata
    reader = gguf.GGUFReader(str(TINY_MODEL), "r")
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(dest), arch=arch, endianess=reader.endianess)
    copy_with_new_metadata(reader, writer, {k: MetadataDetails(gguf.GGUFValueType.UINT32, v) for k, v in keys.items()}, [])


@pytest.mark.parametrize("names", [("fim_pre", "fim_suf", "fim_mid"), ("prefix", "suffix", "middle")])
def test_suffix_uses_the_gguf_fim_keys(tmp_path, names):
    ids = {"pre": 300, "suf": 301, "mid": 302}  # ordinary pieces of the vocabulary
    keys = {f"tokenizer.ggml.{n}_token_id": v for n, v in zip(names, ids.values())}
    path = tmp_path / "stories260K-fim-keys.gguf"
    fim_keys_gguf(path, keys)
    partial = tmp_path / "stories260K-two-keys.gguf"
    fim_keys_gguf(partial, dict(list(keys.items())[:2]))
    s = Server(path, "--max-model-len", 256)
    try:
        c = client(s)
        name = c.models.list().data[0].id
        prefix, suffix = "Once upon a time", " and they lived happily."
        r = c.completions.create(model=name, prompt=prefix, suffix=suffix, max_tokens=8, temperature=0)
        bos = tokenize(s, "", add_special=True)
        prompt = bos + [ids["pre"]] + tokenize(s, prefix, False) + [ids["suf"]] + tokenize(s, suffix, False) + [ids["mid"]]
        by_ids = c.completions.create(model=name, prompt=prompt, max_tokens=8, temperature=0)
        assert r.usage.prompt_tokens == len(prompt)
        assert r.choices[0].text == by_ids.choices[0].text
    finally:
        s.kill()
    # Two of the three keys (and no spelled FIM tokens): still a 400.
    s = Server(partial, "--max-model-len", 256)
    try:
        with pytest.raises(openai.BadRequestError) as e:
            client(s).completions.create(model=client(s).models.list().data[0].id, prompt="x", suffix="y", max_tokens=2)
        assert e.value.body["param"] == "suffix"
    finally:
        s.kill()


# ---- n with best_of ----

def test_best_of_returns_the_n_best_by_mean_logprob(tiny_server):
    c = client(tiny_server)
    kw = dict(model=TINY, prompt="The cat", max_tokens=12, temperature=1.0, seed=11)
    every = c.completions.create(n=5, logprobs=0, **kw)
    samples = sorted(every.choices, key=lambda ch: ch.index)
    means = [sum(ch.logprobs.token_logprobs) / len(ch.logprobs.token_logprobs) for ch in samples]
    best = [samples[i].text for i in sorted(range(5), key=lambda i: -means[i])[:2]]
    r = c.completions.create(n=2, best_of=5, **kw)
    assert [ch.index for ch in r.choices] == [0, 1]
    assert [ch.text for ch in r.choices] == best
    assert r.choices[0].logprobs is None  # not asked for
    assert r.usage.completion_tokens == every.usage.completion_tokens  # all five generated
    with_lp = c.completions.create(n=2, best_of=5, logprobs=2, **kw)
    assert [ch.text for ch in with_lp.choices] == best
    assert all(len(ch.logprobs.top_logprobs[0]) >= 1 for ch in with_lp.choices)
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(n=2, best_of=5, stream=True, **kw)
    assert e.value.body["param"] == "best_of"
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(n=3, best_of=2, **kw)
    assert e.value.body["param"] == "best_of"


# ---- usage, prompt handling, token labels ----

def test_continuous_usage_stats(chat_server):
    c = client(chat_server)
    chunks = list(c.chat.completions.create(
        model=CHAT, messages=[{"role": "user", "content": "Count to five."}], max_tokens=10, temperature=0, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True}))
    with_choices = [ch for ch in chunks if ch.choices]
    assert with_choices and all(ch.usage is not None for ch in with_choices)
    done = [ch.usage.completion_tokens for ch in with_choices]
    assert done == sorted(done) and done[-1] == chunks[-1].usage.completion_tokens
    assert all(ch.usage.prompt_tokens == chunks[-1].usage.prompt_tokens for ch in with_choices)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 10


def test_truncate_add_special_and_token_ids(tiny_server):
    c = client(tiny_server)
    prompt = "Once upon a time there was a little girl named Lily who loved to play"
    n = len(tokenize(tiny_server, prompt))
    r = c.completions.create(model=TINY, prompt=prompt, max_tokens=2, temperature=0,
                             extra_body={"truncate_prompt_tokens": 5})
    assert r.usage.prompt_tokens == 5 < n
    r = c.completions.create(model=TINY, prompt=prompt, max_tokens=2, extra_body={"add_special_tokens": False})
    assert r.usage.prompt_tokens == n - 1  # without BOS
    r = c.completions.create(model=TINY, prompt=prompt, max_tokens=3, temperature=0, logprobs=2,
                             extra_body={"return_tokens_as_token_ids": True})
    assert all(t.startswith("token_id:") for t in r.choices[0].logprobs.tokens)
    ids = [int(t.split(":")[1]) for t in r.choices[0].logprobs.tokens]
    status, _, body = http("POST", tiny_server.url + "/detokenize", {"tokens": ids})
    assert json.loads(body)["prompt"] == r.choices[0].text.lstrip() or json.loads(body)["prompt"] in r.choices[0].text


def test_chat_template_kwargs_reach_the_template(tmp_path):
    """vLLM's chat_template_kwargs: extra variables the chat template sees (here a template, written
    into a copy of stories260K, that adds a line only when `loud` is set); a non-object is a 400."""
    from gguf_metadata import with_string_key
    model = tmp_path / "stories260K-kwargs.gguf"
    with_string_key(TINY_MODEL, model, "tokenizer.chat_template",
                    "{% if loud %}LOUD LOUD LOUD. {% endif %}{% for m in messages %}{{ m.content }}\n{% endfor %}")
    s = Server(model, "--max-model-len", 256, "--max-num-seqs", 4)
    try:
        c = client(s)
        kw = dict(model="stories260K-kwargs", messages=[{"role": "user", "content": "Once upon a time"}], max_tokens=2,
                  temperature=0)
        quiet = c.chat.completions.create(**kw)
        loud = c.chat.completions.create(extra_body={"chat_template_kwargs": {"loud": True}}, **kw)
        off = c.chat.completions.create(extra_body={"chat_template_kwargs": {"loud": False}}, **kw)
        assert loud.usage.prompt_tokens > quiet.usage.prompt_tokens == off.usage.prompt_tokens
        status, _, body = http("POST", s.url + "/v1/chat/completions", {**kw, "chat_template_kwargs": [1]})
        assert status == 400 and b"chat_template_kwargs" in body, body
    finally:
        s.kill()


def test_version_and_models(tiny_server):
    status, _, body = http("GET", tiny_server.url + "/version")
    assert status == 200
    version = json.loads(body)["version"]
    assert version.count(".") == 2 and all(p.isdigit() for p in version.split("."))
    m = client(tiny_server).models.list().data[0]
    assert m.model_extra["max_model_len"] == 512


@pytest.mark.parametrize("field,value", [("use_beam_search", True), ("allowed_token_ids", [1]),
                                         ("bad_words", ["dog"]), ("length_penalty", 0.5), ("return_token_ids", True)])
def test_known_fields_not_honoured_are_400s(tiny_server, field, value):
    with pytest.raises(openai.BadRequestError) as e:
        client(tiny_server).completions.create(model=TINY, prompt="Once", max_tokens=2, extra_body={field: value})
    assert e.value.body["param"] == field and e.value.body["code"] == "unsupported_parameter"
    # Its default value is accepted.
    default = {"use_beam_search": False, "allowed_token_ids": [], "bad_words": [],
               "length_penalty": 1.0, "return_token_ids": False}[field]
    client(tiny_server).completions.create(model=TINY, prompt="Once", max_tokens=2, extra_body={field: default})


def test_chat_only_fields_not_honoured(chat_server):
    c = client(chat_server)
    for extra in [{"functions": [{"name": "f", "parameters": {}}]}, {"echo": True}, {"chat_template": "{{ 1 }}"},
                  {"modalities": ["text", "audio"]}]:
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                      extra_body=extra)
        assert e.value.body["param"] == next(iter(extra)), e.value.body
