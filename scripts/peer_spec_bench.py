#!/usr/bin/env python3
"""llama.cpp's prompt-lookup speculative decoding (llama-cpp-python's LlamaPromptLookupDecoding,
the one speculative mode its Python API offers) against its plain decoding, on text prompts, in
alternating rounds: the peer figure beside `pagoda bench spec --spec-method ngram`.

  .venv-peer/bin/python scripts/peer_spec_bench.py MODEL.gguf PROMPT_FILE [--tokens 64] [--k 4]
      [--rounds 2] [--threads 2]
PROMPT_FILE: text prompts separated by lines "---" (as bench/prompts/*.txt). Greedy (temperature
0), at most --tokens tokens each. Prints per round and prompt the tok/s of both, whether the texts
are equal, then one JSON line with the totals and the ratio (speculative tok/s / plain tok/s, over
the wall time of the completions; per process-CPU-second too).
"""
import argparse
import json
import time

from llama_cpp import Llama
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding


def prompts_of(path):
    out, cur = [], []
    for line in open(path, encoding="utf-8").read().split("\n"):
        if line == "---":
            out.append("\n".join(cur))
            cur = []
        else:
            cur.append(line)
    out.append("\n".join(cur))
    return [p + "\n" if not p.endswith("\n") else p for p in out if p.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("prompt_file")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=4, help="num_pred_tokens (drafts per step)")
    ap.add_argument("--ngram", type=int, default=4, help="max_ngram_size")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    kw = dict(model_path=a.model, n_ctx=2048, n_threads=a.threads, n_threads_batch=a.threads, verbose=False)
    engines = {"plain": Llama(**kw),
               "lookup": Llama(**kw, draft_model=LlamaPromptLookupDecoding(max_ngram_size=a.ngram, num_pred_tokens=a.k))}
    prompts = prompts_of(a.prompt_file)
    tot = {n: {"s": 0.0, "cpu": 0.0, "tokens": 0} for n in engines}
    equal = total = 0
    for r in range(a.rounds):
        order = list(engines) if r % 2 == 0 else list(reversed(engines))
        for i, p in enumerate(prompts):
            texts = {}
            for name in order:
                llm = engines[name]
                llm.reset()
                t0, c0 = time.perf_counter(), time.process_time()
                out = llm.create_completion(p, max_tokens=a.tokens, temperature=0.0, top_k=1)
                dt, dc = time.perf_counter() - t0, time.process_time() - c0
                n = out["usage"]["completion_tokens"]
                tot[name]["s"] += dt
                tot[name]["cpu"] += dc
                tot[name]["tokens"] += n
                texts[name] = out["choices"][0]["text"]
                print(f"round {r} prompt {i} {name}: {n} tokens, {n / dt:.2f} tok/s", flush=True)
            total += 1
            equal += texts["plain"] == texts["lookup"]
    res = {n: {"tok_s": t["tokens"] / t["s"], "tok_per_cpu_s": t["tokens"] / t["cpu"], "tokens": t["tokens"]}
           for n, t in tot.items()}
    res["ratio"] = res["lookup"]["tok_s"] / res["plain"]["tok_s"]
    res["cpu_ratio"] = res["lookup"]["tok_per_cpu_s"] / res["plain"]["tok_per_cpu_s"]
    res["equal_texts"] = f"{equal}/{total}"
    res["k"], res["ngram"], res["threads"] = a.k, a.ngram, a.threads
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
