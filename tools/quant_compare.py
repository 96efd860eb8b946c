#!/usr/bin/env python3
"""Pagoda vs llama.cpp on every llama.cpp quantization type and mix of one model.

  .venv-peer/bin/python tools/quant_compare.py --f16 F16.gguf --name smollm2 --out /tmp/qc \
      [--types Q4_K_M,Q2_K,...] [--tokens 2048] [--threads 2] [--no-bench] [--imatrix M.npz]
  .venv-peer/bin/python tools/quant_compare.py --given FILE.gguf --name gemma3 --out /tmp/qc [--tokens 512]
      (one already quantized file as it was shipped, reported as type "given"; nothing is quantized)
  .venv-peer/bin/python tools/quant_compare.py --f16 F16.gguf --name smollm2 --out /tmp/qc --bench-only [--rounds 3]
      (speed only: per type, pp512 / tg128 of both engines in alternating rounds, the best round of
      each, wall-clock and per process-CPU-second (the rate that does not move with other tenants'
      load, at one thread); written to OUT/NAME-bench.json, the quality results are left as they are)
  .venv-peer/bin/python tools/quant_compare.py --f16 F16.gguf --name smollm2 --out /tmp/qc --greedy-only
      (the greedy column only, written into each type's row of OUT/NAME-results.json)
  .venv-peer/bin/python tools/quant_compare.py --given FILE.gguf --name olmoe --out /tmp/qc --agree-only [--tokens 64]
      (no dequantized reference, for files whose f32 copy does not fit: the engines against each other
      only, the agree and greedy columns; written to OUT/NAME-agree.json)

Needs .venv-peer (scripts/setup_peer.sh: llama-cpp-python, numpy, gguf) and build/pagoda (or --pagoda PATH).
Per type: llama.cpp's quantizer (llama_model_quantize, as llama-quantize) writes NAME-TYPE.gguf from
the F16 file; tools/gguf_convert.py (gguf.quants, independent of both engines) dequantizes that
file to NAME-TYPE.f32.gguf, whose forward in Pagoda's f32 path is the reference. Over `--tokens`
tokens of real text (this repository's README.md and docs/*.md: English prose and tables):
  loads       Pagoda loads and runs the file
  top1        fraction of positions whose argmax equals the reference's, per engine
  agree       fraction of positions where Pagoda's and llama.cpp's argmax agree (teacher forced)
  greedy      tokens of a 32-token greedy continuation of README.md's first 400 characters that are
              identical in both engines before the first difference (`pagoda generate`, llama.cpp eval)
  kl          mean over positions of KL(reference || engine) of the next-token distributions
  kl_diff     mean over positions of KL_pagoda - KL_llama.cpp, with its standard error from 64-position
              runs: a difference inside two standard errors is not shown by this text
  pp512/tg128 CPU tok/s of `pagoda bench -p 512 -n 128` and scripts/peer_bench.py, same threads
Both engines keep an f32 KV cache (the reference's), so the KL measures the weights and kernels.
Writes OUT/NAME-results.json and prints a markdown table.
"""
import argparse
import ctypes
import glob
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGODA = os.path.join(ROOT, "build", "pagoda")

# llama_ftype values (llama.h) of every type and mix llama-quantize writes.
FTYPES = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9,
    "Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15,
    "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18, "IQ2_XXS": 19, "IQ2_XS": 20, "Q2_K_S": 21, "IQ3_XS": 22,
    "IQ3_XXS": 23, "IQ1_S": 24, "IQ4_NL": 25, "IQ3_S": 26, "IQ3_M": 27, "IQ2_S": 28, "IQ2_M": 29,
    "IQ4_XS": 30, "IQ1_M": 31, "BF16": 32, "TQ1_0": 36, "TQ2_0": 37,
}
DEFAULT_TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q2_K_S", "Q3_K_S", "Q3_K_M",
                 "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0"]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def quantize(src: str, dst: str, ftype: int, threads: int, imatrix: str = None) -> None:
    """llama_model_quantize, with an importance matrix (tools/imatrix.py's .npz) when given; dst
    appears only once complete."""
    import llama_cpp
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = ftype
    p.nthread = threads
    keep = []
    if imatrix:
        data = np.load(imatrix)
        entries = (llama_cpp.llama_model_imatrix_data * (len(data.files) + 1))()
        for e, name in zip(entries, data.files):
            v = np.ascontiguousarray(data[name], dtype=np.float32)
            keep.append(v)
            e.name, e.data, e.size = name.encode(), v.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), v.size
        keep.append(entries)  # the last entry stays zeroed: the list's terminator (name == NULL)
        p.imatrix = ctypes.cast(entries, ctypes.POINTER(llama_cpp.llama_model_imatrix_data))
    part = f"{dst}.part{os.getpid()}"  # renamed when complete: a concurrent run never reads half a file
    rc = llama_cpp.llama_model_quantize(src.encode(), part.encode(), ctypes.byref(p))
    if rc != 0:
        if os.path.exists(part):
            os.remove(part)
        raise RuntimeError(f"llama_model_quantize rc={rc}")
    os.replace(part, dst)


