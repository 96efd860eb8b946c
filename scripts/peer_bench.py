#!/usr/bin/env python3
"""Times llama.cpp (llama-cpp-python, built by scripts/setup_peer.sh) on a GGUF: prompt processing
(pp: one batch of N prompt tokens) and generation (tg: one token per eval), best of a few runs.

  .venv-peer/bin/python scripts/peer_bench.py models/SmolLM2-135M-Instruct.Q4_1.gguf --threads 2
Prints one JSON line: {"pp_tok_s": ..., "tg_tok_s": ..., ...}, wall-clock and per process-CPU-second
(the latter is what to compare on a shared, oversubscribed machine, for 1 thread).
"""
import argparse
import json
import os
import time

from llama_cpp import Llama


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    llm = Llama(model_path=a.model, n_ctx=a.pp + a.tg + 8, n_batch=a.pp, n_ubatch=a.pp, n_threads=a.threads,
                n_threads_batch=a.threads, verbose=False)
    prompt = [1] + [(17 * i + 100) % 40000 + 10 for i in range(a.pp - 1)]
    best_pp = best_tg = best_pp_cpu = best_tg_cpu = 0.0
    for _ in range(a.reps):
        llm.reset()
        t0, c0 = time.perf_counter(), time.process_time()
        llm.eval(prompt)
        best_pp = max(best_pp, a.pp / (time.perf_counter() - t0))
        best_pp_cpu = max(best_pp_cpu, a.pp / (time.process_time() - c0))
        llm.reset()
        llm.eval(prompt[:8])
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(a.tg):
            llm.eval([prompt[8 + i]])
        best_tg = max(best_tg, a.tg / (time.perf_counter() - t0))
        best_tg_cpu = max(best_tg_cpu, a.tg / (time.process_time() - c0))
    print(json.dumps({"model": os.path.basename(a.model), "threads": a.threads, "pp": a.pp, "pp_tok_s": round(best_pp, 1),
                      "tg": a.tg, "tg_tok_s": round(best_tg, 1),
                      # per process-CPU-second (all threads): the load-independent figure for 1 thread
                      "pp_tok_per_cpu_s": round(best_pp_cpu, 1), "tg_tok_per_cpu_s": round(best_tg_cpu, 1)}))


if __name__ == "__main__":
    main()
