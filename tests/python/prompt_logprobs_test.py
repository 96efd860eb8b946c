"""vLLM's prompt_logprobs in the Python package (SamplingParams(prompt_logprobs=N) ->
RequestOutput.prompt_logprobs: None for the first prompt token, then {token_id: Logprob} with the
prompt token and the row's top N). Checked against an independent path, the logits `pagoda
dump-layers` writes for the same ids (each prompt logprob is row[next] - logsumexp(row)), and
against the engine's own generated-token logprobs on a prompt that continues a greedy run."""
import json
import math
import struct
import subprocess

import pytest

from llm_test import BINARY, GREEDY, THREADS, TINY_GGUF, pagoda

PROMPT = "Once upon a time there was a little girl who liked to play in the garden with her dog"


@pytest.fixture(scope="module")
def llm():
    # f32 KV: the dumped logits are computed in f32 end to end.
    with pagoda.LLM(str(TINY_GGUF), max_model_len=256, max_num_seqs=8, kv_cache_dtype="f32", threads=THREADS) as m:
        yield m


def dumped_rows(ids, tmp_path):
    """log-softmax rows of `pagoda dump-layers` for `ids`: rows[i] is position i's."""
    r = subprocess.run([BINARY, "dump-layers", "--model", str(TINY_GGUF), "--ids", " ".join(map(str, ids)),
                        "--out", str(tmp_path / "d")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    vocab = json.loads((tmp_path / "d" / "meta.json").read_text())["vocab"]
    flat = struct.unpack(f"<{len(ids) * vocab}f", (tmp_path / "d" / "logits.f32").read_bytes())
    rows = []
    for i in range(len(ids)):
        row = flat[i * vocab:(i + 1) * vocab]
        m = max(row)
        lse = m + math.log(sum(math.exp(x - m) for x in row))
        rows.append([x - lse for x in row])
    return rows


def test_prompt_logprobs_are_the_dumped_logits(llm, tmp_path):
    params = pagoda.SamplingParams(prompt_logprobs=3, max_tokens=2, **GREEDY)
    assert params.prompt_logprobs == 3 and pagoda.SamplingParams().prompt_logprobs is None
    out = llm.generate(PROMPT, params)[0]
    ids = out.prompt_token_ids
    plp = out.prompt_logprobs
    assert len(ids) > 10 and len(plp) == len(ids) and plp[0] is None
    rows = dumped_rows(ids, tmp_path)
    worst = 0.0
    for i in range(1, len(ids)):
        d = plp[i]
        row = rows[i - 1]
        # The prompt token first (dict order), then the top 3 that are not it.
        assert next(iter(d)) == ids[i]
        assert 3 <= len(d) <= 4
        for tok, lp in d.items():
            assert isinstance(lp, pagoda.Logprob)
            worst = max(worst, abs(lp.logprob - row[tok]))
            # rank: 1 + the tokens with a greater logprob (a small tolerance for float ties).
            assert sum(x > lp.logprob + 1e-5 for x in row) + 1 <= lp.rank <= sum(x > lp.logprob - 1e-5 for x in row) + 1
            assert isinstance(lp.decoded_token, str) and lp.decoded_token
        best = sorted(range(len(row)), key=lambda t: -row[t])[:3]
        assert set(best) <= set(d), (i, best, list(d))
    assert worst <= 1e-4, worst
    # Nothing asked, nothing given.
    assert llm.generate(PROMPT, pagoda.SamplingParams(max_tokens=1))[0].prompt_logprobs is None


def test_prompt_logprobs_continue_the_generated_logprobs(llm):
    """A greedy run's generated tokens scored again as prompt tokens: the same logprobs, rank 1."""
    gen = llm.generate(PROMPT, pagoda.SamplingParams(max_tokens=6, logprobs=0, ignore_eos=True, **GREEDY))[0]
    g = gen.outputs[0]
    again = llm.generate({"prompt_token_ids": gen.prompt_token_ids + g.token_ids},
                         pagoda.SamplingParams(prompt_logprobs=0, max_tokens=1, **GREEDY))[0]
    n = len(gen.prompt_token_ids)
    for k, (tok, lp) in enumerate(zip(g.token_ids, g.logprobs)):
        entry = again.prompt_logprobs[n + k]
        assert list(entry) == [tok]
        assert entry[tok].rank == 1
        assert entry[tok].logprob == pytest.approx(lp[tok], abs=1e-4)
    # A prefix-cache hit on the same prompt is not taken: every position is still scored, equal.
    twice = llm.generate({"prompt_token_ids": gen.prompt_token_ids + g.token_ids},
                         pagoda.SamplingParams(prompt_logprobs=0, max_tokens=1, **GREEDY))[0]
    assert [None if e is None else {t: v.logprob for t, v in e.items()} for e in twice.prompt_logprobs] == \
           [None if e is None else {t: v.logprob for t, v in e.items()} for e in again.prompt_logprobs]


def test_prompt_logprobs_batched_streamed_and_with_n(llm):
    prompts = [PROMPT, "The little dog ran", "Hi"]
    params = pagoda.SamplingParams(prompt_logprobs=1, max_tokens=3, **GREEDY)
    batch = llm.generate(prompts, params)
    for p, b in zip(prompts, batch):
        alone = llm.generate(p, params)[0]
        assert len(b.prompt_logprobs) == len(b.prompt_token_ids)
        assert [None if e is None else {t: v.logprob for t, v in e.items()} for e in b.prompt_logprobs] == \
               [None if e is None else {t: v.logprob for t, v in e.items()} for e in alone.prompt_logprobs]
    # Streaming: the request's first delta carries them, the later ones do not.
    stream = llm.stream(prompts, params)
    seen = {}
    for delta in stream:
        first = delta.request_id not in seen
        seen.setdefault(delta.request_id, 0)
        seen[delta.request_id] += 1
        if first:
            assert delta.prompt_logprobs is not None and len(delta.prompt_logprobs) == len(delta.prompt_token_ids)
        else:
            assert delta.prompt_logprobs is None
    assert len(seen) == 3 and all(v == 3 for v in seen.values())
    # n samples share one prompt: one list.
    two = llm.generate(PROMPT, pagoda.SamplingParams(n=2, temperature=1.0, seed=3, prompt_logprobs=0, max_tokens=3))[0]
    assert len(two.outputs) == 2 and len(two.prompt_logprobs) == len(two.prompt_token_ids)
    assert [e and list(e) for e in two.prompt_logprobs] == [e and list(e) for e in batch[0].prompt_logprobs[:1]] + \
           [[t] for t in two.prompt_token_ids[1:]]


def test_prompt_logprobs_out_of_range_is_a_value_error():
    for bad in (-1, 21):
        with pytest.raises(ValueError, match="prompt_logprobs"):
            pagoda.SamplingParams(prompt_logprobs=bad)
