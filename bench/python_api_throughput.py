"""pagoda.LLM.generate against `pagoda bench throughput` on the same work, back to back.

Each round runs the binary's offline benchmark (N prompts of --input-len random token ids, exactly
--output-len greedy tokens each, ignore_eos, all submitted at once; its batched output tokens/s),
then the same work through the Python package in this process (one LLM built once with the same
engine configuration; 64 prompts of new random ids each round through LLM.generate, timed from the call to its
return, so submission and the conversion to RequestOutput objects are included). Prints each
round's two figures and their ratio (Python / binary), and the median ratio.
Usage (scripts/bench_python_api.sh runs it with the build's module):
  python bench/python_api_throughput.py --binary build/pagoda --model M [--rounds 3] [--json]
"""
import argparse
import json
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
    return json.loads(r.stdout[r.stdout.index("{"):])["batched_output_tokens_per_s"]


def python_run(llm, prompts, params):
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params)
    dt = time.perf_counter() - t0
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    assert tokens == len(prompts) * params.max_tokens, tokens
    assert sum(o.num_cached_tokens for o in outs) == 0, "prefix-cache hits: not the binary's work"
    return tokens / dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--rounds", type=int, default=3)
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
        cli = binary_run(a)
        py = python_run(llm, random_prompts(a.num_prompts), params)
        rounds.append({"round": i + 1, "bench_throughput_tok_s": cli, "llm_generate_tok_s": py, "ratio": py / cli})
        if not a.json:
            print(f"round {i + 1}: bench throughput {cli:8.1f} tok/s | LLM.generate {py:8.1f} tok/s | ratio {py / cli:.3f}",
                  flush=True)
    median = statistics.median(r["ratio"] for r in rounds)
    if a.json:
        print(json.dumps({"model": a.model, "num_prompts": a.num_prompts, "input_len": a.input_len,
                          "output_len": a.output_len, "rounds": rounds, "median_ratio": median}))
    else:
        print(f"median ratio LLM.generate / bench throughput: {median:.3f} ({a.num_prompts} prompts x "
              f"{a.input_len} in / {a.output_len} out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
