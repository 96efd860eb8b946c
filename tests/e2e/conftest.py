"""Shared helpers of the end-to-end tests: start the real `pagoda serve` binary on a free loopback
port, wait for /health, and always kill it in teardown (its log is printed on failure)."""
import json
import os
import pathlib
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

BINARY = os.environ.get("PAGODA_BINARY", "")
MODELS_DIR = pathlib.Path(os.environ.get("PAGODA_MODELS_DIR", "models"))
SHARED_DIR = pathlib.Path(os.environ.get("PAGODA_SHARED_DIR", "../shared"))
CHAT_MODEL = MODELS_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY_MODEL = SHARED_DIR / "models" / "stories260K" / "stories260K.gguf"
# Build directory (artifacts such as screenshots go under it): the binary's folder.
BUILD_DIR = pathlib.Path(BINARY).resolve().parent if BINARY else pathlib.Path(tempfile.gettempdir())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, headers=None, timeout=30):
    """(status, headers, body bytes) without raising on HTTP errors."""
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None and "Content-Type" not in (headers or {}):
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


class Server:
    def __init__(self, model, *args, startup_timeout=90):
        if not BINARY or not os.path.exists(BINARY):
            raise RuntimeError(f"PAGODA_BINARY not set or missing: {BINARY!r}")
        if not pathlib.Path(model).exists():
            raise RuntimeError(f"model missing: {model} (run scripts/setup_test.sh)")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="pagoda-serve-", suffix=".log", delete=False)
        self.cmd = [BINARY, "serve", "--model", str(model), "--port", str(self.port), *map(str, args)]
        # PAGODA_E2E_DEVICE=cuda runs the servers on the GPU (scripts/gpu_run.sh structured).
        if os.environ.get("PAGODA_E2E_DEVICE") and "--device" not in self.cmd:
            self.cmd += ["--device", os.environ["PAGODA_E2E_DEVICE"]]
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + startup_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if http("GET", self.url + "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"server did not become healthy in {startup_timeout}s:\n{self.output()}")

    def output(self):
        self.log.flush()
        return pathlib.Path(self.log.name).read_text(errors="replace")

    def metrics(self):
        status, _, body = http("GET", self.url + "/metrics")
        assert status == 200
        return body.decode()

    def metric(self, name, labels=None):
        """Sum of the samples of `name` whose labels include `labels`."""
        total, found = 0.0, False
        for line in self.metrics().splitlines():
            if line.startswith("#") or not line.startswith(name):
                continue
            key, value = line.rsplit(" ", 1)
            metric_name = key.split("{", 1)[0]
            if metric_name != name:
                continue
            if labels and not all(f'{k}="{v}"' in key for k, v in labels.items()):
                continue
            total += float(value)
            found = True
        return total if found else None

    def terminate(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def stop(self, timeout=20):
        self.terminate()
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None
        finally:
            self.log.close()


@pytest.fixture
def server_factory(request):
    servers = []

    def make(model, *args, **kw):
        s = Server(model, *args, **kw)
        servers.append(s)
        return s

    yield make
    for s in servers:
        if request.node.rep_call.failed if hasattr(request.node, "rep_call") else False:
            print(f"---- server log ({' '.join(s.cmd)}) ----\n{s.output()[-5000:]}")
        s.kill()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
