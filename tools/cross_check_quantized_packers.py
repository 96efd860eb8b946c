#!/usr/bin/env python3
"""Cross-checks tools/make_quantized_checkpoint.py against the formats' reference packers.

Runs GPTQModel's TorchQuantLinear.pack_original (+ its v2 -> v1 zero conversion), AutoAWQ's
WQLinear_GEMM.from_linear and compressed-tensors' PackedQuantizationCompressor.compress on the
weights our packer's codes stand for (W = s * (q - z), so every reference rounding is unambiguous),
and requires their qweight / qzeros / scales / weight_packed / weight_zero_point bytes to equal ours;
then runs each reference dequantizer on its own packing and requires our reference values (rounded
to fp16, which those dequantizers compute in).

Needs torch and the three packages, which the test venv does not carry (a throwaway venv:
`pip install compressed-tensors accelerate` then `pip install --no-deps gptqmodel autoawq` and the
few pure-Python imports GPTQModel asks for). Not part of the test suite; docs/quantization.md says
when it last passed. Usage: PYTHON tools/cross_check_quantized_packers.py
"""
import importlib.util
import os
import sys
import types

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("mqc", os.path.join(HERE, "make_quantized_checkpoint.py"))
mqc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mqc)

# AutoAWQ's package __init__ imports its whole model zoo (datasets, transformers' models): load only
# awq.modules / awq.utils by giving the package a path without running its __init__.
awq_root = os.path.join(os.path.dirname(torch.__file__), "..", "awq")
pkg = types.ModuleType("awq")
pkg.__path__ = [os.path.abspath(awq_root)]
sys.modules["awq"] = pkg


def same(name, ours, theirs):
    assert ours.flags["C_CONTIGUOUS"] or ours.ndim < 2, f"{name}: our array is not C-contiguous"
    a = np.ascontiguousarray(ours).view(np.uint8)
    b = np.ascontiguousarray(theirs).view(np.uint8)
    ok = a.shape == b.shape and np.array_equal(a, b)
    print(f"  {name}: {'equal' if ok else 'DIFFERENT'} ({ours.dtype} {list(ours.shape)} vs {theirs.dtype} {list(theirs.shape)})")
    return ok


def close(name, ours, theirs):
    """The reference dequantizers compute in fp16: theirs must be our exact f32 values rounded to fp16."""
    d = float(np.max(np.abs(ours.astype(np.float16).astype(np.float64) - theirs.astype(np.float64))))
    raw = float(np.max(np.abs(ours.astype(np.float64) - theirs.astype(np.float64))))
    print(f"  {name}: max |fp16(ours) - theirs| {d:.3g} (before rounding ours: {raw:.3g})")
    return d == 0.0


def w_of(ref, g):
    q, z, s = ref["codes"], ref["zeros"], ref["scales"]
    return (np.repeat(s, g, 1) * (q.astype(np.float32) - np.repeat(z, g, 1))).astype(np.float32)


