"""The layers of ../shared/docs/architecture.md, enforced on the include graph of src/.

Every `#include "dir/..."` in src/ must point at the file's own layer or at one the table below
lets it depend on (downward). A new upward or sideways include fails this test with the file, the
line and the rule it breaks. Run directly: python3 tests/unit/include_graph_test.py [SRC_DIR].
"""
import os
import re
import sys
import tempfile
import unittest

# layer -> the layers it may include (besides itself). Bottom first.
ALLOWED = {
    "common": set(),
    "core": {"common"},
    "quant": {"common"},
    "loader": {"common"},
    "backend/reference": {"common", "quant"},
    "backend/cpu": {"common", "quant"},
    "ops": {"common", "quant", "backend/cpu", "backend/reference"},
    "tokenizer": {"common", "loader"},
    "template": {"common", "loader"},
    # Constrained decoding; implements core/token_constraint.h.
    "grammar": {"common", "core"},
    "model": {"common", "quant", "loader", "ops"},
    "kv": {"common", "core"},
    "sched": {"common", "core", "kv"},
    "runtime": {"common", "core", "quant", "ops", "model"},
    # The CUDA executor implements runtime's executor interface (runtime/cuda_executor.h).
    "backend/cuda": {"common", "core", "quant", "ops", "model", "runtime"},
    "engine": {"common", "core", "quant", "loader", "model", "runtime", "kv", "sched", "tokenizer", "template", "grammar"},
    "api": {"common", "core"},
    "server": {"common", "core", "api", "engine", "tokenizer", "template", "grammar"},
    # Offline generation (vLLM's LLM class in C++; the Python package binds it).
    "offline": {"common", "core", "engine", "model"},
    # The gateway (docs/gateway.md) speaks HTTP to workers and links no engine code (pagoda_gateway
    # links pagoda_common only; `pagoda-gateway` is built from it alone).
    "gateway": {"common"},
    "cli": None,  # the front end: anything
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]+)"')
SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cuh", ".inc")


def layer_of(rel_path):
    """'backend/cpu/x.h' -> 'backend/cpu'; 'model/families/llama.cc' -> 'model'."""
    parts = rel_path.split("/")
    if parts[0] == "backend" and len(parts) > 2:
        return "backend/" + parts[1]
    return parts[0]


def violations(src_dir):
    out = []
    for root, _, files in os.walk(src_dir):
        for name in sorted(files):
            if not name.endswith(SOURCE_SUFFIXES):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src_dir).replace(os.sep, "/")
            layer = layer_of(rel)
            if layer not in ALLOWED:
                out.append(f"{rel}: folder '{layer}' is in no layer (add it to ALLOWED)")
                continue
            allowed = ALLOWED[layer]
            with open(path, encoding="utf-8", errors="replace") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = layer_of(m.group(1) + "/" + m.group(2))
                    if target not in ALLOWED:
                        continue  # not a src/ folder (generated proto headers, system-style paths)
                    if allowed is None or target == layer or target in allowed:
                        continue
                    out.append(f"{rel}:{lineno}: {layer} includes {m.group(1)}/{m.group(2)} ({target} is not below {layer})")
    return out


SRC = os.environ.get("PAGODA_SRC_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src"))


class IncludeGraphTest(unittest.TestCase):
    def test_src_includes_only_downward(self):
        found = violations(SRC)
        self.assertEqual(found, [], "layer violations:\n" + "\n".join(found))

    def test_gateway_reaches_no_engine_layer(self):
        # Everything the gateway may include, transitively: no engine, model, kernel or server code.
        reach, todo = set(), ["gateway"]
        while todo:
            for dep in ALLOWED[todo.pop()] or ():
                if dep not in reach:
                    reach.add(dep)
                    todo.append(dep)
        engine_side = {"core", "quant", "loader", "backend/reference", "backend/cpu", "backend/cuda", "ops",
                       "tokenizer", "template", "model", "kv", "sched", "runtime", "engine", "api", "server"}
        self.assertEqual(reach & engine_side, set())

    def test_an_upward_include_fails(self):
        # The checker itself: a kv/ header that includes the scheduler is caught, a downward one is not.
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "kv"))
            os.makedirs(os.path.join(d, "core"))
            with open(os.path.join(d, "kv", "pool.h"), "w") as f:
                f.write('#include "core/request.h"\n#include "sched/scheduler.h"\n')
            found = violations(d)
            self.assertEqual(len(found), 1, found)
            self.assertIn("kv/pool.h:2: kv includes sched/scheduler.h", found[0])


if __name__ == "__main__":
    if len(sys.argv) > 1:
        SRC = sys.argv.pop(1)
    unittest.main()
