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
#   the gateway's added TTFT without queueing in the worker; 0 skips it).
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
trap 'kill $gpid $wpid 2>/dev/null || true; rm -rf "$out"' EXIT
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$gport/health" >/dev/null && break; sleep 0.1; done
name=$(curl -s "http://127.0.0.1:$wport/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
vocab=$(curl -s "http://127.0.0.1:$wport/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["vocab_size"])')
bench=(taskset -c "$ccpus" "$bin/pagoda" bench serve --model "$name" --vocab-size "$vocab" --seed 1 --json --log-level warn)
shape=(--max-concurrency "$conc" --input-len "${INPUT_LEN:-64}" --output-len "${OUTPUT_LEN:-64}")
load_args=(--num-prompts "$n" "${shape[@]}")
lat_args=(--max-concurrency 1 --input-len "${INPUT_LEN:-64}" --output-len 4)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "worker on CPUs $wcpus, gateway on $gcpus, client on $ccpus; model $model"
for port in $wport $gport; do  # warm-up of both paths
  "${bench[@]}" --url "http://127.0.0.1:$port" --num-prompts "$conc" "${shape[@]}" >/dev/null
  "${bench[@]}" --url "http://127.0.0.1:$port" "${lat_args[@]}" --num-prompts 8 >/dev/null
done
gw_ticks=0; w_ticks=0; gw_tokens=0
run_pair() {  # $1 = round, $2 = first target (direct|gateway)
  local order=(direct gateway); [ "$2" = gateway ] && order=(gateway direct)
  for t in "${order[@]}"; do
    local port=$wport; [ "$t" = gateway ] && port=$gport
    local g0 w0; g0=$(ticks $gpid); w0=$(ticks $wpid)
    [ "$t" = gateway ] && curl -s "http://127.0.0.1:$gport/metrics" >"$out/metrics-before-$1.txt"
    "${bench[@]}" --url "http://127.0.0.1:$port" "${load_args[@]}" >"$out/$t-$1.json"
    [ "$t" = gateway ] && curl -s "http://127.0.0.1:$gport/metrics" >"$out/metrics-after-$1.txt"
    if [ "$t" = gateway ]; then
      gw_ticks=$((gw_ticks + $(ticks $gpid) - g0))
      gw_tokens=$((gw_tokens + $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["total_output_tokens"])' "$out/$t-$1.json")))
    fi
    w_ticks=$((w_ticks + $(ticks $wpid) - w0))
    if [ "$lat_n" -gt 0 ]; then "${bench[@]}" --url "http://127.0.0.1:$port" "${lat_args[@]}" --num-prompts "$lat_n" >"$out/lat-$t-$1.json"; fi
  done
}
for r in $(seq "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then run_pair "$r" direct; else run_pair "$r" gateway; fi
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" "$rounds" "$gw_ticks" "$w_ticks" "$gw_tokens" "$(getconf CLK_TCK)" "$lat_n" <<'PY'
import json, statistics, sys
out, rounds, gt, wt, gtok, hz, lat_n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
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
def overhead(r):
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
    (b0, t0), (b1, t1) = read(f"{out}/metrics-before-{r}.txt"), read(f"{out}/metrics-after-{r}.txt")
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
      f"worker {1e6 * wt / hz / (2 * gtok):.1f} us")
PY
