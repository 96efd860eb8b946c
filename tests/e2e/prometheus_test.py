"""A real Prometheus server (Debian `prometheus`) scrapes /metrics every second; PromQL queries
over the scraped series return the counts the test produced. The Grafana dashboard's queries are
evaluated by the same Prometheus (each must parse and return data), and the shipped
deploy/prometheus/prometheus.yml passes `promtool check config`."""
import json
import pathlib
import shutil
import subprocess
import tempfile
import time
import urllib.parse

import openai
import pytest

from conftest import TINY_MODEL, Server, free_port, http

ROOT = pathlib.Path(__file__).resolve().parents[2]
N_REQUESTS = 6
MAX_TOKENS = 7


def query(prom_url, expr):
    status, _, body = http("GET", prom_url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    # While it starts, Prometheus answers 503 with a plain-text body (an AssertionError: not ready yet).
    assert status == 200, (expr, status, body[:200])
    j = json.loads(body)
    assert j["status"] == "success", (expr, j)
    return j["data"]["result"]


def scalar(prom_url, expr):
    result = query(prom_url, expr)
    return float(result[0]["value"][1]) if result else None


@pytest.fixture(scope="module")
def prometheus_binary():
    binary = shutil.which("prometheus")
    if not binary:
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    return binary


def test_prometheus_scrapes_and_queries(prometheus_binary):
    s = Server(TINY_MODEL, "--max-model-len", 256, "--served-model-name", "tiny")
    prom = None
    workdir = tempfile.mkdtemp(prefix="pagoda-prom-")
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        for i in range(N_REQUESTS):
            c.completions.create(model="tiny", prompt="Once upon a time", max_tokens=MAX_TOKENS,
                                 extra_body={"ignore_eos": True}, stream=bool(i % 2))
        with pytest.raises(openai.BadRequestError):
            c.completions.create(model="tiny", prompt="x", temperature=9)

        port = free_port()
        config = pathlib.Path(workdir) / "prometheus.yml"
        config.write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: pagoda
    static_configs:
      - targets: ["127.0.0.1:{s.port}"]
""")
        prom_log = open(pathlib.Path(workdir) / "prometheus.log", "w")
        prom = subprocess.Popen([prometheus_binary, f"--config.file={config}", f"--storage.tsdb.path={workdir}/data",
                                 f"--web.listen-address=127.0.0.1:{port}"], stdout=prom_log, stderr=subprocess.STDOUT)
        prom_url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 60
        value = None
        while time.time() < deadline:
            try:
                value = scalar(prom_url, 'pagoda:request_success_total{finished_reason="length",model_name="tiny"}')
                if value is not None:
                    break
            except (OSError, AssertionError):
                pass
            time.sleep(0.5)
        assert value == N_REQUESTS, pathlib.Path(workdir, "prometheus.log").read_text()[-3000:]
        targets = json.loads(http("GET", prom_url + "/api/v1/targets")[2])["data"]["activeTargets"]
        assert targets[0]["health"] == "up", targets
        assert scalar(prom_url, 'pagoda:generation_tokens_total{model_name="tiny"}') == N_REQUESTS * MAX_TOKENS
        assert scalar(prom_url, 'pagoda:e2e_request_latency_seconds_count{model_name="tiny"}') == N_REQUESTS
        assert scalar(prom_url, 'pagoda:inter_token_latency_seconds_count') == N_REQUESTS * (MAX_TOKENS - 1)
        assert scalar(prom_url, 'pagoda:http_requests_total{route="/v1/completions",status="200"}') == N_REQUESTS
        assert scalar(prom_url, 'pagoda:http_requests_total{route="/v1/completions",status="400"}') == 1
        assert scalar(prom_url, 'sum(pagoda:iteration_tokens_total_sum)') >= N_REQUESTS * MAX_TOKENS
        p50 = scalar(prom_url, 'histogram_quantile(0.5, sum by (le) (pagoda:time_to_first_token_seconds_bucket))')
        assert p50 is not None and 0 < p50 < 10
        assert scalar(prom_url, 'pagoda:kv_cache_usage_perc') == 0
        assert scalar(prom_url, 'pagoda:num_requests_running') == 0
        assert scalar(prom_url, 'pagoda:gpu_memory_used_bytes') == 0  # a CPU server: the series exists, 0

        # Every query of the Grafana dashboard parses and (after a few scrapes) returns data.
        dashboard = json.loads((ROOT / "deploy" / "grafana" / "pagoda-dashboard.json").read_text())
        exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
        assert len(exprs) >= 10
        time.sleep(3)
        for expr in exprs:
            e = expr.replace("$model_name", "tiny").replace("$__rate_interval", "1m").replace("$__interval", "5s")
            query(prom_url, e)
        names = {n for expr in exprs for n in __import__("re").findall(r"pagoda:[a-z_]+", expr)}
        exposed = s.metrics()
        for n in names:
            assert n in exposed, n
    finally:
        if prom:
            prom.terminate()
            try:
                prom.wait(timeout=10)
            except subprocess.TimeoutExpired:
                prom.kill()
        s.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def test_shipped_prometheus_config(prometheus_binary):
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    r = subprocess.run([promtool, "check", "config", str(ROOT / "deploy" / "prometheus" / "prometheus.yml")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