def text_ids(model: str, n: int) -> list:
    from llama_cpp import Llama
    llm = Llama(model_path=model, vocab_only=True, verbose=False)
    files = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    text = "\n\n".join(open(f, encoding="utf-8").read() for f in files)
    ids = llm.tokenize(text.encode(), add_bos=True)
    if len(ids) < n:
        raise RuntimeError(f"only {len(ids)} tokens of text")
    return ids[:n]


def pagoda_logits(model: str, ids: list, work: str) -> np.ndarray:
    out = os.path.join(work, "dump")
    subprocess.run(["rm", "-rf", out], check=True)
    r = subprocess.run([PAGODA, "dump-layers", "-m", model, "--ids", " ".join(map(str, ids)), "-o", out],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip()[-400:])
    meta = json.load(open(os.path.join(out, "meta.json")))
    logits = np.fromfile(os.path.join(out, "logits.f32"), dtype=np.float32).reshape(len(ids), meta["vocab"])
    subprocess.run(["rm", "-rf", out], check=True)
    return logits


def llama_logits(model: str, ids: list, threads: int) -> np.ndarray:
    from llama_cpp import Llama
    llm = Llama(model_path=model, n_ctx=len(ids) + 8, n_batch=512, n_ubatch=512, logits_all=True, n_threads=threads,
                n_threads_batch=threads, type_k=0, type_v=0, verbose=False)
    llm.eval(ids)
    out = np.array(llm.scores[:len(ids)], dtype=np.float32)
    del llm
    return out


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def position_kl(ref: np.ndarray, eng: np.ndarray) -> np.ndarray:
    """KL(ref || eng) of the next-token distribution at each position: [positions] float64."""
    kls = []
    for i in range(0, ref.shape[0], 128):
        lr, le = log_softmax(ref[i:i + 128]), log_softmax(eng[i:i + 128])
        kls.append((np.exp(lr) * (lr - le)).sum(axis=-1))
    return np.concatenate(kls)


def top1(ref: np.ndarray, eng: np.ndarray) -> float:
    return float((ref.argmax(-1) == eng.argmax(-1)).mean())


def paired_difference(a: np.ndarray, b: np.ndarray, block: int = 64) -> tuple:
    """Mean of a - b over positions and its standard error from the means of `block`-position runs
    (neighbouring positions share a context, so their differences are not independent)."""
    d = a - b
    n = len(d) // block
    if n < 2:
        return float(d.mean()), float("nan")
    means = d[:n * block].reshape(n, block).mean(axis=1)
    return float(d.mean()), float(means.std(ddof=1) / np.sqrt(n))


def greedy_llama(model: str, prompt: str, n: int, threads: int) -> list:
    """Greedy continuation with llama.cpp; its context holds the prompt and the n new tokens however
    many tokens the model's vocabulary spells the prompt in (a filler vocabulary spells it byte by byte)."""
    from llama_cpp import Llama
    ids = Llama(model_path=model, vocab_only=True, verbose=False).tokenize(prompt.encode(), add_bos=True)
    llm = Llama(model_path=model, n_ctx=len(ids) + n + 8, n_threads=threads, n_threads_batch=threads, type_k=0,
                type_v=0, logits_all=True, verbose=False)
    llm.eval(ids)
    out = []
    for _ in range(n):
        t = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(t)
        llm.eval([t])
    return out


