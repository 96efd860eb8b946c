#!/usr/bin/env python3
"""The structured-output corpora against a real `pagoda serve`, in the standard library only (the
GPU machine's python3 has no pytest, openai or jsonschema): starts the server on the given device,
sends every corpus request (200 JSON schemas, 100 regexes, the same 100 languages as GBNF grammars,
60 choice lists; each greedy and sampled: 920 requests) over HTTP, and checks every answer:
finish_reason "stop", the text one strict JSON value valid against its schema
(tests/e2e/schema_subset.py), a full match of its regex (Python's `re`; the grammar's too), or a
member of its choice list. The tool-call corpus (200 chat requests, greedy and sampled, a quarter
streamed) offers two functions whose parameters wrap corpus schemas, with tool_choice "required" or
a named function; the model gets a Hermes-style chat template (`<tool_call>` tags) written into a
copy of its GGUF (tests/e2e/gguf_metadata.py), and each answer must be exactly one call of an
offered function (id, type, name; streamed: id and name in the call's first delta, then argument
fragments), finish_reason "tool_calls", its arguments valid against that function's parameters. Prints a summary and the first failures; exit status 0 only when every
answer is valid and the answers vary (the constraint did not force one string everywhere).

    python3 tests/e2e/structured_corpus_check.py --binary build/pagoda \\
        --model ../shared/models/stories260K/stories260K.gguf [--device cuda]

Tests of the checks themselves (tests/e2e/structured_corpus_check_test.py runs them; each must
fail): --no-constraints sends the requests without their constraint (the model's free text);
--shift K constrains request i with corpus entry i + K and checks the answer against entry i
(well-formed answers to the wrong schema, pattern or list).
"""
import argparse
import concurrent.futures
import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from gguf_metadata import with_string_key  # noqa: E402
from schema_subset import validate_text  # noqa: E402
from structured_corpus import CHOICES, PATTERNS, SCHEMAS  # noqa: E402

# A Hermes-style template: `<tool_call>` in its source selects that tool-call format; the tools are
# not rendered (stories260K's context is 512 tokens and its text random-ish: the grammar makes the call).
TOOL_TEMPLATE = ("{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                 "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
                 "{#- a call: <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call> -#}")


def tool_of(i, schema):
    """Function fn_i whose parameters hold the corpus schema as its one property ($defs moved to
    the root, where the schema's "#/$defs/..." references point)."""
    inner = {k: v for k, v in schema.items() if k != "$defs"} if isinstance(schema, dict) else schema
    params = {"type": "object", "properties": {"value": inner}, "required": ["value"], "additionalProperties": False}
    if isinstance(schema, dict) and "$defs" in schema:
        params["$defs"] = schema["$defs"]
    return {"type": "function", "function": {"name": f"fn_{i}", "description": f"corpus schema {i}", "parameters": params}}

MODEL_NAME = "corpus"  # --served-model-name
VARIETY = {"json": 150 / 400, "regex": 60 / 200}  # least share of distinct answers


def post(url, body, timeout):
    """(status, the JSON answer, or the list of streamed chunks when body["stream"]; or the error text)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            if not body.get("stream"):
                return r.status, json.loads(r.read())
            chunks = []
            for line in r:
                line = line.decode().strip()
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunks.append(json.loads(line[6:]))
            return r.status, chunks
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def text_check(check):
    """A checker of a completion's text as a checker of the whole answer: (error or None, text)."""
    def answer_check(r):
        ch = r["choices"][0]
        if ch["finish_reason"] != "stop":
            return f"finish_reason {ch['finish_reason']!r}", ch["text"]
        return check(ch["text"]), ch["text"]
    return answer_check


