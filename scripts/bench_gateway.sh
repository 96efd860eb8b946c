#!/usr/bin/env bash
# Gateway overhead: `pagoda bench serve` straight to one worker and through `pagoda-gateway` in
# front of it, in ROUNDS rounds. Each round has
#   - sequential runs at CONCURRENCY streams, one per target (direct, gateway[, baseline]), in an
#     order rotated from round to round (a drift of the machine's load hits all alike): the
#     throughput ratio (paired per round) and the CPU time per streamed token of the gateway and of
#     the worker (from /proc: other load does not change it); their p50 TTFTs are reported too, but
#     a difference of two runs' p50 TTFT is the worker's queueing noise, not the gateway;
#   - paired runs for TTFT (`pagoda bench serve --compare-url`): every prompt goes once direct and
#     once through the gateway, as adjacent requests in a random order, in one client against the
#     one worker, so both arms see the same queue: at PAIRED_CONCURRENCY streams in all (default
#     2 x CONCURRENCY: CONCURRENCY streams through the gateway), and at concurrency 1 (no queueing,
#     LATENCY_PROMPTS pairs of 4 tokens). The pairs of all rounds are pooled: the difference of the
#     arms' median TTFTs ("p50 TTFT added") with a bootstrap 95 % interval over pairs, and the
#     median of the per-pair differences with its distribution-free 95 % interval.
# Usage: scripts/bench_gateway.sh [MODEL] [ROUNDS]   (PAGODA_BIN_DIR, default build/, holds pagoda and
#   pagoda-gateway; MODEL: a GGUF file or a model directory)
# Environment: CONCURRENCY (64), NUM_PROMPTS (256, per sequential run), INPUT_LEN (64), OUTPUT_LEN (64),
#   PAIRED_PROMPTS (256 pairs per round; 0 skips), PAIRED_CONCURRENCY (2 x CONCURRENCY),
#   PAIRED_JITTER_MS (20: every request of the paired runs under load waits U(0, 20 ms) before it is
#   sent, so a pair's two requests reach the worker's queue in a random order, not the direct one first),
#   LATENCY_PROMPTS (64 pairs per round at concurrency 1; 0 skips),
#   WORKER_CPUS (taskset list for the worker, default 0), GATEWAY_CPUS (default 1),
#   CLIENT_CPUS (the bench client, default 1), THREADS (worker compute threads, 1),
#   GATEWAY_THREADS (1), WORKER_ARGS (more `pagoda serve` flags, e.g. --device cuda or --tokenizer F),
#   VOCAB (token id range of the random prompts; default the worker's vocab_size),
#   BASELINE_GATEWAY (another pagoda-gateway binary, e.g. the previous commit's: a third arm on its
#   own port and the gateway's CPUs, in the same rounds, reported as new / baseline ratios).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-../shared/models/stories260K/stories260K.gguf}
rounds=${2:-4}
conc=${CONCURRENCY:-64}
n=${NUM_PROMPTS:-256}
lat_n=${LATENCY_PROMPTS:-64}
paired_n=${PAIRED_PROMPTS:-256}
paired_conc=${PAIRED_CONCURRENCY:-$((2 * conc))}
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
vocab=${VOCAB:-$(curl -s "http://127.0.0.1:$wport/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["vocab_size"])')}
client=(taskset -c "$ccpus" "$bin/pagoda" bench serve --model "$name" --vocab-size "$vocab" --json --log-level warn)
bench=("${client[@]}" --seed 1)
shape=(--max-concurrency "$conc" --input-len "${INPUT_LEN:-64}" --output-len "${OUTPUT_LEN:-64}")
load_args=(--num-prompts "$n" "${shape[@]}")
lat_args=(--max-concurrency 1 --input-len "${INPUT_LEN:-64}" --output-len 4)
paired_args=(--num-prompts "$paired_n" --max-concurrency "$paired_conc" --input-len "${INPUT_LEN:-64}" --output-len "${OUTPUT_LEN:-64}"
             --jitter-ms "${PAIRED_JITTER_MS:-20}")
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }  # clock ticks of a process, exited threads included
# Nanoseconds on a CPU of a process's live threads (schedstat: exact, where ticks are 10 ms samples;
# the gateway's threads live as long as it does).
cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{s += $1} END {printf "%d\n", s}'; }
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "worker on CPUs $wcpus, gateway on $gcpus, client on $ccpus; model $model"
for port in $wport $gport ${bport:-}; do  # warm-up of every path
  "${bench[@]}" --url "http://127.0.0.1:$port" --num-prompts "$conc" "${shape[@]}" >/dev/null
  "${bench[@]}" --url "http://127.0.0.1:$port" "${lat_args[@]}" --num-prompts 8 >/dev/null
done
if [ "$paired_n" -gt 0 ]; then  # the worker's batch sizes of the paired runs (CUDA graphs are captured at first use)
  "${bench[@]}" --url "http://127.0.0.1:$wport" --compare-url "http://127.0.0.1:$gport" --num-prompts "$conc" \
    --max-concurrency "$paired_conc" --input-len "${INPUT_LEN:-64}" --output-len 8 >/dev/null
fi
gw_ns=0; w_ticks=0; gw_tokens=0; b_ns=0; b_tokens=0; gw_wall_ns=0
tokens_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["total_output_tokens"])' "$1"; }
run_round() {  # $1 = round: the targets in an order rotated by the round (each goes first in turn)
  local n=${#targets[@]} k t port
  for ((k = 0; k < n; k++)); do
    t=${targets[$(((k + $1 - 1) % n))]}
    port=$wport; [ "$t" = gateway ] && port=$gport; [ "$t" = baseline ] && port=$bport
    local g0 w0 b0 t0; t0=$(date +%s%N); g0=$(cpu_ns $gpid); w0=$(ticks $wpid); b0=0; [ -n "$bpid" ] && b0=$(cpu_ns $bpid)
    [ "$t" != direct ] && curl -s "http://127.0.0.1:$port/metrics" >"$out/metrics-before-$t-$1.txt"
    "${bench[@]}" --url "http://127.0.0.1:$port" "${load_args[@]}" >"$out/$t-$1.json"
    [ "$t" != direct ] && curl -s "http://127.0.0.1:$port/metrics" >"$out/metrics-after-$t-$1.txt"
    if [ "$t" = gateway ]; then
      gw_ns=$((gw_ns + $(cpu_ns $gpid) - g0))
      gw_wall_ns=$((gw_wall_ns + $(date +%s%N) - t0))
      gw_tokens=$((gw_tokens + $(tokens_of "$out/$t-$1.json")))
    elif [ "$t" = baseline ]; then
      b_ns=$((b_ns + $(cpu_ns $bpid) - b0))
      b_tokens=$((b_tokens + $(tokens_of "$out/$t-$1.json")))
    fi
    w_ticks=$((w_ticks + $(ticks $wpid) - w0))
  done
  for ((k = 0; k < n; k++)); do  # paired runs: direct against each other target
    t=${targets[$(((k + $1 - 1) % n))]}
    [ "$t" = direct ] && continue
    port=$gport; [ "$t" = baseline ] && port=$bport
    if [ "$paired_n" -gt 0 ]; then
      "${client[@]}" --seed "$1" --url "http://127.0.0.1:$wport" --compare-url "http://127.0.0.1:$port" "${paired_args[@]}" >"$out/paired-$t-$1.json"
    fi
    if [ "$lat_n" -gt 0 ]; then
      "${client[@]}" --seed "$1" --url "http://127.0.0.1:$wport" --compare-url "http://127.0.0.1:$port" "${lat_args[@]}" \
        --num-prompts "$lat_n" >"$out/lat-$t-$1.json"
    fi
  done
}
for r in $(seq "$rounds"); do run_round "$r"; done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" "$rounds" "$gw_ns" "$w_ticks" "$gw_tokens" "$(getconf CLK_TCK)" "$lat_n" "$b_ns" "$b_tokens" "$paired_n" "$paired_conc" "$gw_wall_ns" "${GATEWAY_THREADS:-1}" <<'PY'
import json, math, os, random, statistics, sys
out, rounds, gt, wt, gtok, hz, lat_n, bt, btok, paired_n, paired_conc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8]), int(sys.argv[9]), int(sys.argv[10]), int(sys.argv[11])
gw_wall, gw_threads = int(sys.argv[12]), int(sys.argv[13])
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
print(f"p50 TTFT ms of the sequential runs (the worker's queueing; see the paired runs below), median (min..max): "
      f"direct {spread(dt)}, gateway {spread(gtt)}; gateway-direct per round {spread([b - a for a, b in zip(dt, gtt)])}")