def pagoda_greedy_cli(model: str, prompt: str, n: int, threads: int) -> list:
    """Greedy continuation with the engine (tokenizer, KV cache, decode steps) from the prompt text."""
    r = subprocess.run([PAGODA, "generate", "-m", model, "--prompt", prompt, "-n", str(n), "--temperature", "0",
                        "--ids", "--ignore-eos", "-t", str(threads), "--kv-dtype", "f32"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return [int(v) for v in r.stdout.split()]


def greedy_agreement(model: str, prompt: str, n: int, threads: int) -> dict:
    """{"greedy": identical leading tokens of both engines' n-token greedy continuations} or
    {"greedy_error": why one engine's run failed}."""
    try:
        gp = pagoda_greedy_cli(model, prompt, n, threads)
        if gp is None:
            return {"greedy_error": "pagoda generate failed"}
        gl = greedy_llama(model, prompt, n, threads)
    except RuntimeError as e:
        return {"greedy_error": str(e)}
    same = 0
    while same < min(len(gp), len(gl)) and gp[same] == gl[same]:
        same += 1
    return {"greedy": same}


def bench_pagoda(model: str, threads: int) -> tuple:
    """(pp512, tg128, pp512 per CPU second, tg128 per CPU second) tok/s of `pagoda bench`; Nones on failure."""
    r = subprocess.run([PAGODA, "bench", "-m", model, "-p", "512", "-n", "128", "-t", str(threads), "-r", "2", "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, None, None, None
    j = json.loads(r.stdout[r.stdout.index("{"):])
    pp = tg = pp_cpu = tg_cpu = None
    for rec in j["results"]:
        if rec["test"].startswith("pp"):
            pp, pp_cpu = rec["tokens_per_s"], rec.get("tokens_per_cpu_s")
        elif rec["test"].startswith("tg"):
            tg, tg_cpu = rec["tokens_per_s"], rec.get("tokens_per_cpu_s")
    return pp, tg, pp_cpu, tg_cpu


def bench_llama(model: str, threads: int) -> tuple:
    """The same four figures of llama.cpp (scripts/peer_bench.py, best of its repetitions)."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "peer_bench.py"), model, "--threads", str(threads),
                        "--pp", "512", "--tg", "128", "--reps", "2"], capture_output=True, text=True)
    if r.returncode != 0:
        return None, None, None, None
    j = json.loads(r.stdout.strip().splitlines()[-1])
    return j["pp_tok_s"], j["tg_tok_s"], j["pp_tok_per_cpu_s"], j["tg_tok_per_cpu_s"]


def dtype_mix(model: str) -> str:
    from gguf import GGUFReader
    counts = {}
    for t in GGUFReader(model).tensors:
        if len(t.shape) >= 2:
            counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    return " ".join(f"{k}:{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def main() -> None:
    global PAGODA
    ap = argparse.ArgumentParser()
    ap.add_argument("--f16", help="the F16 file llama.cpp's quantizer starts from")
    ap.add_argument("--given", help="an already quantized file: compare it alone (type 'given')")
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--types", default=",".join(DEFAULT_TYPES))
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the quantized files (the f32 reference is always removed)")
    ap.add_argument("--imatrix", help="tools/imatrix.py's .npz, given to the quantizer (Q2_K_S and IQ1-IQ3 need one)")
    ap.add_argument("--bench-only", action="store_true", help="pp512 / tg128 of both engines only (alternating rounds)")
    ap.add_argument("--rounds", type=int, default=3, help="--bench-only: alternating rounds per type")
    ap.add_argument("--greedy-only", action="store_true",
                    help="the greedy column alone, written into the rows of OUT/NAME-results.json")
    ap.add_argument("--pagoda", default=PAGODA, help="the pagoda binary (default: build/pagoda of this checkout)")
    ap.add_argument("--agree-only", action="store_true",
                    help="with --given: the engines against each other only (top-1 agreement, greedy), no f32 reference")
    a = ap.parse_args()
    PAGODA = a.pagoda
    if bool(a.f16) == bool(a.given):
        ap.error("give exactly one of --f16 and --given")
    if a.given:
        a.types = "given"
    os.makedirs(a.out, exist_ok=True)
    if a.bench_only:
        bench_types(a)
        return
    if a.greedy_only:
        greedy_types(a)
        return
    if a.agree_only:
        if not a.given:
            ap.error("--agree-only needs --given")
        agree_only(a)
        return
    res_path = os.path.join(a.out, f"{a.name}-results.json")
    results = json.load(open(res_path)) if os.path.exists(res_path) else {}
    ids = text_ids(a.f16 or a.given, a.tokens)
    prompt = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()[:400]
    for ty in a.types.split(","):
        if ty in results and results[ty].get("done"):
            continue
        row = {"type": ty}
        qpath = a.given or os.path.join(a.out, f"{a.name}-{ty}.gguf")
        if a.f16 and os.path.abspath(qpath) == os.path.abspath(a.f16):
            ap.error(f"--f16 {a.f16} is where type {ty}'s file would be written (and then deleted): "
                     "move it or change --name/--out")
        fpath = os.path.join(a.out, f"{a.name}-{ty}.f32.gguf")
        t0 = time.time()
        try:
            if not os.path.exists(qpath):
                quantize(a.f16, qpath, FTYPES[ty], a.threads, a.imatrix)
            row["mix"] = dtype_mix(qpath)
            row["size_mb"] = round(os.path.getsize(qpath) / 1e6, 1)
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gguf_convert.py"), qpath, fpath, "--to", "f32"],
                           check=True)
            ref = pagoda_logits(fpath, ids, a.out)
            os.remove(fpath)
            lla = llama_logits(qpath, ids, a.threads)
            lla_kl = position_kl(ref, lla)
            row["llama_kl"], row["llama_top1"] = float(lla_kl.mean()), top1(ref, lla)
            try:
                pag = pagoda_logits(qpath, ids, a.out)
                row["loads"] = True
                pag_kl = position_kl(ref, pag)
                row["pagoda_kl"], row["pagoda_top1"] = float(pag_kl.mean()), top1(ref, pag)
                row["kl_diff"], row["kl_diff_se"] = paired_difference(pag_kl, lla_kl)
                row["agree"] = float((pag.argmax(-1) == lla.argmax(-1)).mean())
                del pag
            except RuntimeError as e:
                row["loads"] = False
                row["error"] = str(e)
            del ref, lla
            if row.get("loads"):  # a failure of the greedy column alone leaves the row's KL standing
                row.update(greedy_agreement(qpath, prompt, 32, a.threads))
            if not a.no_bench and row.get("loads"):
                row["pagoda_pp"], row["pagoda_tg"] = bench_pagoda(qpath, a.threads)[:2]
                row["llama_pp"], row["llama_tg"] = bench_llama(qpath, a.threads)[:2]
            row["done"] = True
        except Exception as e:  # noqa: BLE001 - reported per row
            row["error"] = f"{type(e).__name__}: {e}"
        row["seconds"] = round(time.time() - t0)
        if not a.keep and not a.given and os.path.exists(qpath) and row.get("done"):
            os.remove(qpath)
        results[ty] = row
        json.dump(results, open(res_path, "w"), indent=1)
        log(ty, json.dumps(row))
    print_table(results, a)


def greedy_types(a) -> None:
    """The greedy column alone: per type, both engines' 32-token greedy continuations of README.md's
    first 400 characters, recorded in that type's row of the quality results (created if absent)."""
    res_path = os.path.join(a.out, f"{a.name}-results.json")
    results = json.load(open(res_path)) if os.path.exists(res_path) else {}
    prompt = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()[:400]
    for ty in a.types.split(","):
        qpath = a.given or os.path.join(a.out, f"{a.name}-{ty}.gguf")
        if not os.path.exists(qpath):
            quantize(a.f16, qpath, FTYPES[ty], a.threads, a.imatrix)
        row = results.setdefault(ty, {"type": ty, "mix": dtype_mix(qpath)})
        row.pop("greedy", None)
        row.pop("greedy_error", None)
        row.update(greedy_agreement(qpath, prompt, 32, a.threads))
        if "greedy" in row:
            row.setdefault("loads", True)  # pagoda generate ran the file
        if not a.keep and not a.given:
            os.remove(qpath)
        json.dump(results, open(res_path, "w"), indent=1)
        log(ty, "greedy", row.get("greedy", row.get("greedy_error")))
    print_table(results, a)
def agree_only(a) -> None:
    """Teacher-forced argmax agreement over `--tokens` tokens of the text and the shared prefix of the
    32-token greedy continuations, Pagoda against llama.cpp on one file (no reference forward). The
    greedy prompt is README.md's first 100 characters: a filler vocabulary (tools/make_bench_models.py)
    spells text byte by byte, and a short prompt keeps the run short on a large file."""
    ids = text_ids(a.given, a.tokens)
    prompt = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()[:100]
    t0 = time.time()
    lla = llama_logits(a.given, ids, a.threads)
    pag = pagoda_logits(a.given, ids, a.out)
    row = {"file": a.given, "mix": dtype_mix(a.given), "tokens": len(ids),
           "agree": float((pag.argmax(-1) == lla.argmax(-1)).mean()),
           "kl_llama_pagoda": float(position_kl(lla, pag).mean()),
           "max_abs_logit_diff": float(np.abs(pag - lla).max())}
    row.update(greedy_agreement(a.given, prompt, 32, a.threads))
    row["seconds"] = round(time.time() - t0)
    json.dump(row, open(os.path.join(a.out, f"{a.name}-agree.json"), "w"), indent=1)
    print(json.dumps(row))


def bench_types(a) -> None:
    """Speed columns alone: per type, `--rounds` rounds of Pagoda then llama.cpp (the order flipped
    each round), the best round of each engine (both benches keep their own repetitions)."""
    res_path = os.path.join(a.out, f"{a.name}-bench.json")
    results = json.load(open(res_path)) if os.path.exists(res_path) else {}
    for ty in a.types.split(","):
        if ty in results and results[ty].get("done"):
            continue
        qpath = a.given or os.path.join(a.out, f"{a.name}-{ty}.gguf")
        if not os.path.exists(qpath):
            quantize(a.f16, qpath, FTYPES[ty], a.threads, a.imatrix)
        row = {"type": ty, "mix": dtype_mix(qpath), "size_mb": round(os.path.getsize(qpath) / 1e6, 1), "rounds": []}
        load0 = os.getloadavg()[0]
        for r in range(a.rounds):
            order = ["pagoda", "llama"] if r % 2 == 0 else ["llama", "pagoda"]
            rec = {}
            for eng in order:
                rec[eng] = bench_pagoda(qpath, a.threads) if eng == "pagoda" else bench_llama(qpath, a.threads)
            row["rounds"].append(rec)
        for eng in ("pagoda", "llama"):
            for i, key in enumerate(("pp", "tg", "pp_cpu", "tg_cpu")):
                vals = [rec[eng][i] for rec in row["rounds"] if rec[eng][i]]
                row[f"{eng}_{key}"] = max(vals) if vals else None
        row["load"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
        row["done"] = True
        if not a.keep and not a.given:
            os.remove(qpath)
        results[ty] = row
        json.dump(results, open(res_path, "w"), indent=1)
        log(ty, json.dumps({k: v for k, v in row.items() if k != "rounds"}))
    def ratio(r, key):
        return r[f"pagoda_{key}"] / r[f"llama_{key}"] if r.get(f"pagoda_{key}") and r.get(f"llama_{key}") else None
    print(f"| {a.name} type | tensors (2-d) | MB | pp512 P / L (wall) | per CPU-s | ratio | tg128 P / L (wall) | per CPU-s "
          f"| ratio | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for ty, r in results.items():
        print(f"| {ty} | {r['mix']} | {r['size_mb']} | {fmt(r.get('pagoda_pp'), '.0f')} / {fmt(r.get('llama_pp'), '.0f')} "
              f"| {fmt(r.get('pagoda_pp_cpu'), '.0f')} / {fmt(r.get('llama_pp_cpu'), '.0f')} | {fmt(ratio(r, 'pp_cpu'), '.2f')}x "
              f"| {fmt(r.get('pagoda_tg'), '.1f')} / {fmt(r.get('llama_tg'), '.1f')} "
              f"| {fmt(r.get('pagoda_tg_cpu'), '.1f')} / {fmt(r.get('llama_tg_cpu'), '.1f')} | {fmt(ratio(r, 'tg_cpu'), '.2f')}x "
              f"| {r['load'][0]}-{r['load'][1]} |")


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def print_table(results: dict, a) -> None:
    print(f"| {a.name} type | tensors (2-d) | loads | KL Pagoda | KL llama.cpp | KL P - L (2 s.e.) | top-1 P / L "
          f"| agree | greedy 32 | pp512 P / L | tg128 P / L |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for ty, r in results.items():
        print(f"| {ty} | {r.get('mix', '-')} | {'yes' if r.get('loads') else 'no: ' + r.get('error', '')[:60]} "
              f"| {fmt(r.get('pagoda_kl'), '.5f')} | {fmt(r.get('llama_kl'), '.5f')} "
              f"| {fmt(r.get('kl_diff'), '+.5f')} ({fmt(2 * r['kl_diff_se'] if 'kl_diff_se' in r else None, '.5f')}) "
              f"| {fmt(r.get('pagoda_top1'), '.3f')} / {fmt(r.get('llama_top1'), '.3f')} | {fmt(r.get('agree'), '.3f')} "
              f"| {r.get('greedy', '-')} | {fmt(r.get('pagoda_pp'), '.0f')} / {fmt(r.get('llama_pp'), '.0f')} "
              f"| {fmt(r.get('pagoda_tg'), '.1f')} / {fmt(r.get('llama_tg'), '.1f')} |")


if __name__ == "__main__":
    main()
