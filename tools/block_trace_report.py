#!/usr/bin/env python3
"""Timeline of one traced step (PAGODA_BLOCK_TRACE=FILE, src/backend/cuda/block_trace.h).

Usage: tools/block_trace_report.py FILE [--copy-gbs 4292] [--layer 16]

Reads FILE (32-byte warp records: start, waited, end in global-timer ns, SM) and FILE.launches
(label base count grid_x grid_y grid_z warps_per_block bytes_per_warp) and prints, with every time
in microseconds from the step's first warp start:
  * per launch kind (label), averaged over its launches in the step: how long before its
    predecessor's last warp ended its first warp started (lead), how long after that its first warp
    passed the wait (release), from then to its own last warp's end (span), the spread of its warps'
    ends (drain: median to last), its bytes and their rate over the span, as a ratio to --copy-gbs;
  * one layer's launches in full (--layer: the index of a repeat of the first launch's label);
  * a throughput profile: each warp's bytes spread evenly over its lifetime, summed in 1 us bins,
    and the share of the step's time spent below 25 / 50 / 75 % of --copy-gbs.
Needs only numpy.
"""
import argparse
import re
import sys
from collections import OrderedDict

import numpy as np

REC = np.dtype([("start", "<u8"), ("waited", "<u8"), ("end", "<u8"), ("sm", "<u4"), ("pad", "<u4")])


def load(path):
    recs = np.fromfile(path, dtype=REC)
    launches = []
    with open(path + ".launches") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            label, base, count, gx, gy, gz, warps, bpw = line.split()
            launches.append(dict(label=label, base=int(base), count=int(count), grid=(int(gx), int(gy), int(gz)),
                                 warps=int(warps), bytes_per_warp=int(bpw)))
    return recs, launches


def working_warps(l):
    # GEMV labels carry n (outputs): warp i computes output i, warps past n do no work.
    m = re.search(r":n(\d+):", l["label"])
    return int(m.group(1)) if m else l["count"]


def launch_bytes(l):
    return working_warps(l) * l["bytes_per_warp"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--copy-gbs", type=float, default=0.0, help="device copy bandwidth, GB/s (ratios)")
    ap.add_argument("--layer", type=int, default=16)
    a = ap.parse_args()
    recs, launches = load(a.file)
    if not launches:
        sys.exit("no launches traced")
    missing = int(np.sum(recs["end"] == 0))
    t0 = int(recs["start"][recs["start"] > 0].min())
    us = lambda t: (t.astype(np.float64) - t0) / 1e3
    rows = []
    for l in launches:
        r = recs[l["base"]:l["base"] + l["count"]]
        r = r[r["end"] > 0]
        s, w, e = us(r["start"]), us(r["waited"]), us(r["end"])
        rows.append(dict(l, start_min=s.min(), start_max=s.max(), wait_min=w.min(), wait_max=w.max(),
                         end_p50=np.median(e), end_max=e.max(), bytes=launch_bytes(l), sms=len(np.unique(r["sm"]))))
    all_t = np.unique(np.concatenate([recs["start"], recs["waited"], recs["end"]]))
    all_t = all_t[all_t > 0]
    res = np.diff(all_t).min() if len(all_t) > 1 else 0
    step_end = max(r["end_max"] for r in rows)
    print(f"{len(launches)} launches, {len(recs)} warp records ({missing} without an end), step {step_end:.1f} us "
          f"(first warp start to last warp end), smallest timer step {res} ns")
    copy = a.copy_gbs

    # Per kind, in order of first appearance.
    kinds = OrderedDict()
    prev_end = None
    for r in rows:
        k = kinds.setdefault(r["label"], dict(n=0, lead=0.0, release=0.0, span=0.0, drain=0.0, bytes=0, sms=0))
        pe = prev_end if prev_end is not None else r["start_min"]
        k["n"] += 1
        k["lead"] += pe - r["start_min"]
        k["release"] += r["wait_min"] - pe
        k["span"] += r["end_max"] - pe
        k["drain"] += r["end_max"] - r["end_p50"]
        k["bytes"] += r["bytes"]
        k["sms"] += r["sms"]
        prev_end = r["end_max"]
    print("\nper launch kind (means over the step's launches of that kind; times in us)")
    print(f"{'kind':44s} {'n':>3s} {'lead':>6s} {'release':>7s} {'span':>7s} {'drain':>6s} {'MB':>7s} {'GB/s':>7s} "
          f"{'of copy':>7s} {'SMs':>4s}")
    total_span = 0.0
    for label, k in kinds.items():
        n = k["n"]
        span = k["span"] / n
        total_span += k["span"]
        gbs = k["bytes"] / n / (span * 1e3) if span > 0 else 0.0
        print(f"{label:44s} {n:3d} {k['lead'] / n:6.2f} {k['release'] / n:7.2f} {span:7.2f} {k['drain'] / n:6.2f} "
              f"{k['bytes'] / n / 1e6:7.2f} {gbs:7.1f} {gbs / copy if copy else 0:7.3f} {k['sms'] / n:4.0f}")
    print(f"(span summed over all launches: {total_span:.1f} us)")

    # One layer in full: the a.layer-th repeat of the first launch's label starts it.
    first = rows[0]["label"]
    starts = [i for i, r in enumerate(rows) if r["label"] == first]
    if len(starts) > 1:
        li = starts[min(a.layer, len(starts) - 2)]
        lj = starts[min(a.layer, len(starts) - 2) + 1]
        print(f"\nlaunches {li}..{lj - 1} in full (us from the step's start)")
        print(f"{'#':>4s} {'kind':44s} {'start min':>9s} {'start max':>9s} {'wait min':>9s} {'wait max':>9s} "
              f"{'end p50':>9s} {'end max':>9s}")
        for i in range(li, lj + 1):
            r = rows[i]
            print(f"{i:4d} {r['label']:44s} {r['start_min']:9.2f} {r['start_max']:9.2f} {r['wait_min']:9.2f} "
                  f"{r['wait_max']:9.2f} {r['end_p50']:9.2f} {r['end_max']:9.2f}")

    # Throughput profile.
    if copy:
        nb = int(np.ceil(step_end)) + 1
        prof = np.zeros(nb)
        for l in launches:
            if l["bytes_per_warp"] == 0:
                continue
            r = recs[l["base"]:l["base"] + working_warps(l)]
            r = r[r["end"] > 0]
            s, e = us(r["start"]), us(r["end"])
            for si, ei in zip(s, e):
                a0, a1 = int(si), int(ei)
                dur = max(ei - si, 1e-3)
                if a0 == a1:
                    prof[a0] += l["bytes_per_warp"]
                    continue
                prof[a0] += l["bytes_per_warp"] * (a0 + 1 - si) / dur
                prof[a0 + 1:a1] += l["bytes_per_warp"] / dur
                prof[a1] += l["bytes_per_warp"] * (ei - a1) / dur
        rate = prof / 1e3 / copy  # bytes per us -> GB/s, as a ratio to copy
        print(f"\nthroughput profile (bytes of each warp spread over its lifetime, 1 us bins, {nb} bins): "
              f"mean {rate.mean():.3f} of copy")
        for lim in (0.25, 0.5, 0.75, 0.9):
            print(f"  bins below {lim:.2f} of copy: {np.mean(rate < lim) * 100:5.1f} %")
        if len(starts) > 1:
            b0, b1 = int(rows[li]["start_min"]), int(rows[lj]["start_min"]) + 1
            print(f"  layer above, bins {b0}..{b1}: " + " ".join(f"{x:.2f}" for x in rate[b0:b1]))


if __name__ == "__main__":
    main()
