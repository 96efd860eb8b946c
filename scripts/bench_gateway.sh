#!/usr/bin/env bash
# Gateway overhead: `pagoda bench serve` straight to one worker and through `pagoda-gateway` in
# front of it, in ROUNDS interleaved pairs (the order alternates: direct first in odd rounds,
# gateway first in even ones, so a drift of the machine's load hits both alike). Reports per round
# and as medians with their spread (min..max) and the paired differences, plus the CPU time per
# streamed token of the gateway and of the worker (from /proc: other load does not change it).
#
# Usage: scripts/bench_gateway.sh [MODEL.gguf] [ROUNDS]   (PAGODA_BIN_DIR, default build/, holds pagoda and
#   pagoda-gateway)
# Environment: CONCURRENCY (64), NUM_PROMPTS (256), INPUT_LEN (64), OUTPUT_LEN (64),
#   WORKER_CPUS (taskset list for the worker, default 0), GATEWAY_CPUS (default 1),
#   CLIENT_CPUS (the bench client, default 1), THREADS (worker compute threads, 1),
#   GATEWAY_THREADS (1), WORKER_ARGS (more `pagoda serve` flags, e.g. --device cuda), LATENCY_PROMPTS (64: a second, unloaded series at concurrency 1 that shows
#   the gateway's added TTFT without queueing in the worker; 0 skips it),
#   BASELINE_GATEWAY (another pagoda-gateway binary, e.g. the previous commit's: a third arm on its
#   own port and the gateway's CPUs, in the same rotating order, reported as new / baseline ratios).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-../shared/models/stories260K/stories260K.gguf}
rounds=${2:-4}
conc=${CONCURRENCY:-64}
n=${NUM_PROMPTS:-256}
lat_n=${LATENCY_PROMPTS:-64}
wcpus=${WORKER_CPUS:-0}; gcpus=${GATEWAY_CPUS:-1}; ccpus=${CLIENT_CPUS:-1}
wport=$((20000 + RANDOM % 10000)); gport=$((wport + 1))
out=$(mktemp -d)
bin=${PAGODA_BIN_DIR:-build}
# No prefix cache: every round sends the same seeded prompts, and a cache would make each run after
# the first cheaper than the first (the rounds must do the same work).
taskset -c "$wcpus" "$bin/pagoda" serve --model "$model" --port "$wport" --max-model-len 512 -t "${THREADS:-1}" \
  --no-prefix-caching --no-access-log ${WORKER_ARGS:-} >"$out/worker.log" 2>&1 &
wpid=$!
taskset -c "$gcpus" "$bin/pagoda-gateway" --port "$gport" --worker "http://127.0.0.1:$wport" \
  --threads "${GATEWAY_THREADS:-1}" --log-level warn >"$out/gateway.log" 2>&1 &
gpid=$!
targets=(direct gateway)
bpid=
if [ -n "${BASELINE_GATEWAY:-}" ]; then
  bport=$((gport + 1))
  taskset -c "$gcpus" "$BASELINE_GATEWAY" --port "$bport" --worker "http://127.0.0.1:$wport" \
    --threads "${GATEWAY_THREADS:-1}" --log-level warn >"$out/baseline.log" 2>&1 &
  bpid=$!
  targets+=(baseline)
