"""Structured outputs and tool calling end to end: the real `pagoda serve` and the official
`openai` client. Every constrained output is checked with the `jsonschema` package (a generated
corpus of 200 schemas covering every supported keyword, greedy and sampled, on stories260K whose
random-ish text the grammar forces into shape), regex / choice / grammar outputs with Python's
own matchers (generated corpora of 100 patterns, as regexes and as GBNF grammars, and 60 choice lists),
tool calls streamed and not, a tool-calling loop on SmolLM2-135M-Instruct, and constrained
requests on a server that speculates (same greedy outputs as without)."""
import concurrent.futures
import json
import re

import jsonschema
import openai
import pytest

from conftest import CHAT_MODEL, TINY_MODEL, Server, http
from structured_corpus import CHOICES, PATTERNS, SCHEMAS

TINY_NAME = "stories260K"
CHAT_NAME = "SmolLM2-135M-Instruct.Q4_1"


@pytest.fixture(scope="module")
def tiny_server():
    s = Server(TINY_MODEL, "--max-model-len", 512, "--max-num-seqs", 32)
    yield s
    s.kill()


@pytest.fixture(scope="module")
def chat_server():
    s = Server(CHAT_MODEL, "--max-model-len", 2048, "--max-num-seqs", 8)
    yield s
    print(s.output()[-3000:])
    s.kill()


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=600)




def check(schema, text):
    value = json.loads(text)
    jsonschema.validate(value, schema, cls=jsonschema.Draft202012Validator,
                        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    return value


def test_json_schema_corpus_greedy_and_sampled(tiny_server):
    c = client(tiny_server)

    def one(i, sampled):
        schema = SCHEMAS[i]
        kw = {"temperature": 1.0, "seed": i} if sampled else {"temperature": 0}
        # Half through vLLM's structured_outputs, half through guided_json.
        extra = {"structured_outputs": {"json": schema}} if i % 2 else {"guided_json": schema}
        r = c.completions.create(model=TINY_NAME, prompt="Once upon a time", max_tokens=300, extra_body=extra, **kw)
        ch = r.choices[0]
        assert ch.finish_reason == "stop", (i, schema, ch.text)
        try:
            check(schema, ch.text)
        except Exception as e:  # noqa: BLE001 (the message names the schema)
            raise AssertionError(f"schema {i} {json.dumps(schema)}: {ch.text!r}: {e}") from e
        return ch.text

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        jobs = [pool.submit(one, i, s) for i in range(len(SCHEMAS)) for s in (False, True)]
        outs = [j.result() for j in jobs]
    # The outputs vary (the constraint did not force one string everywhere).
    assert len(set(outs)) > 150


def test_response_format_on_chat(chat_server):
    c = client(chat_server)
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}, "population": {"type": "integer", "minimum": 0, "maximum": 99999999}},
              "required": ["city", "population"], "additionalProperties": False}
    r = c.chat.completions.create(model=CHAT_NAME, messages=[{"role": "user", "content": "Name a big city and its population."}],
                                  max_tokens=40, temperature=0,
                                  response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}})
    assert r.choices[0].finish_reason == "stop"
    check(schema, r.choices[0].message.content)
    r = c.chat.completions.create(model=CHAT_NAME, messages=[{"role": "user", "content": "Reply in JSON."}], max_tokens=40,
                                  temperature=0.7, seed=3, response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:  # cut by max_tokens: still a prefix of an object
        assert r.choices[0].message.content.startswith("{")
    # Streaming: the concatenated deltas are the same kind of valid output.
    chunks = c.chat.completions.create(model=CHAT_NAME, messages=[{"role": "user", "content": "A city?"}], max_tokens=40, temperature=0,
                                       stream=True, response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}})
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    check(schema, text)