def check_gptq(N, K, bits, group, sym):
    from gptqmodel.nn_modules.qlinear.torch import TorchLinear as TorchQuantLinear
    from gptqmodel.utils.model import convert_gptq_v2_to_v1_format_module
    rng = np.random.default_rng(1)
    w = rng.standard_normal((N, K)).astype(np.float32) * 0.05
    ok = True
    for fmt in ("gptq_v2", "gptq"):
        t, ref = mqc.pack_module("gptq", dict(bits=bits, group=group, sym=sym, fmt=fmt), w, rng)
        g = K if group == -1 else group
        # the packer quantizes W; zeros as GPTQModel holds them internally (v2: the zero itself)
        q, zero, scale, _ = mqc.quantize_gptq(w, bits, group, sym)
        W = w_of(dict(codes=q, zeros=zero, scales=scale), g)
        lin = torch.nn.Linear(K, N, bias=False)
        lin.weight.data = torch.from_numpy(W)
        m = TorchQuantLinear(bits=bits, group_size=group, sym=sym, desc_act=False, in_features=K, out_features=N,
                             bias=False, pack_dtype=torch.int32, backend=None)
        m.pack_original(lin, torch.from_numpy(scale), torch.from_numpy(zero.astype(np.float32)),
                        torch.from_numpy((np.arange(K) // g).astype(np.int32)))
        if fmt == "gptq":
            m.qzero_format(format=2)
            convert_gptq_v2_to_v1_format_module(m, types.SimpleNamespace(bits=bits, pack_dtype=torch.int32))
        print(f"gptq {fmt} bits {bits} group {group} sym {sym} [{N}, {K}]")
        ok &= same("qweight", t["qweight"], m.qweight.numpy())
        ok &= same("qzeros", t["qzeros"], m.qzeros.numpy())
        ok &= same("scales", t["scales"], m.scales.numpy())
        ok &= same("g_idx", t["g_idx"], m.g_idx.numpy().astype(np.int32))
        if fmt == "gptq_v2":
            ok &= close("GPTQModel dequantize_weight vs our reference", w_of(ref, g), m.dequantize_weight().T.float().numpy())
    return ok


def check_awq(N, K, group):
    from awq.modules.linear.gemm import WQLinear_GEMM
    from awq.utils.packing_utils import dequantize_gemm
    rng = np.random.default_rng(2)
    w = rng.standard_normal((N, K)).astype(np.float32) * 0.05
    t, ref = mqc.pack_module("awq", dict(bits=4, group=group), w, rng)
    W = w_of(ref, group)
    lin = torch.nn.Linear(K, N, bias=False)
    lin.weight.data = torch.from_numpy(W)
    m = WQLinear_GEMM.from_linear(lin, 4, group, scales=torch.from_numpy(ref["scales"].T.copy()),
                                  zeros=torch.from_numpy(ref["zeros"].T.astype(np.float32).copy()))
    print(f"awq gemm group {group} [{N}, {K}]")
    ok = same("qweight", t["qweight"], m.qweight.numpy())
    ok &= same("qzeros", t["qzeros"], m.qzeros.numpy())
    ok &= same("scales", t["scales"], m.scales.numpy())
    deq = dequantize_gemm(m.qweight, m.qzeros, m.scales, 4, group).T.float().numpy()
    ok &= close("AutoAWQ dequantize_gemm vs our reference", W, deq)
    return ok


def check_ct(N, K, bits, group, sym):
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    rng = np.random.default_rng(3)
    w = rng.standard_normal((N, K)).astype(np.float32) * 0.05
    s = dict(bits=bits, group=group, sym=sym, scale_dtype="f16")
    t, ref = mqc.pack_module("ct", s, w, rng)
    g = K if group == -1 else group
    W = w_of(ref, g)
    args = QuantizationArgs(num_bits=bits, type="int", symmetric=sym, strategy="channel" if group == -1 else "group",
                            group_size=None if group == -1 else group)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    sd = {"weight": torch.from_numpy(W).half(), "weight_scale": torch.from_numpy(ref["scales"]).half()}
    off = 2 ** (bits - 1)
    if not sym:
        sd["weight_zero_point"] = torch.from_numpy((ref["zeros"] - off).astype(np.int8))
    out = PackedQuantizationCompressor.compress(sd, scheme)
    print(f"compressed-tensors pack-quantized bits {bits} group {group} sym {sym} [{N}, {K}]")
    ok = same("weight_packed", t["weight_packed"], out["weight_packed"].numpy())
    ok &= same("weight_shape", t["weight_shape"], out["weight_shape"].numpy().astype(np.int64))
    if not sym:
        ok &= same("weight_zero_point", t["weight_zero_point"], out["weight_zero_point"].numpy())
    back = PackedQuantizationCompressor.decompress(out, scheme)
    ok &= close("compressed-tensors decompress vs our reference", W, back["weight"].float().numpy())
    return ok


def main():
    results = []
    for fn, a in [(check_gptq, (96, 256, 4, 128, True)), (check_gptq, (96, 256, 4, 32, False)),
                  (check_gptq, (64, 256, 8, 128, True)), (check_gptq, (64, 256, 4, -1, True)),
                  (check_awq, (96, 256, 128)), (check_awq, (64, 128, 32)),
                  (check_ct, (96, 256, 4, 128, True)), (check_ct, (100, 256, 4, 64, False)),
                  (check_ct, (64, 256, 8, -1, True))]:
        try:
            results.append(fn(*a))
        except Exception as e:  # report which reference could not run, and go on
            print(f"{fn.__name__}{a}: could not run the reference: {type(e).__name__}: {e}")
            results.append(None)
    ran = [r for r in results if r is not None]
    print(f"{sum(ran)} passed, {len(ran) - sum(ran)} failed, {len(results) - len(ran)} skipped")
    sys.exit(0 if all(ran) and ran else 1)


if __name__ == "__main__":
    main()
