"""The layers of src/layers.txt, enforced on the link graph: every symbol a layer's archive
(libpagoda_<layer>.a) uses and does not define itself must come from a layer it may depend on
(its line's layers and theirs) or from outside the project (the C++ runtime, fmt, ICU, ...). A call
into a layer above or beside it fails with the layer, the symbol and the layer that defines it.
Needs the build tree (PAGODA_BUILD_DIR, set by CTest). Run directly:
python3 tests/unit/link_graph_test.py BUILD_DIR
"""
import glob
import os
import subprocess
import sys
import tempfile
import unittest

from layer_table import closure, read_layers

TABLE = read_layers()
BUILD = os.environ.get("PAGODA_BUILD_DIR", "")
DEFINED_TYPES = set("ABCDGRSTVWiuvw")


def archive_symbols(path):
    """(defined, undefined) external symbol names of a static archive (mangled)."""
    out = subprocess.run(["nm", "-g", "--format=posix", path], check=True, capture_output=True, text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2 or parts[0].endswith(":") or parts[0].endswith("]"):
            continue  # "archive.a[member.o]:" headers
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(name)
        elif kind in DEFINED_TYPES:
            defined.add(name)
    return defined, undefined - defined


def layer_archives(build_dir):
    """{layer: archive path} for every layer of the table that has an archive in build_dir/src."""
    found = {}
    for layer in TABLE:
        path = os.path.join(build_dir, "src", "libpagoda_" + layer.replace("/", "_") + ".a")
        if os.path.exists(path):
            found[layer] = path
    return found


def demangle(names):
    if not names:
        return []
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def violations(archives, table=TABLE):
    """One line per (layer, symbol) where `layer` uses a symbol that only a layer it may not use defines."""
    symbols = {layer: archive_symbols(path) for layer, path in archives.items()}
    definers = {}
    for layer, (defined, _) in symbols.items():
        for name in defined:
            definers.setdefault(name, set()).add(layer)
    out = []
    for layer, (_, undefined) in sorted(symbols.items()):
        if table[layer] is None:
            continue
        allowed = closure(table, layer)
        bad = sorted((name, sorted(definers[name])) for name in undefined
                     if name in definers and not (definers[name] & allowed))
        for (name, by), pretty in zip(bad, demangle([n for n, _ in bad])):
            out.append(f"{layer} uses {pretty} (defined in {', '.join(by)}, not below {layer})")
    return out


class LinkGraphTest(unittest.TestCase):
    def setUp(self):
        if not (BUILD and layer_archives(BUILD)):
            self.skipTest("no build tree (PAGODA_BUILD_DIR) with the layer archives")

    def test_every_layer_has_an_archive(self):
        missing = [l for l in TABLE if TABLE[l] is not None and l not in layer_archives(BUILD)]
        self.assertEqual(missing, [], "layers of src/layers.txt without build/src/libpagoda_<layer>.a")

    def test_layers_link_only_downward(self):
        found = violations(layer_archives(BUILD))
        self.assertEqual(found, [], "link-graph violations:\n" + "\n".join(found))


class CheckerTest(unittest.TestCase):
    def test_an_upward_call_fails(self):
        # Two tiny archives: "low" calls a function that only "high" (above it) defines; "high"
        # calls one "low" defines (downward, allowed).
        table = {"low": set(), "high": {"low"}}
        with tempfile.TemporaryDirectory() as d:
            def archive(name, code):
                src, obj, lib = (os.path.join(d, name + ext) for ext in (".cc", ".o", ".a"))
                with open(src, "w") as f:
                    f.write(code)
                subprocess.run(["c++", "-c", src, "-o", obj], check=True)
                subprocess.run(["ar", "rcs", lib, obj], check=True)
                return lib
            low = archive("low", "int high_fn(); int low_fn() { return 1; } int low_user() { return high_fn(); }\n")
            high = archive("high", "int low_fn(); int high_fn() { return low_fn() + 1; }\n")
            found = violations({"low": low, "high": high}, table)
            self.assertEqual(found, ["low uses high_fn() (defined in high, not below low)"])


if __name__ == "__main__":
    if len(sys.argv) > 1:
        BUILD = sys.argv.pop(1)
    unittest.main()