def test_structured_outputs_with_speculation(tiny_server):
    """A server speculating with n-gram lookup (docs/speculative_decoding.md, "Structured outputs"):
    the greedy outputs of 40 schemas and 20 regexes are those of the plain server, sampled ones
    are valid, and drafts were verified and accepted for constrained requests."""
    spec_server = Server(TINY_MODEL, "--max-model-len", 512, "--max-num-seqs", 32,
                         "--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 4}))
    try:
        plain_c, spec_c = client(tiny_server), client(spec_server)

        def one(kind, i, sampled):
            kw = {"temperature": 1.0, "seed": 7 + i} if sampled else {"temperature": 0}
            if kind == "json":
                extra, ok = {"guided_json": SCHEMAS[i]}, lambda t: isinstance(check(SCHEMAS[i], t), object)  # raises if invalid
            else:
                extra, ok = {"guided_regex": PATTERNS[i][0]}, lambda t: re.fullmatch(PATTERNS[i][0], t) is not None
            # A prompt that repeats: n-gram lookup has something to find beside the output's structure.
            prompt = "Once upon a time a cat sat. Once upon a time a cat sat. Once upon a time"
            r = spec_c.completions.create(model=TINY_NAME, prompt=prompt, max_tokens=200, extra_body=extra, **kw)
            t = r.choices[0].text
            assert r.choices[0].finish_reason == "stop", (kind, i, t)
            assert ok(t), (kind, i, kw, t)
            if not sampled:
                p = plain_c.completions.create(model=TINY_NAME, prompt=prompt, max_tokens=200, extra_body=extra, **kw)
                assert p.choices[0].text == t, (kind, i, p.choices[0].text, t)
            return t

        cases = [("json", i) for i in range(40)] + [("regex", i) for i in range(20)]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            [j.result() for j in [pool.submit(one, k, i, s) for k, i in cases for s in (False, True)]]
        metrics = http("GET", spec_server.url + "/metrics")[2]
        metrics = metrics.decode() if isinstance(metrics, bytes) else metrics
        counts = {name: float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if not line.startswith("#")
                  for name in ("pagoda:spec_decode_num_draft_tokens_total", "pagoda:spec_decode_num_accepted_tokens_total")
                  if line.startswith(name)}
        print("[structured-spec]", counts)
        assert counts.get("pagoda:spec_decode_num_draft_tokens_total", 0) > 0, counts
        assert counts.get("pagoda:spec_decode_num_accepted_tokens_total", 0) > 0, counts
    finally:
        spec_server.kill()


def test_regex_choice_and_grammar(tiny_server):
    c = client(tiny_server)
    cases = [
        ({"guided_regex": "[A-Z][a-z]{2,6} (is|was) [0-9]{1,3}"}, lambda t: re.fullmatch(r"[A-Z][a-z]{2,6} (is|was) [0-9]{1,3}", t)),
        ({"structured_outputs": {"regex": "(\\+|-)?\\d{1,4}(\\.\\d{1,2})?"}}, lambda t: re.fullmatch(r"(\+|-)?\d{1,4}(\.\d{1,2})?", t)),
        ({"guided_choice": ["positive", "negative", "neutral"]}, lambda t: t in ("positive", "negative", "neutral")),
        ({"structured_outputs": {"choice": ["yes", "no"]}}, lambda t: t in ("yes", "no")),
        ({"guided_grammar": 'root ::= expr\nexpr ::= term (("+" | "*") term){0,3}\nterm ::= [1-9] | "(" expr ")"'},
         lambda t: re.fullmatch(r"[0-9+*()]+", t) and eval(t) is not None),  # noqa: S307 (digits and + * only)
        ({"structured_outputs": {"grammar": 'root ::= "<" name ">" [a-z ]{0,8} "</" name ">"\nname ::= "b" | "i"'}},
         lambda t: re.fullmatch(r"<([bi])>[a-z ]{0,8}</[bi]>", t)),
    ]
    for extra, ok in cases:
        for kw in ({"temperature": 0}, {"temperature": 1.0, "seed": 5}, {"temperature": 1.2, "seed": 9, "top_p": 0.9}):
            r = c.completions.create(model=TINY_NAME, prompt="The answer:", max_tokens=64, extra_body=extra, **kw)
            t = r.choices[0].text
            assert r.choices[0].finish_reason == "stop", (extra, t)
            assert ok(t), (extra, kw, t)




def test_regex_grammar_and_choice_corpora_greedy_and_sampled(tiny_server):
    """100 random bounded patterns as guided_regex and the same language as a GBNF grammar, and 60
    choice lists (words sharing prefixes, spaces, UTF-8): greedy and sampled, each output matched
    with Python's `re` (the grammar's too) or found in its list."""
    c = client(tiny_server)

    def one(kind, i, sampled):
        kw = {"temperature": 1.0, "seed": 100 + i} if sampled else {"temperature": 0}
        if kind == "choice":
            extra, ok = {"guided_choice": CHOICES[i]}, lambda t: t in CHOICES[i]
        else:
            py, gbnf = PATTERNS[i]
            extra = {"guided_regex": py} if kind == "regex" else {"structured_outputs": {"grammar": "root ::= " + gbnf}}
            ok = lambda t: re.fullmatch(py, t) is not None  # noqa: E731
        r = c.completions.create(model=TINY_NAME, prompt="The answer:", max_tokens=100, extra_body=extra, **kw)
        t = r.choices[0].text
        assert r.choices[0].finish_reason == "stop", (kind, i, extra, t)
        assert ok(t), (kind, i, extra, kw, t)
        return kind, t

    cases = [(k, i) for k in ("regex", "grammar") for i in range(len(PATTERNS))] + [("choice", i) for i in range(len(CHOICES))]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        outs = [j.result() for j in [pool.submit(one, k, i, s) for k, i in cases for s in (False, True)]]
    assert len(outs) == 2 * (2 * len(PATTERNS) + len(CHOICES))
    assert len({t for k, t in outs if k == "regex"}) > 60  # the patterns are not all forced to one string


def test_the_bench_schema_corpus_is_this_corpus():
    """bench/schemas/corpus (`pagoda bench throughput --schema-dir`) holds SCHEMAS, one file each."""
    import pathlib
    d = pathlib.Path(__file__).resolve().parents[2] / "bench" / "schemas" / "corpus"
    files = sorted(d.glob("*.json"))
    assert [json.loads(f.read_text()) for f in files] == SCHEMAS


def test_bad_constraints_are_400s_naming_the_field(tiny_server):
    url = tiny_server.url + "/v1/completions"
    cases = [
        ({"guided_json": {"type": "integer", "multipleOf": 3}}, "guided_json", "multipleOf"),
        ({"guided_regex": "(a"}, "guided_regex", "regex"),
        ({"guided_grammar": "root ::= missing"}, "guided_grammar", "missing"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strin"}}}}, "response_format", "strin"),
        ({"guided_json": {"type": "object"}, "guided_choice": ["a"]}, "guided_choice", "only one"),
        ({"structured_outputs": {"structural_tag": "{}"}}, "structured_outputs.structural_tag", "not supported"),
        ({"guided_whitespace_pattern": "\\s"}, "guided_whitespace_pattern", "not supported"),
    ]
    for extra, param, says in cases:
        status, _, body = http("POST", url, {"model": TINY_NAME, "prompt": "x", "max_tokens": 4, **extra})
        assert status == 400, (extra, body)
        err = json.loads(body)["error"]
        assert err["param"] == param, (extra, err)
        assert says in err["message"], (extra, err)


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string", "maxLength": 16},
                                                "unit": {"enum": ["celsius", "fahrenheit"]}},
                                                "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {
    "zone": {"type": "string", "maxLength": 8}}, "required": ["zone"], "additionalProperties": False}}}