def tool_check(tools, streamed):
    params = {t["function"]["name"]: t["function"]["parameters"] for t in tools}

    def calls_of(r):
        if not streamed:
            ch = r["choices"][0]
            return ch["finish_reason"], (ch["message"].get("tool_calls") or []), None
        calls, finish = {}, None
        for chunk in r:
            for ch in chunk.get("choices", []):
                finish = ch.get("finish_reason") or finish
                for tc in (ch.get("delta") or {}).get("tool_calls") or []:
                    fn = tc.get("function") or {}
                    if tc["index"] not in calls:  # the first delta: id, type and the name
                        if not (tc.get("id") and tc.get("type") == "function" and fn.get("name")):
                            return finish, [], f"first delta of call {tc['index']} lacks id/type/name: {tc}"
                        calls[tc["index"]] = {"id": tc["id"], "type": "function",
                                              "function": {"name": fn["name"], "arguments": fn.get("arguments") or ""}}
                    else:
                        if tc.get("id") or fn.get("name"):
                            return finish, [], f"a later delta of call {tc['index']} repeats id/name: {tc}"
                        calls[tc["index"]]["function"]["arguments"] += fn.get("arguments") or ""
        return finish, [calls[k] for k in sorted(calls)], None

    def answer_check(r):
        finish, calls, err = calls_of(r)
        text = json.dumps(calls)
        if err:
            return err, text
        if finish != "tool_calls":
            return f"finish_reason {finish!r}", text
        if len(calls) != 1:
            return f"{len(calls)} calls (parallel_tool_calls is false)", text
        c = calls[0]
        name = c["function"]["name"]
        if not c.get("id") or c.get("type") != "function" or name not in params:
            return f"bad call {c}", text
        errors = validate_text(params[name], c["function"]["arguments"])
        return ("; ".join(errors[:3]) or None), text
    return answer_check


def cases(kinds, shift=0):
    """(kind, index, prompt, max_tokens, request extras, checker(text) -> error or None) of every
    corpus request. shift k > 0 (a test of the checks) constrains request i with entry i + k of its
    corpus but checks the answer against entry i."""
    out = []
    if "json" in kinds:
        for i, schema in enumerate(SCHEMAS):
            sent = SCHEMAS[(i + shift) % len(SCHEMAS)]
            # Half through vLLM's structured_outputs, half through guided_json (as the pytest does).
            extra = {"structured_outputs": {"json": sent}} if i % 2 else {"guided_json": sent}
            out.append(("json", i, "Once upon a time", 300, extra,
                        text_check(lambda t, s=schema: "; ".join(validate_text(s, t)[:3]) or None)))
    for kind in ("regex", "grammar"):
        if kind in kinds:
            for i, (py, _) in enumerate(PATTERNS):
                sent_py, sent_gbnf = PATTERNS[(i + shift) % len(PATTERNS)]
                extra = {"guided_regex": sent_py} if kind == "regex" else {"structured_outputs": {"grammar": "root ::= " + sent_gbnf}}
                out.append((kind, i, "The answer:", 100, extra,
                            text_check(lambda t, p=py: None if re.fullmatch(p, t) else f"no full match of {p!r}")))
    if "choice" in kinds:
        for i, choices in enumerate(CHOICES):
            sent = CHOICES[(i + shift) % len(CHOICES)]
            out.append(("choice", i, "The answer:", 100, {"guided_choice": sent},
                        text_check(lambda t, c=choices: None if t in c else f"not one of {c}")))
    if "tools" in kinds:
        n = len(SCHEMAS)
        for i in range(n):
            # Checked against fn_i and fn_(i+1) as offered; sent with those of i + shift.
            offered = [tool_of(i, SCHEMAS[i]), tool_of(i + 1, SCHEMAS[(i + 1) % n])]
            sent = [tool_of(i, SCHEMAS[(i + shift) % n]), tool_of(i + 1, SCHEMAS[(i + 1 + shift) % n])]
            choice = "required" if i % 2 else {"type": "function", "function": {"name": f"fn_{i}"}}
            streamed = i % 4 == 3
            extra = {"tools": sent, "tool_choice": choice, "parallel_tool_calls": False, "stream": streamed}
            allowed = offered if i % 2 else offered[:1]
            out.append(("tools", i, None, 300, extra, tool_check(allowed, streamed)))
    return out


