"""Weight offload in `pagoda memplan` (issue 32): for a model and a GPU budget it says what must
stream from host memory and the throughput to expect. Config-only plans of Llama-3-8B and -70B,
through the real binary:
  - 8B bf16 in a 10 GB budget does not fit resident (--cpu-offload-gb 0), fits with auto offload,
    and the plan's device total stays inside the budget; the layers streamed are the fewest that fit;
  - the predicted forward passes per second follow --h2d-gb-s;
  - an explicit --cpu-offload-gb streams at least that much; a bad value is refused."""
import json
import pathlib
import subprocess

from conftest import BINARY

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "testdata" / "configs"
L8B = CONFIGS / "llama-3-8b.json"
L70B = CONFIGS / "llama-3-70b.json"


def memplan(*args):
    p = subprocess.run([BINARY, "memplan", *map(str, args), "--json"], capture_output=True, text=True, timeout=60)
    return p.returncode, (json.loads(p.stdout) if p.stdout.strip().startswith("{") else None), p.stderr


def test_8b_in_10gb_needs_offload_and_auto_finds_the_fewest_layers():
    base = [L8B, "--memory", "10GB", "--memory-utilization", "1.0", "--max-model-len", "4096", "--max-num-seqs", "64"]
    rc, j, err = memplan(*base, "--cpu-offload-gb", "0")
    assert rc == 3 and not j["fits"], (rc, j, err)
    assert "--cpu-offload-gb" in j["error"]
    rc, j, err = memplan(*base)
    assert rc == 0 and j["fits"], (rc, j, err)
    plan = j["plan"]
    assert plan["offloaded_weights"] > 0
    assert plan["total"] <= plan["budget"] <= 10e9
    streamed = int(plan["offload"].split(" of ")[0])
    assert 0 < streamed < 32, plan["offload"]
    # One layer fewer would not fit: an explicit size of (streamed - 1) layers is refused.
    layer_gb = plan["offloaded_weights"] / streamed / 2**30
    rc, j2, _ = memplan(*base, "--cpu-offload-gb", f"{layer_gb * (streamed - 1) * 0.999:.4f}")
    assert rc == 3 and not j2["fits"], j2


def test_the_prediction_follows_the_host_bandwidth_and_an_explicit_size_is_kept():
    args = [L70B, "--memory", "48GB", "--weight-dtype", "q8_0", "--max-model-len", "4096"]
    rc, a, _ = memplan(*args, "--h2d-gb-s", "25")
    rc2, b, _ = memplan(*args, "--h2d-gb-s", "50")
    assert rc == rc2 == 0

    def passes(j):
        return float(j["plan"]["offload"].split("at most ")[1].split(" forward")[0])

    assert abs(passes(b) / passes(a) - 2.0) < 0.02, (a["plan"]["offload"], b["plan"]["offload"])
    assert abs(passes(a) - 25e9 / a["plan"]["offloaded_weights"]) < 0.01
    rc, j, _ = memplan(L8B, "--memory", "80GB", "--cpu-offload-gb", "4")
    assert rc == 0 and j["plan"]["offloaded_weights"] >= 4 * 2**30


def test_a_bad_offload_value_is_refused():
    p = subprocess.run([BINARY, "memplan", L8B, "--cpu-offload-gb", "lots"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--cpu-offload-gb" in p.stderr, p.stderr
