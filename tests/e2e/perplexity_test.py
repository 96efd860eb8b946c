"""`pagoda perplexity` (issue 29): perplexity over a text, and KL divergence / top-1 agreement
against a saved base run. The perplexity is checked against the logits `pagoda dump-layers` writes
for the same chunk (a different code path: cpu_forward without the executor), the KL against the
model itself (zero up to the f16 storage) and a quantized file of the same model (small, not zero);
malformed or mismatched base files are refused with the reason."""
import json
import math
import pathlib
import struct
import subprocess

import pytest

from conftest import BINARY, MODELS_DIR

F32 = MODELS_DIR / "tiny" / "llama3" / "model-f32.gguf"
Q8 = MODELS_DIR / "tiny" / "llama3" / "model-q8_0.gguf"
TEXT = pathlib.Path(__file__).resolve().parents[2] / "README.md"
CTX = 64


def run(*args):
    p = subprocess.run([BINARY, *map(str, args)], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def perplexity(model, *extra):
    rc, out, err = run("perplexity", model, "-f", TEXT, "-c", CTX, "--device", "cpu", "--kv-dtype", "f32", "--json", *extra)
    assert rc == 0, err
    return json.loads(out)


def test_perplexity_equals_the_nll_of_the_dumped_logits(tmp_path):
    rc, out, err = run("tokenize", "--model", F32, "--no-bos", "--file", TEXT)
    assert rc == 0, err
    ids = [int(x) for x in out.split()]
    rc, out, err = run("tokenize", "--model", F32, "--text", "x")
    bos = int(out.split()[0])  # the tiny models' tokenizer adds BOS: each chunk starts with it
    chunk = [bos] + ids[1:CTX]
    rc, out, err = run("dump-layers", "--model", F32, "--ids", " ".join(map(str, chunk)), "--out", tmp_path / "d")
    assert rc == 0, err
    vocab = json.loads((tmp_path / "d" / "meta.json").read_text())["vocab"]
    raw = (tmp_path / "d" / "logits.f32").read_bytes()
    logits = struct.unpack(f"<{CTX * vocab}f", raw)
    nll = []
    for i in range(CTX // 2, CTX - 1):
        row = logits[i * vocab:(i + 1) * vocab]
        m = max(row)
        lse = m + math.log(sum(math.exp(x - m) for x in row))
        nll.append(lse - row[chunk[i + 1]])
    want = math.exp(sum(nll) / len(nll))
    got = perplexity(F32, "--chunks", 1)
    assert got["scored_tokens"] == CTX // 2 - 1
    assert got["chunks"] == 1
    assert abs(got["perplexity"] - want) <= 1e-4 * want, (got["perplexity"], want)


def test_kl_against_itself_and_against_its_q8_0_file(tmp_path):
    base = tmp_path / "f32.kl"
    saved = perplexity(F32, "--chunks", 4, "--save-logits", base)
    assert base.stat().st_size == 8 + 16 + 4 * CTX * 4 + 4 * (CTX // 2 - 1) * 512 * 2
    same = perplexity(F32, "--chunks", 4, "--kl-base", base)
    assert abs(same["perplexity"] - saved["perplexity"]) <= 1e-6 * saved["perplexity"]
    assert same["kl"]["top1_agreement"] == 1.0
    assert same["kl"]["mean"] < 1e-4  # f16 storage of the base log-probabilities
    q8 = perplexity(Q8, "--chunks", 4, "--kl-base", base)
    assert 10 * same["kl"]["mean"] < q8["kl"]["mean"] < 0.05, q8["kl"]
    assert q8["kl"]["top1_agreement"] >= 0.9, q8["kl"]
    assert q8["kl"]["median"] <= q8["kl"]["p99"] <= q8["kl"]["max"]


def test_mismatched_or_malformed_base_files_are_refused(tmp_path):
    base = tmp_path / "f32.kl"
    perplexity(F32, "--chunks", 2, "--save-logits", base)
    truncated = tmp_path / "truncated.kl"
    truncated.write_bytes(base.read_bytes()[:1000])
    garbage = tmp_path / "garbage.kl"
    garbage.write_bytes(b"not a base file at all, just some bytes")
    other_text = tmp_path / "other.txt"
    other_text.write_text("A different text about other things entirely. " * 200)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    cases = [
        (["perplexity", F32, "-f", TEXT, "-c", CTX, "--device", "cpu", "--kl-base", truncated], "truncated"),
        (["perplexity", F32, "-f", TEXT, "-c", CTX, "--device", "cpu", "--kl-base", garbage], "is not a"),
        (["perplexity", F32, "-f", TEXT, "-c", 2 * CTX, "--device", "cpu", "--kl-base", base], "--ctx"),
        (["perplexity", F32, "-f", other_text, "-c", CTX, "--device", "cpu", "--kl-base", base], "other tokens"),
        (["perplexity", F32, "-f", empty, "-c", CTX, "--device", "cpu"], "fewer than one chunk"),
        (["perplexity", F32, "-f", TEXT, "-c", 63, "--device", "cpu"], "even"),
        (["perplexity", F32, "-f", tmp_path / "missing.txt", "--device", "cpu"], "cannot read"),
    ]
    for args, needle in cases:
        rc, out, err = run(*args)
        assert rc == 2, (args, rc, err)
        assert needle in err, (args, err)