print(f"throughput tok/s: direct {spread(dth)}, gateway {spread(gth)}; "
      f"paired ratio gateway/direct {med([b / a for a, b in zip(dth, gth)]):.3f} "
      f"({min(b / a for a, b in zip(dth, gth)):.3f}..{max(b / a for a, b in zip(dth, gth)):.3f})")
def ratio_ci(xs):
    """Mean of log ratios with a t 95 % interval (rounds as samples), as ratios."""
    ls = [math.log(x) for x in xs]
    m = statistics.mean(ls)
    if len(ls) < 2:
        return math.exp(m), float("nan"), float("nan")
    t = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 11: 2.20, 12: 2.18, 13: 2.16, 14: 2.14, 15: 2.13}.get(len(ls) - 1, 2.0)
    h = t * statistics.stdev(ls) / math.sqrt(len(ls))
    return math.exp(m), math.exp(m - h), math.exp(m + h)
m, lo, hi = ratio_ci([b / a for a, b in zip(dth, gth)])
print(f"  throughput gateway/direct, geometric mean over rounds {m:.3f} (95 % CI {lo:.3f}..{hi:.3f})")

def pooled(kind, t):
    """The pairs of every round (direct ms, other ms): the difference of medians with a bootstrap
    interval over pairs, the median paired difference with its order-statistic interval, and the
    per-round differences of medians."""
    pairs, per_round = [], []
    for r in range(1, rounds + 1):
        c = json.load(open(f"{out}/{kind}-{t}-{r}.json"))["compare"]
        pairs += c["pair_ttft_ms"]
        per_round.append(c["ttft"]["median_ttft_delta_ms"])
    n = len(pairs)
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    delta = med(b) - med(a)
    rng = random.Random(1)
    boots = []
    for _ in range(2000):
        idx = [rng.randrange(n) for _ in range(n)]
        boots.append(med([b[i] for i in idx]) - med([a[i] for i in idx]))
    boots.sort()
    d = sorted(y - x for x, y in pairs)
    h = 0.98 * math.sqrt(n)
    lo_i, hi_i = max(0, int(math.floor(n / 2 - h)) - 1), min(n - 1, int(math.ceil(n / 2 + h)) - 1)  # 1-based ranks, less 1
    return (f"{n} pairs: p50 TTFT direct {med(a):.2f} ms, through {t} {med(b):.2f} ms; added {delta:+.3f} ms "
            f"(95 % CI {boots[50]:+.3f}..{boots[1949]:+.3f}); median paired difference {med(d):+.3f} ms "
            f"(95 % CI {d[lo_i]:+.3f}..{d[hi_i]:+.3f}); per round {spread(per_round)}"), \
        ((med(d), d[lo_i], d[hi_i]), (delta, boots[50], boots[1949]))