class Server:
    def __init__(self, binary, model, device, log_path, extra_args):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.log = open(log_path, "wb")
        cmd = [binary, "serve", "--model", model, "--port", str(self.port), "--served-model-name", MODEL_NAME,
               "--max-model-len", "512", "--max-num-seqs", "32", *extra_args]
        if device:
            cmd += ["--device", device]
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_healthy(self, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server not healthy in {timeout} s:\n{self.tail()}")

    def tail(self, n=3000):
        self.log.flush()
        return pathlib.Path(self.log_path).read_text(errors="replace")[-n:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=20)
        self.log.close()


def run(args):
    kinds = set(args.kinds.split(","))
    todo = cases(kinds, args.shift)
    if args.limit:
        todo = [c for c in todo if c[1] < args.limit]
    model = args.model
    if "tools" in kinds:
        # The same weights and tokenizer with a chat template (completions answer as before).
        tmp = tempfile.mkdtemp(prefix="pagoda-corpus-")
        model = os.path.join(tmp, "corpus-tools.gguf")
        with_string_key(args.model, model, "tokenizer.chat_template", TOOL_TEMPLATE)
    server = Server(args.binary, model, args.device, args.server_log, args.server_arg)
    try:
        server.wait_healthy(args.startup_timeout)
        t0 = time.time()

        def one(case, sampled):
            kind, i, prompt, max_tokens, extra, check = case
            body = {"model": MODEL_NAME, "max_tokens": max_tokens,
                    **({"temperature": 1.0, "seed": (100 if kind != "json" else 0) + i} if sampled else {"temperature": 0})}
            if kind == "tools":
                path = "/v1/chat/completions"
                body["messages"] = [{"role": "user", "content": f"Call a function ({i})."}]
                body["stream"] = extra["stream"]
                if not args.no_constraints:
                    body.update(extra)
            else:
                path = "/v1/completions"
                body["prompt"] = prompt
                if not args.no_constraints:
                    body.update(extra)
            status, r = post(server.url + path, body, args.request_timeout)
            if status != 200:
                return kind, i, sampled, None, f"HTTP {status}: {str(r)[:300]}"
            err, text = check(r)
            return kind, i, sampled, text, err

        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(lambda cs: one(*cs), [(c, s) for c in todo for s in (False, True)]))
        elapsed = time.time() - t0
    finally:
        server.stop()

    failures = [r for r in results if r[4] is not None]
    by_kind = {}
    for kind, _, _, text, err in results:
        n, bad, texts = by_kind.get(kind, (0, 0, set()))
        by_kind[kind] = (n + 1, bad + (err is not None), texts | {text})
    # The failures first, the summary last (a log's tail shows the summary).
    for kind, i, sampled, text, err in failures[:10]:
        print(f"  INVALID {kind} #{i} {'sampled' if sampled else 'greedy'}: {err} :: {text!r:.200}")
    print(f"structured corpus on {args.device or 'the default device'} ({server.cmd[0]} serve, {args.model}): "
          f"{len(results)} requests in {elapsed:.1f} s, {len(failures)} invalid")
    for kind, (n, bad, texts) in sorted(by_kind.items()):
        print(f"  {kind:8s} {n - bad}/{n} valid, {len(texts)} distinct answers")
    # The answers vary (the pytest's bounds: > 150 of 400 JSON answers, > 60 of 200 regex ones
    # distinct): a constraint that forced one string everywhere would pass the checks.
    few = [k for k, (n, _, texts) in by_kind.items() if k in VARIETY and n >= 100 and len(texts) <= n * VARIETY[k]]
    for k in few:
        print(f"  TOO UNIFORM {k}: {len(by_kind[k][2])} distinct answers of {by_kind[k][0]}")
    ok = not failures and not few and results
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.environ.get("PAGODA_BINARY", "build/pagoda"))
    ap.add_argument("--model", required=True, help="stories260K.gguf (the corpora's model: its text is random-ish)")
    ap.add_argument("--device", default="", help="e.g. cuda, cpu (default: the server's own choice)")
    ap.add_argument("--kinds", default="json,regex,grammar,choice,tools")
    ap.add_argument("--limit", type=int, default=0, help="only the first N of each corpus (0: all)")
    ap.add_argument("--jobs", type=int, default=32, help="requests in flight")
    ap.add_argument("--no-constraints", action="store_true", help="drop every constraint (the check must then fail)")
    ap.add_argument("--shift", type=int, default=0,
                    help="K > 0: constrain request i with corpus entry i + K, check it against entry i (the check must then fail)")
    ap.add_argument("--server-arg", action="append", default=[], help="one more `pagoda serve` argument (repeatable)")
    ap.add_argument("--server-log", default=os.path.join(tempfile.gettempdir(), "pagoda-corpus-serve.log"))
    ap.add_argument("--startup-timeout", type=float, default=120)
    ap.add_argument("--request-timeout", type=float, default=300)
    sys.exit(run(ap.parse_args()))


if __name__ == "__main__":
    main()