fi
trap 'kill $gpid $wpid $bpid 2>/dev/null || true; rm -rf "$out"' EXIT
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$gport/health" >/dev/null && break; sleep 0.1; done
[ -n "$bpid" ] && for _ in $(seq 300); do curl -sf "http://127.0.0.1:$bport/health" >/dev/null && break; sleep 0.1; done
name=$(curl -s "http://127.0.0.1:$wport/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
vocab=$(curl -s "http://127.0.0.1:$wport/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["vocab_size"])')
bench=(taskset -c "$ccpus" "$bin/pagoda" bench serve --model "$name" --vocab-size "$vocab" --seed 1 --json --log-level warn)
shape=(--max-concurrency "$conc" --input-len "${INPUT_LEN:-64}" --output-len "${OUTPUT_LEN:-64}")
load_args=(--num-prompts "$n" "${shape[@]}")
lat_args=(--max-concurrency 1 --input-len "${INPUT_LEN:-64}" --output-len 4)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "worker on CPUs $wcpus, gateway on $gcpus, client on $ccpus; model $model"
for port in $wport $gport ${bport:-}; do  # warm-up of every path
  "${bench[@]}" --url "http://127.0.0.1:$port" --num-prompts "$conc" "${shape[@]}" >/dev/null
  "${bench[@]}" --url "http://127.0.0.1:$port" "${lat_args[@]}" --num-prompts 8 >/dev/null
done
gw_ticks=0; w_ticks=0; gw_tokens=0; b_ticks=0; b_tokens=0
tokens_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["total_output_tokens"])' "$1"; }
run_round() {  # $1 = round: the targets in an order rotated by the round (each goes first in turn)
  local n=${#targets[@]} k t port
  for ((k = 0; k < n; k++)); do
    t=${targets[$(((k + $1 - 1) % n))]}
    port=$wport; [ "$t" = gateway ] && port=$gport; [ "$t" = baseline ] && port=$bport
    local g0 w0 b0; g0=$(ticks $gpid); w0=$(ticks $wpid); b0=0; [ -n "$bpid" ] && b0=$(ticks $bpid)
    [ "$t" != direct ] && curl -s "http://127.0.0.1:$port/metrics" >"$out/metrics-before-$t-$1.txt"
    "${bench[@]}" --url "http://127.0.0.1:$port" "${load_args[@]}" >"$out/$t-$1.json"
    [ "$t" != direct ] && curl -s "http://127.0.0.1:$port/metrics" >"$out/metrics-after-$t-$1.txt"
    if [ "$t" = gateway ]; then
      gw_ticks=$((gw_ticks + $(ticks $gpid) - g0))
      gw_tokens=$((gw_tokens + $(tokens_of "$out/$t-$1.json")))
    elif [ "$t" = baseline ]; then
      b_ticks=$((b_ticks + $(ticks $bpid) - b0))
      b_tokens=$((b_tokens + $(tokens_of "$out/$t-$1.json")))
    fi
    w_ticks=$((w_ticks + $(ticks $wpid) - w0))
    if [ "$lat_n" -gt 0 ]; then "${bench[@]}" --url "http://127.0.0.1:$port" "${lat_args[@]}" --num-prompts "$lat_n" >"$out/lat-$t-$1.json"; fi
  done
}
for r in $(seq "$rounds"); do run_round "$r"; done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" "$rounds" "$gw_ticks" "$w_ticks" "$gw_tokens" "$(getconf CLK_TCK)" "$lat_n" "$b_ticks" "$b_tokens" <<'PY'
import json, os, statistics, sys
out, rounds, gt, wt, gtok, hz, lat_n, bt, btok = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8]), int(sys.argv[9])
baseline = btok > 0
load = lambda t: [json.load(open(f"{out}/{t}-{r}.json")) for r in range(1, rounds + 1)]
d, g = load("direct"), load("gateway")
med = statistics.median
def spread(xs): return f"{med(xs):.2f} ({min(xs):.2f}..{max(xs):.2f})"
print(f"{rounds} interleaved rounds, {d[0]['num_prompts']} prompts x {d[0]['output_len']} tokens, concurrency {d[0]['max_concurrency']}")
for r in range(rounds):
    print(f"  round {r+1}: direct ttft p50 {d[r]['median_ttft_ms']:.2f} ms, {d[r]['output_throughput']:.0f} tok/s | "
          f"gateway ttft p50 {g[r]['median_ttft_ms']:.2f} ms, {g[r]['output_throughput']:.0f} tok/s")
dt, gtt = [x["median_ttft_ms"] for x in d], [x["median_ttft_ms"] for x in g]
dth, gth = [x["output_throughput"] for x in d], [x["output_throughput"] for x in g]
print(f"p50 TTFT ms, median (min..max): direct {spread(dt)}, gateway {spread(gtt)}; "
      f"paired gateway-direct {spread([b - a for a, b in zip(dt, gtt)])}")
print(f"throughput tok/s: direct {spread(dth)}, gateway {spread(gth)}; "
      f"paired ratio gateway/direct {med([b / a for a, b in zip(dth, gth)]):.3f} "
      f"({min(b / a for a, b in zip(dth, gth)):.3f}..{max(b / a for a, b in zip(dth, gth)):.3f})")
if lat_n:
    ld = [json.load(open(f"{out}/lat-direct-{r}.json"))["median_ttft_ms"] for r in range(1, rounds + 1)]
    lg = [json.load(open(f"{out}/lat-gateway-{r}.json"))["median_ttft_ms"] for r in range(1, rounds + 1)]
    print(f"concurrency 1 ({lat_n} prompts, 4 tokens): p50 TTFT direct {spread(ld)}, gateway {spread(lg)}; "
          f"paired added {spread([b - a for a, b in zip(ld, lg)])} ms")
