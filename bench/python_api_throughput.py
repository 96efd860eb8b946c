"""pagoda.LLM.generate against `pagoda bench throughput` on the same work, back to back.

Each round runs the binary's offline benchmark (N prompts of --input-len random token ids, exactly
--output-len greedy tokens each, ignore_eos, all submitted at once; its batched output tokens/s)
and the same work through the Python package in this process (one LLM built once with the same
engine configuration; N prompts of new random ids each round through LLM.generate, timed from the
call to its return, so submission and the conversion to RequestOutput objects are included). The
two alternate which goes first (odd rounds the binary, even rounds Python), so a load that rises or
falls through a round does not favour one side. Prints each round's two figures, their ratio
(Python / binary), the load average at the round's end and both sides' CPU seconds (all threads of
the process, over the batched run alone), then the median ratios. The CPU ratio is the work the
Python path adds; the throughput ratio also holds how much of the cores each side got.
Usage (scripts/bench_python_api.sh runs it with the build's module):
  python bench/python_api_throughput.py --binary build/pagoda --model M [--rounds 6] [--json]
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

import pagoda


def binary_run(a):
    cmd = [a.binary, "bench", "throughput", "--model", a.model, "--num-prompts", str(a.num_prompts), "--input-len",
           str(a.input_len), "--output-len", str(a.output_len), "--sequential", "0", "--max-num-seqs",
           str(a.max_num_seqs), "--threads", str(a.threads), "--device", "cpu", "--json", "--log-level", "warn"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    j = json.loads(r.stdout[r.stdout.index("{"):])
    # CPU seconds of the binary's batched run (every thread of its process), wall seconds of it.
    return j["batched_output_tokens_per_s"], j["batched_cpu_seconds"], j["batched_seconds"]


def python_run(llm, prompts, params):
    t0, c0 = time.perf_counter(), time.process_time()
    outs = llm.generate(prompts, params)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0  # cpu: every thread of this process
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    assert tokens == len(prompts) * params.max_tokens, tokens
    assert sum(o.num_cached_tokens for o in outs) == 0, "prefix-cache hits: not the binary's work"
    return tokens / dt, cpu, dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    pagoda.set_log_level("warn")
    # The engine configuration `bench throughput` builds (cmd_bench_throughput.cc).
    llm = pagoda.LLM(a.model, max_model_len=a.input_len + a.output_len + 1, max_num_seqs=a.max_num_seqs,
                     threads=a.threads, device="cpu")
    rng = random.Random(0)
    vocab = llm.vocab_size

    def random_prompts(n):
        # New ids every round: the LLM lives across rounds, and a repeated prompt would be served by
        # its prefix cache (the binary starts a fresh engine each run).
        return [[rng.randrange(vocab) for _ in range(a.input_len)] for _ in range(n)]

    params = pagoda.SamplingParams(temperature=0, max_tokens=a.output_len, ignore_eos=True)
    llm.generate(random_prompts(1), pagoda.SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))  # warm-up
    rounds = []
    for i in range(a.rounds):
        binary_first = i % 2 == 0
        if binary_first:
            cli, cli_cpu, cli_wall = binary_run(a)
        py, py_cpu, py_wall = python_run(llm, random_prompts(a.num_prompts), params)
        if not binary_first:
            cli, cli_cpu, cli_wall = binary_run(a)
        load = os.getloadavg()[0]
        # The same tokens on both sides: the CPU ratio (binary CPU s / Python CPU s) is what the
        # Python path costs in work; the wall ratio also holds how much of a core each side got
        # (CPU s / wall s, below the thread count when other jobs hold the cores).
        rounds.append({"round": i + 1, "first": "binary" if binary_first else "python", "bench_throughput_tok_s": cli,
                       "llm_generate_tok_s": py, "ratio": py / cli, "load_average_1m": load,
                       "llm_generate_cpu_s": py_cpu, "llm_generate_wall_s": py_wall,
                       "bench_throughput_cpu_s": cli_cpu, "bench_throughput_wall_s": cli_wall,
                       "cpu_ratio": cli_cpu / py_cpu})
        if not a.json:
            print(f"round {i + 1} ({'binary' if binary_first else 'python'} first): bench throughput {cli:8.1f} tok/s | "
                  f"LLM.generate {py:8.1f} tok/s | ratio {py / cli:.3f} | load {load:.1f} | CPU s / wall s: binary "
                  f"{cli_cpu:.1f}/{cli_wall:.1f}, Python {py_cpu:.1f}/{py_wall:.1f}, CPU ratio {cli_cpu / py_cpu:.3f}",
                  flush=True)
    median = statistics.median(r["ratio"] for r in rounds)
    cpu_median = statistics.median(r["cpu_ratio"] for r in rounds)
    if a.json:
        print(json.dumps({"model": a.model, "num_prompts": a.num_prompts, "input_len": a.input_len,
                          "output_len": a.output_len, "rounds": rounds, "median_ratio": median,
                          "median_cpu_ratio": cpu_median}))
    else:
        print(f"median ratio LLM.generate / bench throughput: {median:.3f} ({a.num_prompts} prompts x "
              f"{a.input_len} in / {a.output_len} out); median CPU ratio (binary CPU s / Python CPU s): {cpu_median:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
