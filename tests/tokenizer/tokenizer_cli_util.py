"""Helpers for the tokenizer CLI tests: paths from the environment CTest sets, and runners for
`pagoda tokenize` / `pagoda detokenize`."""
import json
import os
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("PAGODA_BINARY", os.path.join(ROOT, "build", "pagoda"))
SHARED = os.environ.get("PAGODA_SHARED_DIR", os.path.join(ROOT, "..", "shared"))
TESTDATA = os.environ.get("PAGODA_TESTDATA_DIR", os.path.join(ROOT, "testdata"))
MODELS = os.environ.get("PAGODA_MODELS_DIR", os.path.join(ROOT, "models"))
VOCABS = os.path.join(SHARED, "tokenizers", "vocab-vectors")
VECTOR_VOCABS = ["gpt-2", "llama-spm", "phi-3", "starcoder", "refact", "deepseek-coder"]


def load_vectors(name):
    base = os.path.join(VOCABS, f"ggml-vocab-{name}.gguf")
    with open(base + ".inp", "rb") as f:
        texts = f.read().decode("utf-8").split("\n__ggml_vocab_test__\n")[:-1]
    with open(base + ".out") as f:
        ids = [[int(x) for x in line.split()] for line in f.read().split("\n")[: len(texts)]]
    return texts, ids


def corpus():
    with open(os.path.join(TESTDATA, "tokenizer", "corpus.json"), encoding="utf-8") as f:
        return json.load(f)


def run(args, **kw):
    return subprocess.run([BINARY] + args, capture_output=True, timeout=120, **kw)


def tokenize(model, text, bos=False):
    """Ids for `text` (bytes or str) through `pagoda tokenize --file`."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(data)
        path = f.name
    try:
        args = ["tokenize", "--model", model, "--file", path] + ([] if bos else ["--no-bos"])
        r = run(args)
    finally:
        os.unlink(path)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    out = r.stdout.decode()
    assert out.endswith("\n") and out.count("\n") == 1, repr(out)
    return [int(x) for x in out.split()]


def detokenize(model, ids, skip_special=False):
    args = ["detokenize", "--model", model, "--ids", " ".join(str(i) for i in ids)]
    if skip_special:
        args.append("--skip-special")
    r = run(args)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout.decode("utf-8")


def parallel_map(fn, items, workers=2):
    """The machine running CI has few cores; two workers keep it busy without thrashing."""
    with ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(fn, items))
