"""The layers of ../shared/docs/architecture.md, enforced on the include graph of src/.

Every `#include "dir/..."` in src/ must point at the file's own layer or at one src/layers.txt
lets it depend on (downward). A new upward or sideways include fails this test with the file, the
line and the rule it breaks. Run directly: python3 tests/unit/include_graph_test.py [SRC_DIR].
"""
import os
import re
import sys
import tempfile
import unittest

from layer_table import SRC, closure, layer_of, read_layers

ALLOWED = read_layers()
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]+)"')
SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cuh", ".inc")


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


# The service layer's window on the engine: the only engine headers server/ may include, and what
# they may reach, transitively (plain value types; never the model, runtime, scheduler or KV code).
ENGINE_API_HEADERS = {"engine/engine.h"}
ENGINE_API_REACH = {"common", "core"}
ENGINE_API_INTERNAL_OK = {"engine/engine.h", "engine/executor_decorator.h"}


def includes_of(src_dir, rel):
    """The src/-relative headers `rel` includes with quotes (those that exist under src_dir)."""
    out = []
    with open(os.path.join(src_dir, rel), encoding="utf-8", errors="replace") as f:
        for line in f:
            m = INCLUDE.match(line)
            if m and os.path.exists(os.path.join(src_dir, m.group(1), m.group(2))):
                out.append(m.group(1) + "/" + m.group(2))
    return out


def engine_api_violations(src_dir):
    out = []
    server = os.path.join(src_dir, "server")
    for root, _, files in os.walk(server):
        for name in sorted(files):
            rel = os.path.relpath(os.path.join(root, name), src_dir).replace(os.sep, "/")
            for inc in includes_of(src_dir, rel):
                if inc.startswith("engine/") and inc not in ENGINE_API_HEADERS:
                    out.append(f"{rel} includes {inc}: server/ sees the engine through {sorted(ENGINE_API_HEADERS)} only")
    seen, todo = set(), sorted(h for h in ENGINE_API_HEADERS if os.path.exists(os.path.join(src_dir, h)))
    while todo:
        header = todo.pop()
        if header in seen:
            continue
        seen.add(header)
        for inc in includes_of(src_dir, header):
            layer = layer_of(inc)
            if layer not in ENGINE_API_REACH and inc not in ENGINE_API_INTERNAL_OK:
                out.append(f"{header} includes {inc}: the engine's API may reach {sorted(ENGINE_API_REACH)} only")
            else:
                todo.append(inc)
    return out


class IncludeGraphTest(unittest.TestCase):
    def test_src_includes_only_downward(self):
        found = violations(SRC)
        self.assertEqual(found, [], "layer violations:\n" + "\n".join(found))

    def test_gateway_reaches_no_engine_layer(self):
        # Everything the gateway may include, transitively: no engine, model, kernel or server code.
        reach = closure(ALLOWED, "gateway")
        engine_side = {"core", "quant", "loader", "backend/reference", "backend/cpu", "backend/cuda", "ops",
                       "tokenizer", "template", "model", "kv", "sched", "runtime", "engine", "api", "server"}
        self.assertEqual(reach & engine_side, set())

    def test_server_sees_the_engine_through_its_api(self):
        found = engine_api_violations(SRC)
        self.assertEqual(found, [], "engine API violations:\n" + "\n".join(found))

    def test_an_engine_internal_in_the_api_fails(self):
        with tempfile.TemporaryDirectory() as d:
            for folder in ("engine", "core", "model", "server"):
                os.makedirs(os.path.join(d, folder))
            with open(os.path.join(d, "core", "request.h"), "w") as f:
                f.write("#pragma once\n")
            with open(os.path.join(d, "model", "model_config.h"), "w") as f:
                f.write("#pragma once\n")
            with open(os.path.join(d, "engine", "engine_config.h"), "w") as f:
                f.write('#include "model/model_config.h"\n')
            with open(os.path.join(d, "engine", "engine.h"), "w") as f:
                f.write('#include "core/request.h"\n#include "engine/engine_config.h"\n')
            with open(os.path.join(d, "server", "api.cc"), "w") as f:
                f.write('#include "engine/engine.h"\n#include "engine/engine_config.h"\n')
            found = engine_api_violations(d)
            self.assertEqual(len(found), 2, found)
            self.assertIn("server/api.cc includes engine/engine_config.h", found[0])
            self.assertIn("engine/engine.h includes engine/engine_config.h", found[1])

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
