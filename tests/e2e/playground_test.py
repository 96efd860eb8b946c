"""The browser playground in headless Chromium (Debian `chromium`), driven over the DevTools
protocol: the page loads from GET /, a message typed into it streams a reply from
/v1/chat/completions (with the API key typed into the page), tokens/s is shown, and a screenshot
is saved under the build directory (test-artifacts/playground.png)."""
import base64
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


def test_playground_streams_a_reply():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    s = Server(CHAT_MODEL, "--max-model-len", 1024, "--api-key", "pg-key")
    profile = tempfile.mkdtemp(prefix="pagoda-chromium-")
    port = free_port()
    browser = subprocess.Popen([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                "--no-first-run", f"--remote-debugging-port={port}", "--remote-allow-origins=*",
                                f"--user-data-dir={profile}", "--window-size=1100,800", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        status, _, html = http("GET", s.url + "/")
        assert status == 200 and b"Pagoda playground" in html
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
        dt.call("Page.navigate", url=s.url + "/")
        deadline = time.time() + 30
        while time.time() < deadline and dt.eval("document.readyState") != "complete":
            time.sleep(0.2)
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
        reply = dt.eval("document.querySelector('.msg.assistant .content, .msg.error .content').textContent")
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
        browser.terminate()
        try:
            browser.wait(timeout=10)
        except subprocess.TimeoutExpired:
            browser.kill()
        s.kill()
        shutil.rmtree(profile, ignore_errors=True)