def test_tool_calls_required_and_named(chat_server):
    c = client(chat_server)
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    for choice, names in (("required", {"get_weather", "get_time"}), ({"type": "function", "function": {"name": "get_time"}}, {"get_time"})):
        r = c.chat.completions.create(model=CHAT_NAME, messages=msgs, tools=[WEATHER, TIME], tool_choice=choice, max_tokens=120,
                                      temperature=0, parallel_tool_calls=False)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls", ch
        assert len(ch.message.tool_calls) == 1
        call = ch.message.tool_calls[0]
        assert call.type == "function" and call.id and call.function.name in names
        params = (WEATHER if call.function.name == "get_weather" else TIME)["function"]["parameters"]
        check(params, call.function.arguments)


def test_tool_call_streaming_deltas(chat_server):
    c = client(chat_server)
    stream = c.chat.completions.create(model=CHAT_NAME, messages=[{"role": "user", "content": "Weather in Rome and the time in UTC?"}],
                                       tools=[WEATHER, TIME], tool_choice="required", max_tokens=200, temperature=0.8, seed=1,
                                       stream=True)
    calls, finish = {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        for tc in d.tool_calls or []:
            if tc.index not in calls:
                # The first delta of a call: id, type and the name before any argument text.
                assert tc.id and tc.type == "function" and tc.function.name, tc
                calls[tc.index] = {"name": tc.function.name, "args": tc.function.arguments or ""}
            else:
                assert tc.function.name is None and tc.id is None
                calls[tc.index]["args"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert calls and sorted(calls) == list(range(len(calls)))
    for call in calls.values():
        params = (WEATHER if call["name"] == "get_weather" else TIME)["function"]["parameters"]
        check(params, call["args"])


def test_tool_calling_loop(chat_server):
    """call -> tool result -> answer, as an agent framework drives it."""
    c = client(chat_server)
    msgs = [{"role": "user", "content": "What is the weather in Paris? Use the tool."}]
    r = c.chat.completions.create(model=CHAT_NAME, messages=msgs, tools=[WEATHER], tool_choice="required", max_tokens=100, temperature=0)
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and m.tool_calls
    call = m.tool_calls[0]
    args = check(WEATHER["function"]["parameters"], call.function.arguments)
    msgs.append({"role": "assistant", "content": m.content, "tool_calls": [
        {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}]})
    msgs.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"city": args["city"], "temperature": 21, "sky": "sunny"})})
    r2 = c.chat.completions.create(model=CHAT_NAME, messages=msgs, tools=[WEATHER], tool_choice="none", max_tokens=40, temperature=0)
    assert r2.choices[0].finish_reason in ("stop", "length")
    assert r2.choices[0].message.content and not r2.choices[0].message.tool_calls


def test_tool_fields_checked(chat_server):
    url = chat_server.url + "/v1/chat/completions"
    base = {"model": CHAT_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    for extra, param in (({"tool_choice": "required"}, "tool_choice"),
                         ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
                         ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
                         ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "not": {}}}}],
                           "tool_choice": "required"}, "tools")):
        status, _, body = http("POST", url, {**base, **extra})
        assert status == 400, (extra, body)
        assert json.loads(body)["error"]["param"] == param, (extra, body)
