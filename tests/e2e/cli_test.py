"""The command line as users type it (issue 28): every numeric option range-checked, --max-model-len
within the model's context, the port claimed before the model loads, defaults in --help, the model
as a positional argument, the peers' spellings (--host, --port, -c/--ctx-size,
--gpu-memory-utilization), --log-level, and --device auto said at start-up. Runs the real binary
on the tiny stories260K model (context 2048)."""
import shlex
import shutil
import socket
import subprocess
import time

import pytest

from conftest import BINARY, MODELS_DIR, TINY_MODEL, free_port, http

TIMEOUT = 60


def run(*args, timeout=TIMEOUT):
    """(exit code, stdout + stderr) of `pagoda ARGS`; a run past `timeout` fails the test."""
    try:
        p = subprocess.run([BINARY, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"pagoda {' '.join(map(str, args))} still running after {timeout} s: {e.stderr!r}")
    return p.returncode, p.stdout + p.stderr


# (subcommand args..., option, bad value): each must be refused before anything runs.
BAD_VALUES = [
    (["serve", "--model", TINY_MODEL], "--port", "99999"),
    (["serve", "--model", TINY_MODEL], "--port", "-1"),
    (["serve", "--model", TINY_MODEL], "--grpc-port", "70000"),
    (["serve", "--model", TINY_MODEL], "--gpu-memory-utilization", "1.5"),
    (["serve", "--model", TINY_MODEL], "--max-num-seqs", "0"),
    (["serve", "--model", TINY_MODEL], "--http-threads", "0"),
    (["serve", "--model", TINY_MODEL], "--threads", "-2"),
    (["serve", "--model", TINY_MODEL], "--block-size", "0"),
    (["serve", "--model", TINY_MODEL], "--shutdown-timeout", "-1"),
    (["generate", "--model", TINY_MODEL, "-p", "hi"], "--top-p", "2"),
    (["generate", "--model", TINY_MODEL, "-p", "hi"], "--temperature", "-1"),
    (["generate", "--model", TINY_MODEL, "-p", "hi"], "-n", "-5"),
    (["generate", "--model", TINY_MODEL, "-p", "hi"], "--seed", "-7"),
    (["bench", "throughput", "--model", TINY_MODEL], "--num-prompts", "0"),
    (["bench", "throughput", "--model", TINY_MODEL], "--max-num-seqs", "-1"),
    (["bench", "--model", TINY_MODEL], "--repeats", "0"),
    (["bench", "serve"], "--num-prompts", "0"),
    (["bench", "spec", "--model", TINY_MODEL], "--acceptance", "1.5"),
    (["bench", "spec", "--model", TINY_MODEL], "--spec-tokens", "0"),
    (["bench", "serve"], "--request-rate", "-3"),
    (["memplan", "--model", TINY_MODEL], "--memory-utilization", "2"),
]


@pytest.mark.parametrize("args,option,value", BAD_VALUES, ids=[f"{a[0]}{' ' + a[1] if a[0] == 'bench' else ''} {o} {v}" for a, o, v in BAD_VALUES])
def test_numeric_option_out_of_range_is_refused(args, option, value):
    t0 = time.time()
    rc, out = run(*args, option, value, timeout=20)
    assert rc != 0, f"{option} {value} accepted:\n{out}"
    assert option.lstrip("-") in out and value in out, f"the error names neither the option nor the value:\n{out}"
    assert "model loaded" not in out and "serving" not in out, out
    assert time.time() - t0 < 10


def test_port_99999_does_not_wrap():
    # 99999 mod 65536 = 34463: the port a wrapping parser would have served on.
    rc, out = run("serve", "--model", TINY_MODEL, "--port", "99999", timeout=20)
    assert rc != 0 and "34463" not in out
    assert "99999" in out and "65535" in out, out


@pytest.mark.parametrize("cmd", [["serve"], ["generate", "-p", "hi", "-n", "1"], ["memplan"]])
def test_max_model_len_beyond_context_is_refused(cmd):
    rc, out = run(cmd[0], "--model", TINY_MODEL, *cmd[1:], "--max-model-len", "4096", timeout=30)
    assert rc != 0, out
    assert "2048" in out and "context" in out, out


def test_max_model_len_within_context_and_ctx_size_alias():
    rc, out = run("generate", "--model", TINY_MODEL, "-p", "Once", "-n", "4", "-c", "1024", "--temperature", "0", "-v")
    assert rc == 0, out
    assert "max_model_len 1024" in out, out
    rc, out = run("generate", "--model", TINY_MODEL, "-p", "Once", "-n", "4", "--ctx-size", "4096")
    assert rc != 0 and "2048" in out, out


def test_port_in_use_fails_before_the_model_loads():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        t0 = time.time()
        rc, out = run("serve", "--model", TINY_MODEL, "--port", port, timeout=30)
        assert rc != 0, out
        assert str(port) in out and "in use" in out, out
        assert "model loaded" not in out and "engine:" not in out, f"the model loaded before the port was tried:\n{out}"
        assert time.time() - t0 < 10


def test_grpc_port_in_use_fails_before_the_model_loads():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc, out = run("serve", "--model", TINY_MODEL, "--port", free_port(), "--grpc-port", port, timeout=30)
        assert rc != 0 and str(port) in out, out
        assert "model loaded" not in out, out


@pytest.mark.parametrize("cmd,expect", [
    (["serve"], ["--port", "8000", "127.0.0.1", "--max-num-seqs", "256", "--log-level", "info", "auto"]),
    (["generate"], ["--max-tokens", "128", "--temperature", "0.8", "--top-k", "40"]),
    (["bench", "throughput"], ["--num-prompts", "64", "--input-len", "128"]),
    (["bench", "serve"], ["--num-prompts", "100", "http://127.0.0.1:8000"]),
])
def test_help_shows_defaults(cmd, expect):
    rc, out = run(*cmd, "--help", timeout=20)
    assert rc == 0, out
    for e in expect:
        assert e in out, f"{e!r} missing from `pagoda {' '.join(cmd)} --help`:\n{out}"
    # The defaults are printed as CLI11 does: "--option TYPE=DEFAULT".
    assert "=8000" in out or "=128" in out or "=64" in out or "=100" in out, out


def test_model_is_positional(server_factory):
    rc, out = run("info", TINY_MODEL)
    assert rc == 0 and "context       2048" in out, out
    rc, out = run("generate", TINY_MODEL, "-p", "Once", "-n", "3", "--temperature", "0")
    assert rc == 0, out
    # `pagoda serve MODEL` as `vllm serve MODEL` users type it (Server passes --model; start by hand).
    port = free_port()
    p = subprocess.Popen([BINARY, "serve", str(TINY_MODEL), "--host", "127.0.0.1", "--port", str(port), "-c", "512"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            assert p.poll() is None, p.stdout.read()
            try:
                status, _, body = http("GET", f"http://127.0.0.1:{port}/v1/models", timeout=2)
                if status == 200:
                    assert b'"max_model_len":512' in body.replace(b" ", b""), body
                    break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("pagoda serve MODEL did not come up")
    finally:
        p.terminate()
        p.wait(timeout=20)


def test_log_level():
    rc, out = run("generate", "--model", TINY_MODEL, "-p", "Once", "-n", "2", "--log-level", "bogus")
    assert rc != 0 and "log-level" in out, out
    rc, out = run("generate", "--model", TINY_MODEL, "-p", "Once", "-n", "2", "--log-level", "info")
    assert rc == 0 and "INFO" in out and "device auto" in out, out
    rc, out = run("generate", "--model", TINY_MODEL, "-p", "Once", "-n", "2", "--log-level", "error")
    assert rc == 0 and "INFO" not in out, out


def test_device_auto_is_the_default_and_said():
    rc, out = run("generate", "--model", TINY_MODEL, "-p", "Once", "-n", "2")
    assert rc == 0, out
    assert "device auto: " in out, out
    rc, out = run("generate", "--model", TINY_MODEL, "-p", "Once", "-n", "2", "--device", "cpu")
    assert rc == 0 and "device auto" not in out, out
    rc, out = run("generate", "--model", TINY_MODEL, "-p", "Once", "-n", "2", "--device", "tpu")
    assert rc != 0 and "tpu" in out, out


def test_gpu_memory_utilization_spelling_everywhere():
    for cmd in (["generate", "--model", TINY_MODEL, "-p", "x"], ["serve", "--model", TINY_MODEL], ["memplan", "--model", TINY_MODEL],
                ["bench", "--model", TINY_MODEL]):
        rc, out = run(*cmd, "--gpu-memory-utilization", "7", timeout=20)
        # Accepted as a spelling (not "unknown option"), then range-checked.
        assert rc != 0 and "memory-utilization" in out and "7" in out and "not expected" not in out, (cmd, out)


def test_progress_while_loading_and_benchmarking():
    # A pipe: one plain log line per step at the end ("..., done"); a terminal (script(1) gives
    # the binary a pty): the bar redrawn in place.
    args = ["bench", "throughput", TINY_MODEL, "--num-prompts", 4, "--input-len", 8, "--output-len", 8,
            "--sequential", 0, "-t", 1]
    code, out = run(*args)
    assert code == 0, out
    assert "loading weights: 100%" in out and "MiB" in out and ", done" in out, out
    assert "batched run: 100% (32/32 tokens)" in out, out
    if not shutil.which("script"):
        pytest.skip("script(1) (util-linux) is not installed")
    cmd = " ".join(shlex.quote(str(a)) for a in [BINARY, *args])
    p = subprocess.run(["script", "-qec", cmd, "/dev/null"], capture_output=True, timeout=TIMEOUT)  # bytes: keep \r
    assert p.returncode == 0, p.stdout
    assert b"\rbatched run [###" in p.stdout and b"100%" in p.stdout and b"\x1b[K" in p.stdout, p.stdout[-800:]


def test_bench_counts_only_the_selected_experts_bytes():
    """`pagoda bench` on a mixture of experts: a decode step reads the dense weights and k of the E
    experts of each layer (at batch 1 exactly k; above it at most min(E, batch x k)), so the
    bandwidth records count those bytes, not every expert's (tiny OLMoE: 8 experts, top-2)."""
    import json
    model = MODELS_DIR / "tiny" / "olmoe" / "model-f32.gguf"
    if not model.exists():
        pytest.skip(f"no {model}")
    p = subprocess.run([BINARY, "bench", "-m", str(model), "--device", "cpu", "-t", "1", "-p", "16", "-n", "4", "-b", "1,2,8",
                        "-r", "1", "--json"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads(p.stdout)
    w, ex = res["weight_bytes"], res["expert_weight_bytes"]
    assert 0 < ex < w, res
    assert res["batch1_weight_bytes_read"] == pytest.approx(w - ex + ex * 2 / 8), res
    kv = {r["test"]: r for r in res["results"]}
    # bytes of a tg run = steps x weights read + the KV cache read (the same at every batch per sequence)
    b1, b2, b8 = kv["tg4"]["bytes_read"], kv["tg4 b2"]["bytes_read"], kv["tg4 b8"]["bytes_read"]
    kv_b1 = b1 - 4 * (w - ex + ex * 2 / 8)
    assert kv_b1 > 0, res
    assert b2 - 2 * kv_b1 == pytest.approx(4 * (w - ex + ex * 4 / 8)), res
    assert b8 - 8 * kv_b1 == pytest.approx(4 * w), res   # 8 tokens x 2 >= 8 experts: all of them


def test_bench_spec_replays_the_record_at_the_constructed_acceptance():
    """`pagoda bench spec` (docs/speculative_decoding.md): the speculative runs' tokens equal the
    plain record, no request diverges, and the measured per-token acceptance is the constructed
    one within sampling error (about 300 judged drafts per point)."""
    import json
    p = subprocess.run([BINARY, "bench", "spec", TINY_MODEL, "--device", "cpu", "-t", "1", "-b", "8", "--acceptance",
                        "0.6,0.9", "--input-len", "16", "--output-len", "100", "--spec-no-adaptive", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads(p.stdout)
    assert res["all_identical"] is True, res
    assert [r["acceptance"] for r in res["runs"]] == [0.6, 0.9]
    for r in res["runs"]:
        assert r["identical_requests"] == r["requests"] == 8 and r["diverged_requests"] == 0, r
        judged = r["spec_num_accepted_tokens"] + r["spec_num_rejections"]
        assert judged > 200, r
        assert abs(r["measured_acceptance"] - r["acceptance"]) < 4 * (0.25 / judged) ** 0.5, r
        assert r["spec_steps"] < r["plain_steps"], r


def test_bench_spec_real_proposers_keep_greedy_output(tmp_path):
    """`pagoda bench spec --spec-method` (cli/bench_spec_prompts.h) on text prompts: every
    speculative run's tokens equal the plain run's of its round (greedy), at batch 1 and 3, for
    n-gram lookup and for a draft model; the model drafting for itself is accepted at every
    position; refusals for a draft method without a draft model and for no prompt file."""
    import json
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Once upon a time, there was a little girl\n---\nThe cat sat on the mat. The cat\n---\n"
                       "Tom had a red ball. Tom had a red\n")
    base = [BINARY, "bench", "spec", TINY_MODEL, "--device", "cpu", "-t", "1", "--prompt-file", str(prompts),
            "--output-len", "40", "--rounds", "2", "--json"]
    p = subprocess.run(base + ["--spec-method", "ngram,draft", "--spec-model", str(TINY_MODEL), "-b", "1,3",
                               "--spec-tokens", "2,4"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads(p.stdout)
    assert res["all_identical"] is True, res
    runs = res["runs"]
    assert sorted((r["batch"], r["method"], r["k"]) for r in runs) == sorted(
        (b, m, k) for b in (1, 3) for m in ("ngram", "draft") for k in (2, 4))
    for r in runs:
        assert r["identical_requests"] == r["requests"] == 2 * r["batch"], r
        assert r["spec_tokens"] == r["plain_tokens"] > 0, r
        assert len(r["acceptance_per_position"]) <= r["k"], r
        if r["method"] == "draft":  # the model drafting for itself: its drafts are its own greedy tokens
            assert r["spec_num_drafts"] > 0 and r["acceptance"] > 0.95, r
            assert len(r["acceptance_per_position"]) == r["k"], r
            assert r["spec_steps"] < r["plain_steps"], r
    bad = subprocess.run(base + ["--spec-method", "draft"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--spec-model" in bad.stderr, bad.stderr
    bad = subprocess.run([BINARY, "bench", "spec", TINY_MODEL, "--device", "cpu", "--spec-method", "ngram"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--prompt-file" in bad.stderr, bad.stderr


def test_eagle3_head_on_the_cli(tmp_path):
    """`--spec-method eagle3 --spec-model HEAD_DIR` (docs/speculative_decoding.md, "EAGLE-3 heads") on
    `bench spec` and `generate`, with the tiny llama and the heads of tools/make_draft_heads.py:
    greedy output equal to plain decoding, the echo head's drafts accepted; `--speculative-config`
    with method eagle3; a malformed head and a missing head are clear errors."""
    import json
    target = str(MODELS_DIR / "tiny" / "llama3" / "model-f32.gguf")
    echo = str(MODELS_DIR / "tiny" / "eagle3-llama3-echo")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Once upon a time, there was a little girl\n---\nThe cat sat on the mat. The cat\n")
    p = subprocess.run([BINARY, "bench", "spec", target, "--device", "cpu", "-t", "1", "--prompt-file", str(prompts),
                        "--output-len", "24", "--rounds", "2", "--json", "--spec-method", "ngram,eagle3",
                        "--spec-model", echo, "-b", "1,2", "--spec-tokens", "3"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads(p.stdout)
    assert res["all_identical"] is True, res
    eagle = [r for r in res["runs"] if r["method"] == "eagle3"]
    assert len(eagle) == 2, res
    for r in eagle:
        assert r["identical_requests"] == r["requests"], r
        assert r["spec_num_drafts"] > 0 and r["acceptance"] > 0.5, r
    cfg = json.dumps({"method": "eagle3", "model": echo, "num_speculative_tokens": 3})
    g = subprocess.run([BINARY, "generate", "-m", target, "-p", "Once upon a time", "-n", "16", "--temperature", "0",
                        "--speculative-config", cfg], capture_output=True, text=True, timeout=60)
    plain = subprocess.run([BINARY, "generate", "-m", target, "-p", "Once upon a time", "-n", "16", "--temperature", "0"],
                           capture_output=True, text=True, timeout=60)
    assert g.returncode == 0 and plain.returncode == 0, g.stderr + plain.stderr
    assert g.stdout.splitlines()[0] == plain.stdout.splitlines()[0]
    assert "speculative eagle3" in g.stdout + g.stderr and "acceptance" in g.stdout + g.stderr
    bad = subprocess.run([BINARY, "generate", "-m", target, "-p", "x", "-n", "2", "--spec-method", "eagle3",
                          "--spec-model", str(MODELS_DIR / "tiny" / "eagle3-bad" / "missing-fc")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "tensor 'fc.weight' is missing" in bad.stderr, bad.stderr
    bad = subprocess.run([BINARY, "generate", "-m", target, "-p", "x", "-n", "2", "--spec-method", "eagle3"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "needs the EAGLE-3 head's directory" in bad.stderr, bad.stderr


def test_mtp_module_on_the_cli(tmp_path):
    """`--spec-method mtp --spec-model DIR` (a MiMo-style checkpoint's MTP layer, tools/make_draft_heads.py)
    on `generate` and `bench spec` with the tiny qwen2 GGUF as target: greedy output equal to plain
    decoding; a checkpoint without MTP layers is a clear error."""
    import json
    target = str(MODELS_DIR / "tiny" / "qwen2" / "model-f32.gguf")
    mimo = str(MODELS_DIR / "tiny" / "mimo-mtp")
    g = subprocess.run([BINARY, "generate", "-m", target, "-p", "Once upon a time", "-n", "16", "--temperature", "0",
                        "--spec-method", "mtp", "--spec-model", mimo], capture_output=True, text=True, timeout=60)
    plain = subprocess.run([BINARY, "generate", "-m", target, "-p", "Once upon a time", "-n", "16", "--temperature", "0"],
                           capture_output=True, text=True, timeout=60)
    assert g.returncode == 0 and plain.returncode == 0, g.stderr + plain.stderr
    assert g.stdout.splitlines()[0] == plain.stdout.splitlines()[0]
    assert "speculative mtp" in g.stdout + g.stderr
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Once upon a time, there was a little girl\n---\nThe cat sat on the mat. The cat\n")
    p = subprocess.run([BINARY, "bench", "spec", target, "--device", "cpu", "-t", "1", "--prompt-file", str(prompts),
                        "--output-len", "16", "--rounds", "1", "--json", "--spec-method", "mtp", "--spec-model", mimo,
                        "-b", "2", "--spec-tokens", "2"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads(p.stdout)
    assert res["all_identical"] is True and [r["method"] for r in res["runs"]] == ["mtp"], res
    bad = subprocess.run([BINARY, "generate", "-m", target, "-p", "x", "-n", "2", "--spec-method", "mtp",
                          "--spec-model", str(MODELS_DIR / "tiny" / "mimo-mtp-bad" / "no-mtp-layers")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "no num_nextn_predict_layers" in bad.stderr, bad.stderr