def overhead(r, t="gateway"):
    """The gateway's own part of TTFT in one run (pagoda_gateway_ttft_overhead_seconds): mean and
    p50/p99 interpolated in the histogram's buckets, in ms."""
    def read(f):
        b, tot = {}, [0.0, 0.0]
        for line in open(f):
            if line.startswith("pagoda_gateway_ttft_overhead_seconds_bucket"):
                le = line.split('le="')[1].split('"')[0]
                b[float("inf") if le == "+Inf" else float(le)] = b.get(float("inf") if le == "+Inf" else float(le), 0) + float(line.split()[-1])
            elif line.startswith("pagoda_gateway_ttft_overhead_seconds_sum"):
                tot[0] += float(line.split()[-1])
            elif line.startswith("pagoda_gateway_ttft_overhead_seconds_count"):
                tot[1] += float(line.split()[-1])
        return b, tot
    (b0, t0), (b1, t1) = read(f"{out}/metrics-before-{t}-{r}.txt"), read(f"{out}/metrics-after-{t}-{r}.txt")
    n = t1[1] - t0[1]
    if n <= 0:
        return None
    les = sorted(b1)
    cum = [b1[le] - b0.get(le, 0) for le in les]
    def q(frac):
        want, lo, prev = frac * n, 0.0, 0.0
        for le, c in zip(les, cum):
            if c >= want:
                hi = le if le != float("inf") else lo
                return 1e3 * (lo + (hi - lo) * (want - prev) / max(c - prev, 1e-9))
            lo, prev = le, c
        return float("nan")
    return 1e3 * (t1[0] - t0[0]) / n, q(0.5), q(0.99)
ov = [overhead(r) for r in range(1, rounds + 1)]
if all(ov):
    print(f"the gateway's own part of TTFT at {d[0]['max_concurrency']} streams (ttft_overhead_seconds), median over rounds: "
          f"mean {med([o[0] for o in ov]):.3f} ms, p50 {med([o[1] for o in ov]):.3f} ms "
          f"(rounds {min(o[1] for o in ov):.3f}..{max(o[1] for o in ov):.3f}), p99 {med([o[2] for o in ov]):.3f} ms")
print(f"CPU per streamed token: gateway {1e6 * gt / hz / gtok:.1f} us ({gt / hz:.2f} s for {gtok} tokens), "
      f"worker {1e6 * wt / hz / ((3 if baseline else 2) * gtok):.1f} us")
if baseline:
    b = load("baseline")
    bt_ = [x["median_ttft_ms"] for x in b]
    bth = [x["output_throughput"] for x in b]
    print(f"baseline gateway ({os.environ.get('BASELINE_GATEWAY')}): p50 TTFT {spread(bt_)} ms, paired baseline-direct "
          f"{spread([y - x for x, y in zip(dt, bt_)])} ms; throughput paired ratio baseline/direct "
          f"{med([y / x for x, y in zip(dth, bth)]):.3f}")
    print(f"new vs baseline, paired per round: p50 TTFT difference {spread([x - y for x, y in zip(gtt, bt_)])} ms, "
          f"throughput ratio {med([x / y for x, y in zip(gth, bth)]):.3f} "
          f"({min(x / y for x, y in zip(gth, bth)):.3f}..{max(x / y for x, y in zip(gth, bth)):.3f})")
    if lat_n:
        lb = [json.load(open(f"{out}/lat-baseline-{r}.json"))["median_ttft_ms"] for r in range(1, rounds + 1)]
        print(f"concurrency 1: p50 TTFT baseline {spread(lb)} ms; paired new-baseline {spread([x - y for x, y in zip(lg, lb)])} ms")
    ob = [overhead(r, "baseline") for r in range(1, rounds + 1)]
    if all(ob) and all(ov):
        print(f"the gateway's own part of TTFT, p50 median over rounds: new {med([o[1] for o in ov]):.3f} ms, "
              f"baseline {med([o[1] for o in ob]):.3f} ms (ratio {med([o[1] for o in ov]) / med([o[1] for o in ob]):.3f})")
    print(f"CPU per streamed token: new {1e6 * gt / hz / gtok:.1f} us, baseline {1e6 * bt / hz / btok:.1f} us "
          f"(ratio {(gt / gtok) / (bt / btok):.3f})")
PY
