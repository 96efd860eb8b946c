"""The browser playground in headless Chromium (Debian `chromium`), driven over the DevTools
protocol: the page loads from GET /, a message typed into it streams a reply from
/v1/chat/completions (with the API key typed into the page), tokens/s is shown, and a screenshot
is saved under the build directory (test-artifacts/playground.png). Also: the model's context
length is shown, top-p / top-k / seed / stop typed into the page reach the server (the reply
equals the API's for the same parameters), Stop cancels the request on the server (its abort
counter), and replies are rendered as markdown with the raw text escaped."""
import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import tempfile
import time

import openai
import pytest
import websocket

from conftest import BUILD_DIR, CHAT_MODEL, Server, free_port, http


class DevTools:
    def __init__(self, ws_url):
        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.ids = itertools.count(1)

    def call(self, method, **params):
        i = next(self.ids)
        self.ws.send(json.dumps({"id": i, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == i:
                assert "error" not in msg, msg
                return msg.get("result", {})

    def eval(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in r, r
        return r["result"].get("value")


@contextlib.contextmanager
def browser_page(server_url):
    """A headless Chromium with the playground loaded; yields its DevTools connection."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    profile = tempfile.mkdtemp(prefix="pagoda-chromium-")
    port = free_port()
    browser = subprocess.Popen([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                "--no-first-run", f"--remote-debugging-port={port}", "--remote-allow-origins=*",
                                f"--user-data-dir={profile}", "--window-size=1100,800", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        pages = []
        while time.time() < deadline and not pages:
            try:
                pages = [t for t in json.loads(http("GET", f"http://127.0.0.1:{port}/json/list", timeout=2)[2])
                         if t["type"] == "page"]
            except (OSError, ValueError):
                time.sleep(0.3)
        assert pages, "chromium did not expose a page target"
        dt = DevTools(pages[0]["webSocketDebuggerUrl"])
        dt.call("Page.enable")
        dt.call("Page.navigate", url=server_url + "/")
        deadline = time.time() + 30
        while time.time() < deadline and dt.eval("document.readyState") != "complete":
            time.sleep(0.2)
        yield dt
    finally:
        browser.terminate()
        try:
            browser.wait(timeout=10)
        except subprocess.TimeoutExpired:
            browser.kill()
        shutil.rmtree(profile, ignore_errors=True)


def wait_state(dt, states, timeout=90):
    """The last assistant bubble's data-state once it is one of `states`."""
    deadline = time.time() + timeout
    state = None
    while time.time() < deadline:
        state = dt.eval("(() => { const b = [...document.querySelectorAll('.msg.assistant, .msg.error')].pop(); "
                        "return b ? b.dataset.state : null; })()")
        if state in states:
            return state
        time.sleep(0.2)
    return state


def last_reply(dt):
    return dt.eval("(() => { const c = [...document.querySelectorAll('.msg.assistant .content')].pop(); "
                   "return c ? (c.dataset.raw || '') : null; })()")


def test_playground_parameters_stop_button_context_and_markdown():
    s = Server(CHAT_MODEL, "--max-model-len", 1024, "-t", 1)
    try:
        with browser_page(s.url) as dt:
            deadline = time.time() + 20
            while time.time() < deadline and not dt.eval("document.getElementById('context').textContent"):
                time.sleep(0.1)
            assert dt.eval("document.getElementById('context').textContent") == "context 1024 tokens"
            # Sampling parameters typed into the page: the reply equals the API's for the same ones.
            question = "Write a short poem about the sea."
            api = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
            params = dict(max_tokens=32, temperature=0.9, top_p=0.9, seed=11, extra_body={"top_k": 20})
            free = api.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=[{"role": "user", "content": question}],
                                               **params).choices[0].message.content
            words = free.split()
            stop = words[len(words) // 2]
            expected = api.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", stop=[stop],
                                                   messages=[{"role": "user", "content": question}], **params)
            assert expected.choices[0].finish_reason == "stop"
            dt.eval("document.getElementById('maxtokens').value = '32'; document.getElementById('temperature').value = '0.9'; "
                    "document.getElementById('topp').value = '0.9'; document.getElementById('topk').value = '20'; "
                    "document.getElementById('seed').value = '11'; "
                    f"document.getElementById('stop').value = {json.dumps(stop)}; "
                    f"document.getElementById('input').value = {json.dumps(question)}; "
                    "document.getElementById('form').requestSubmit(); true")
            assert wait_state(dt, ("done", "error")) == "done"
            assert last_reply(dt) == expected.choices[0].message.content and stop not in last_reply(dt)
            assert "finish stop" in dt.eval("[...document.querySelectorAll('.msg .meta')].pop().textContent")
            # Stop: the page aborts the stream and the server cancels the request.
            aborts = s.metric("pagoda:request_success_total", {"finished_reason": "abort"})
            dt.eval("document.getElementById('clear').click(); document.getElementById('stop').value = ''; "
                    "document.getElementById('seed').value = ''; document.getElementById('maxtokens').value = '900'; "
                    "document.getElementById('input').value = 'Tell me a very long story about a dragon.'; "
                    "document.getElementById('form').requestSubmit(); true")
            deadline = time.time() + 60
            while time.time() < deadline and len(last_reply(dt) or "") < 20:
                time.sleep(0.1)
            assert not dt.eval("document.getElementById('stopbtn').disabled")
            dt.eval("document.getElementById('stopbtn').click(); true")
            assert wait_state(dt, ("stopped", "done", "error"), timeout=20) == "stopped"
            partial = last_reply(dt)
            assert 20 <= len(partial)
            deadline = time.time() + 20
            while time.time() < deadline and s.metric("pagoda:request_success_total", {"finished_reason": "abort"}) == aborts:
                time.sleep(0.2)
            assert s.metric("pagoda:request_success_total", {"finished_reason": "abort"}) == aborts + 1
            assert dt.eval("document.getElementById('stopbtn').disabled")
            time.sleep(0.5)
            assert last_reply(dt) == partial  # nothing arrives after Stop
            # Markdown: constructs rendered, everything else escaped (no markup from the model).
            html = dt.eval("renderMarkdown('# Title\\nSome **bold** and *it* and `x<y`.\\n\\n- one\\n- two\\n\\n"
                           "1. first\\n\\n```\\nif (a < b) {}\\n```\\n<script>alert(1)</script> "
                           "[ok](https://example.org) [bad](javascript:alert(1))')")
            assert "<h1>Title</h1>" in html and "<strong>bold</strong>" in html and "<em>it</em>" in html, html
            assert "<code>x&lt;y</code>" in html and "<ul><li>one</li><li>two</li></ul>" in html, html
            assert "<ol><li>first</li></ol>" in html and "<pre><code>if (a &lt; b) {}</code></pre>" in html, html
            assert "<script>" not in html and "&lt;script&gt;" in html, html
            assert '<a href="https://example.org"' in html and "javascript:" not in html.split("[bad]")[0], html
            assert 'href="javascript' not in html, html
            # A reply is shown rendered: its element holds markup when the text has markdown.
            dt.eval("const c = [...document.querySelectorAll('.msg.assistant .content')].pop(); "
                    "c.innerHTML = renderMarkdown('**x**'); true")
            assert dt.eval("[...document.querySelectorAll('.msg.assistant .content strong')].length") == 1
    finally:
        s.kill()


def test_playground_streams_a_reply():
    s = Server(CHAT_MODEL, "--max-model-len", 1024, "--api-key", "pg-key")
    try:
        status, _, html = http("GET", s.url + "/")
        assert status == 200 and b"Pagoda playground" in html
        with browser_page(s.url) as dt:
            # Type the API key: the page then fetches the model name with it.
            dt.eval("const k = document.getElementById('apikey'); k.value = 'pg-key'; "
                    "k.dispatchEvent(new Event('change')); document.getElementById('maxtokens').value = '24'; "
                    "document.getElementById('temperature').value = '0'; true")
            deadline = time.time() + 20
            while time.time() < deadline and dt.eval("document.getElementById('model').value") != "SmolLM2-135M-Instruct.Q4_1":
                time.sleep(0.1)
            assert dt.eval("document.getElementById('model').value") == "SmolLM2-135M-Instruct.Q4_1"
            dt.eval("document.getElementById('input').value = 'What is the capital of France?'; "
                    "document.getElementById('form').requestSubmit(); true")
            deadline = time.time() + 90
            state = None
            while time.time() < deadline:
                state = dt.eval("(() => { const b = document.querySelector('.msg.assistant, .msg.error'); "
                                "return b ? b.dataset.state : null; })()")
                if state in ("done", "error"):
                    break
                time.sleep(0.2)
            reply = dt.eval("(document.querySelector('.msg.assistant .content') || {dataset: {}}).dataset.raw")
            meta = dt.eval("(document.querySelector('.msg .meta') || {}).textContent || ''")
            shot = dt.call("Page.captureScreenshot", format="png")["data"]
            artifacts = BUILD_DIR / "test-artifacts"
            artifacts.mkdir(parents=True, exist_ok=True)
            (artifacts / "playground.png").write_bytes(base64.b64decode(shot))
            assert state == "done", (state, reply)
            # The page shows exactly what the API answers for the same (greedy) request.
            expected = openai.OpenAI(base_url=s.url + "/v1", api_key="pg-key", max_retries=0).chat.completions.create(
                model="SmolLM2-135M-Instruct.Q4_1", messages=[{"role": "user", "content": "What is the capital of France?"}],
                max_tokens=24, temperature=0).choices[0].message.content
            assert reply == expected and len(reply) > 10, (reply, expected)
            assert "tokens/s" in meta and "finish" in meta, meta
            user = dt.eval("document.querySelector('.msg.user').textContent")
            assert user == "What is the capital of France?"
            # Without the key the page shows the server's 401 message.
            dt.eval("document.getElementById('apikey').value = 'wrong'; document.getElementById('input').value = 'hi'; "
                    "document.getElementById('form').requestSubmit(); true")
            deadline = time.time() + 30
            err = None
            while time.time() < deadline and not err:
                err = dt.eval("(document.querySelector('.msg.error .content') || {}).textContent || null")
                time.sleep(0.2)
            assert err and "invalid API key" in err, err
            assert s.metric("pagoda:http_requests_total", {"route": "/v1/chat/completions", "status": "401"}) == 1
    finally:
        s.kill()
