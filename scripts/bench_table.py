#!/usr/bin/env python3
"""Summarises a Google Benchmark JSON of pagoda_kernel_bench (--benchmark_out=F.json, with
--benchmark_repetitions=N) as a markdown table: per benchmark the best repetition (the machine is
shared: the best run is the one least disturbed) and the spread of the repetitions.

  scripts/bench_table.py F.json
"""
import json
import sys
from collections import defaultdict


def main() -> None:
    data = json.load(open(sys.argv[1]))
    runs = defaultdict(list)
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        runs[b["run_name"]].append(b)
    print(f"machine: {data['context'].get('host_name', '?')}, {data['context'].get('num_cpus')} cpus, "
          f"{data['context'].get('mhz_per_cpu')} MHz, date {data['context'].get('date')}\n")
    print("| benchmark | label | time (best) | GB/s | GFLOP/s | bw ratio | peak ratio | spread |")
    print("|---|---|---|---|---|---|---|---|")
    for name, rs in runs.items():
        key = "real_time"
        best = min(rs, key=lambda r: r[key])
        worst = max(rs, key=lambda r: r[key])
        spread = worst[key] / best[key] - 1 if best[key] else 0
        def f(k, fmt="{:.2f}"):
            return fmt.format(best[k]) if k in best else ""
        extra = ""
        for k in ("GB/s", "GOP/s", "GFLOP/s", "tok/s"):
            if k in best and "Machine" in name or k == "tok/s" and k in best:
                extra = f"{k}={best[k]:.1f}"
        print(f"| {name} | {best.get('label', extra)} | {best[key]:.3g} {best['time_unit']} | {f('GB/s')} | "
              f"{f('GFLOP/s', '{:.1f}')} | {f('bw_ratio')} | {f('peak_ratio')} | {spread:.0%} |")


if __name__ == "__main__":
    main()
