"""The CPU + GPU layer split's flag through the real binary (issue 32; docs/decisions.md D76):
  - `pagoda memplan --n-gpu-layers 16` (and llama.cpp's spelling `-ngl 16`) on Llama-3-8B's
    config: the device holds half the layers' weights and K/V, the CPU part's K/V is a host term,
    the printout names the split;
  - the split with --cpu-offload-gb is refused, and so are GPU layers without --device cuda
    (generate on the CPU with -ngl 1), with a message naming the flag; -ngl 0 on the CPU runs.
The split's numerics are tests/model/layer_split_test.cc (CPU parts) and
tests/gpu/cuda_layer_split_test.cc (a CUDA first part)."""
import json
import pathlib
import subprocess

from conftest import BINARY, TINY_MODEL

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "testdata" / "configs"
L8B = CONFIGS / "llama-3-8b.json"


def memplan(*args):
    p = subprocess.run([BINARY, "memplan", *map(str, args)], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def test_memplan_counts_the_device_layers_only():
    base = [L8B, "--memory", "80GB", "--max-model-len", "4096", "--json"]
    rc, out, err = memplan(*base)
    assert rc == 0, err
    full = json.loads(out)["plan"]
    rc, out, err = memplan(*base, "--n-gpu-layers", "16")
    assert rc == 0, err
    split = json.loads(out)["plan"]
    assert split["split_device_layers"] == 16 and split["num_layers"] == 32
    # 16 of 32 layers' linears and the output head leave the device; the embedding stays.
    assert 0.35 * full["weights"] < split["weights"] < 0.6 * full["weights"], (split["weights"], full["weights"])
    assert split["kv_bytes_per_token"] * 2 == full["kv_bytes_per_token"]
    assert split["host_kv_cache"] >= (split["num_blocks"] + 1) * split["block_bytes"]
    assert split["total"] <= split["budget"]
    # llama.cpp's spelling gives the same plan.
    rc, out2, err = memplan(*base, "-ngl", "16")
    assert rc == 0 and json.loads(out2)["plan"] == split, err
    rc, text, err = memplan(L8B, "--memory", "80GB", "--max-model-len", "4096", "-ngl", "16")
    assert rc == 0 and "layer split: layers [0, 16)" in text and "[16, 32)" in text, text
    # Every layer on the device is no split.
    rc, out, err = memplan(*base, "--n-gpu-layers", "32")
    assert rc == 0 and json.loads(out)["plan"]["split_device_layers"] == 0, err


def test_conflicting_or_misplaced_splits_are_refused():
    rc, _, err = memplan(L8B, "--memory", "80GB", "--n-gpu-layers", "16", "--cpu-offload-gb", "4")
    assert rc == 2 and "--cpu-offload-gb" in err, err
    p = subprocess.run([BINARY, "generate", "-m", str(TINY_MODEL), "-p", "Once", "-n", "2", "--device", "cpu", "-ngl", "1"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "--n-gpu-layers" in p.stderr and "--device cuda" in p.stderr, p.stderr
    p = subprocess.run([BINARY, "generate", "-m", str(TINY_MODEL), "-p", "Once", "-n", "2", "--device", "cpu", "-ngl", "0",
                        "--temperature", "0"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip(), p.stdout
