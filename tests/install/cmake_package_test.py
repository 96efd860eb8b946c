"""The CMake package of the library (CTest label `install`): `cmake --install` of this build into a
temporary prefix, then a separate project (tests/install/consumer) configured with
find_package(Pagoda) against that prefix alone, built, and run on a tiny model: its greedy tokens
equal `pagoda generate`'s. Also: the installed tree is relocatable (the prefix is moved before
the consumer is configured) and holds no path of the source or build tree."""
import os
import pathlib
import shutil
import subprocess

import pytest

HERE = pathlib.Path(__file__).resolve().parent
BINARY = pathlib.Path(os.environ.get("PAGODA_BINARY", ""))
BUILD = BINARY.parent
ROOT = HERE.parents[1]
MODEL = pathlib.Path(os.environ.get("PAGODA_MODELS_DIR", ROOT / "models")) / "tiny" / "llama3" / "model-f32.gguf"


def run(cmd, **kw):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{cmd}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r.stdout


def test_find_package_from_an_install_prefix(tmp_path):
    assert BINARY.is_file(), f"PAGODA_BINARY={BINARY}"
    first = tmp_path / "first"
    run(["cmake", "--install", BUILD, "--prefix", first])
    # Relocatable: the tree works from wherever it is moved.
    prefix = tmp_path / "moved-prefix"
    shutil.move(first, prefix)
    cfg = prefix / "lib" / "cmake" / "Pagoda"
    assert (cfg / "PagodaConfig.cmake").is_file() and (cfg / "PagodaTargets.cmake").is_file()
    # One archive per layer of src/layers.txt (Pagoda::pagoda links them all).
    for layer in ("common", "core", "engine", "offline", "server", "backend_cpu", "backend_cuda"):
        assert (prefix / "lib" / f"libpagoda_{layer}.a").is_file(), layer
    assert not (prefix / "lib" / "libpagoda_gateway.a").exists()  # the gateway is not part of the library
    assert (prefix / "include" / "pagoda" / "offline" / "llm.h").is_file()
    assert (prefix / "include" / "pagoda" / "engine" / "engine.h").is_file()
    assert (prefix / "bin" / "pagoda").is_file()
    assert not (prefix / "pagoda").exists()  # the Python module is the python component's alone
    for f in cfg.glob("*.cmake"):
        text = f.read_text()
        assert str(ROOT) not in text and str(BUILD) not in text and str(first) not in text, f
    out = tmp_path / "consumer-build"
    run(["cmake", "-S", HERE / "consumer", "-B", out, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
         f"-DCMAKE_PREFIX_PATH={prefix}"])
    run(["cmake", "--build", out], timeout=900)
    ids = run([out / "pagoda_consumer", MODEL, "Once upon a time", 12], timeout=120).split()
    expected = run([prefix / "bin" / "pagoda", "generate", MODEL, "-p", "Once upon a time", "-n", 12,
                    "--temperature", 0, "--ids", "--ignore-eos", "--log-level", "warn"], timeout=120).split()
    assert len(ids) == 12 and ids == expected


def test_find_package_without_the_prefix_fails_clearly(tmp_path):
    r = subprocess.run(["cmake", "-S", HERE / "consumer", "-B", tmp_path / "b", "-G", "Ninja",
                        f"-DCMAKE_PREFIX_PATH={tmp_path / 'nothing'}"], capture_output=True, text=True)
    assert r.returncode != 0 and "PagodaConfig.cmake" in r.stderr