verdicts = []
if paired_n:
    txt, ci = pooled("paired", "gateway")
    print(f"paired TTFT at {paired_conc} streams in all ({paired_conc // 2} through the gateway), {paired_n} pairs x {rounds} rounds: {txt}")
    verdicts.append((f"at {paired_conc // 2} streams through the gateway, median paired difference", ci[0]))
    verdicts.append(("  (the arms' p50 difference in the shared queue, which adds the admission-order penalty of "
                     "a request that always reaches the worker after its direct twin: docs/decisions.md D66)", ci[1]))
if lat_n:
    txt, ci = pooled("lat", "gateway")
    print(f"paired TTFT at concurrency 1 ({lat_n} pairs x {rounds} rounds, 4 tokens): {txt}")
    verdicts.append(("at concurrency 1, median paired difference", ci[0]))
for name, (x, lo, hi) in verdicts:
    state = "met (the interval's top <= 1 ms)" if hi <= 1.0 else ("not met (the interval's bottom > 1 ms)" if lo > 1.0 else "not resolved (the interval contains 1 ms)")
    print(f"  target p50 TTFT added <= 1 ms, {name}: {x:+.3f} ms, {state}")
m, lo, hi = ratio_ci([b / a for a, b in zip(dth, gth)])
state = "met" if lo >= 0.97 else ("not met" if hi < 0.97 else "not resolved (the interval contains 0.97)")
print(f"  target throughput >= 0.97 of direct: {m:.3f} (95 % CI {lo:.3f}..{hi:.3f}), {state}")
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
print(f"the gateway ({gw_threads} I/O threads) was busy {gt / max(gw_wall, 1):.2f} cores on average during its sequential runs")
print(f"CPU per streamed token: gateway {1e-3 * gt / gtok:.2f} us ({1e-9 * gt:.2f} s for {gtok} tokens), "
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
    if paired_n:
        print(f"baseline, paired TTFT at {paired_conc} streams in all: {pooled('paired', 'baseline')[0]}")
    if lat_n:
        print(f"baseline, paired TTFT at concurrency 1: {pooled('lat', 'baseline')[0]}")
    ob = [overhead(r, "baseline") for r in range(1, rounds + 1)]
    if all(ob) and all(ov):
        print(f"the gateway's own part of TTFT, p50 median over rounds: new {med([o[1] for o in ov]):.3f} ms, "
              f"baseline {med([o[1] for o in ob]):.3f} ms (ratio {med([o[1] for o in ov]) / med([o[1] for o in ob]):.3f})")
    print(f"CPU per streamed token: new {1e-3 * gt / gtok:.2f} us, baseline {1e-3 * bt / btok:.2f} us "
          f"(ratio {(gt / gtok) / (bt / btok):.3f})")
PY
