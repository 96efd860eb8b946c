#!/usr/bin/env bash
# Gateway overhead: `pagoda bench serve` straight to one worker and through `pagoda-gateway` in
# front of it, alternated ROUNDS times (the medians are reported), plus the gateway's own CPU time
# per streamed token (from /proc, independent of other load on the machine).
# Usage: scripts/bench_gateway.sh [MODEL.gguf] [ROUNDS]   (build/ must hold pagoda and pagoda-gateway)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-../shared/models/stories260K/stories260K.gguf}
rounds=${2:-4}
conc=${CONCURRENCY:-64}
n=${NUM_PROMPTS:-256}
wport=$((20000 + RANDOM % 10000)); gport=$((wport + 1))
out=$(mktemp -d)
build/pagoda serve --model "$model" --port "$wport" --max-model-len 512 --no-access-log >"$out/worker.log" 2>&1 &
wpid=$!
build/pagoda-gateway --port "$gport" --worker "http://127.0.0.1:$wport" --threads "${GATEWAY_THREADS:-1}" \
  --log-level warn >"$out/gateway.log" 2>&1 &
gpid=$!
trap 'kill $gpid $wpid 2>/dev/null || true; rm -rf "$out"' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$gport/health" >/dev/null && break; sleep 0.1; done
name=$(curl -s "http://127.0.0.1:$wport/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
vocab=$(curl -s "http://127.0.0.1:$wport/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["vocab_size"])')
bench=(build/pagoda bench serve --model "$name" --vocab-size "$vocab" --num-prompts "$n" --max-concurrency "$conc"
       --input-len 64 --output-len 64 --seed 1 --json --log-level warn)
cpu() { awk '{print $14 + $15}' "/proc/$gpid/stat"; }
gw_ticks=0
for r in $(seq "$rounds"); do
  "${bench[@]}" --url "http://127.0.0.1:$wport" >"$out/direct-$r.json"
  t0=$(cpu)
  "${bench[@]}" --url "http://127.0.0.1:$gport" >"$out/gateway-$r.json"
  gw_ticks=$((gw_ticks + $(cpu) - t0))
done
python3 - "$out" "$rounds" "$gw_ticks" "$(getconf CLK_TCK)" <<'PY'
import json, statistics, sys
out, rounds, ticks, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
d = [json.load(open(f"{out}/direct-{r}.json")) for r in range(1, rounds + 1)]
g = [json.load(open(f"{out}/gateway-{r}.json")) for r in range(1, rounds + 1)]
med = lambda xs, k: statistics.median(x[k] for x in xs)
tokens = sum(x["total_output_tokens"] for x in g)
print(f"rounds {rounds}, {d[0]['num_prompts']} prompts x {d[0]['output_len']} tokens, concurrency {d[0]['max_concurrency']}")
for r in range(rounds):
    print(f"  round {r+1}: direct ttft p50 {d[r]['median_ttft_ms']:.2f} ms, {d[r]['output_throughput']:.0f} tok/s | "
          f"gateway ttft p50 {g[r]['median_ttft_ms']:.2f} ms, {g[r]['output_throughput']:.0f} tok/s")
print(f"median p50 TTFT: direct {med(d, 'median_ttft_ms'):.2f} ms, gateway {med(g, 'median_ttft_ms'):.2f} ms, "
      f"added {med(g, 'median_ttft_ms') - med(d, 'median_ttft_ms'):.2f} ms")
print(f"median throughput: direct {med(d, 'output_throughput'):.0f} tok/s, gateway {med(g, 'output_throughput'):.0f} tok/s, "
      f"ratio {med(g, 'output_throughput') / med(d, 'output_throughput'):.3f}")
print(f"gateway CPU: {ticks / hz:.2f} s for {tokens} streamed tokens = {1e6 * ticks / hz / tokens:.1f} us/token")
PY
