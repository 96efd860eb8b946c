#!/usr/bin/env python3
"""Packed-integer checkpoints (GPTQ, AWQ, compressed-tensors pack-quantized) of a float Hugging Face
model, laid out byte for byte as the formats' reference packers write them, with the packer's own
unpacked values beside them.

numpy + safetensors only (the test venv), deterministic. For each variant it writes
  OUT/<variant>/config.json            the source config plus quantization_config
  OUT/<variant>/model.safetensors      every decoder linear (q/k/v/o, gate/up/down) packed; the
                                       rest (embeddings, norms, biases) copied from the source
  OUT/<variant>/reference.safetensors  the packer's own unpacked values of each packed linear <m>
                                       (which the loader never reads): <m>.codes U8 [N, K], <m>.zeros
                                       I32 [N, G] and <m>.scales F32 [N, G] (the zero a reader of the
                                       format takes: GPTQ v1's stored + 1), and for act-order
                                       <m>.g_idx I32 [K], so that the dequantized f32 weight is
                                       W[n][k] = scales[n][g(k)] * (codes[n][k] - zeros[n][g(k)]),
                                       g(k) = g_idx[k] or k / (K / G)

Quantizers (round to nearest, the reference quantizers' scale / zero rules; GPTQ's Hessian
correction changes which codes are chosen, not how they are stored):
  gptq   per row and group: xmin = min(w, 0), xmax = max(w, 0); sym: xmax = max(|xmin|, xmax),
         xmin = -xmax, zero = 2^(b-1); scale = (xmax - xmin) / (2^b - 1), zero = round(-xmin / scale);
         scale rounded to fp16; q = clamp(round(w / scale) + zero, 0, 2^b - 1).
         qweight I32 [K*b/32, N]: qweight[r][n] |= q[n][r*(32/b) + j] << (b*j); qzeros I32
         [G, N*b/32] packed along N the same way, holding zero - 1 for checkpoint_format "gptq"
         (v1; masked to b bits) or zero for "gptq_v2"; scales F16 [G, N]; g_idx I32 [K].
         act-order: columns quantized in a random order (one per input: q/k/v share one, gate/up one),
         g_idx[k] = rank(k) / group.
  awq    per row and group: scale = (max - min) / 15 (>= 1e-5), zero = clamp(-round(min / scale), 0, 15)
         (AutoAWQ's pseudo_quantize_tensor), scale rounded to fp16; qweight I32 [K, N/8] with column
         8c + [0, 2, 4, 6, 1, 3, 5, 7][i] in nibble i of word c; qzeros I32 [G, N/8] likewise; scales F16 [G, N].
  ct     compressed-tensors: sym scale = max|w| / ((2^b - 1) / 2), q = clamp(round(w / s), -2^(b-1), 2^(b-1)-1);
         asym scale = (max(w,0) - min(w,0)) / (2^b - 1), zp = clamp(round(-2^(b-1) - min / s), ...);
         weight_packed I32 [N, K*b/32] (q + 2^(b-1) densely packed along K), weight_scale [N, G]
         (BF16, the dtype of a bf16 model, or F16), weight_zero_point I32 [ceil(N*b/32), G] (asym: zp +
         2^(b-1) packed along N), weight_shape I64 [2].

  fp8    float8_e4m3 weights (round to nearest even, saturating): compressed-tensors float-quantized
         channel (weight_scale F32 [N, 1] = max|row| / 448, input_scale), or quant_method "fp8"
         (weight_scale_inv F32 per 128 x 128 block = max|block| / 448). reference.safetensors holds
         <m>.fp8 (the codes) and <m>.scales (the scale grid).

tools/cross_check_quantized_packers.py runs the reference packers themselves (GPTQModel, AutoAWQ,
compressed-tensors; they need torch) on this script's codes and compares the bytes.

Usage: tools/make_quantized_checkpoint.py [--src models/tiny] [--out models/tiny/quant] [VARIANT ...]
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = 20261203
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")

# variant -> (source model, method, settings)
VARIANTS = {
    "llama3-gptq-w4g128": ("llama3", "gptq", dict(bits=4, group=128, sym=True, fmt="gptq")),
    "llama3-gptq-w4g32-asym": ("llama3", "gptq", dict(bits=4, group=32, sym=False, fmt="gptq")),
    "llama3-gptq-w4g64-asym-v2": ("llama3", "gptq", dict(bits=4, group=64, sym=False, fmt="gptq_v2")),
    "llama3-gptq-w4-channel": ("llama3", "gptq", dict(bits=4, group=-1, sym=True, fmt="gptq")),
    "llama3-gptq-w8g128": ("llama3", "gptq", dict(bits=8, group=128, sym=True, fmt="gptq")),
    "qwen2-gptq-w4g32": ("qwen2", "gptq", dict(bits=4, group=32, sym=True, fmt="gptq")),
    "llama3-gptq-w4g32-actorder": ("llama3", "gptq", dict(bits=4, group=32, sym=True, fmt="gptq", act_order=True)),
    # q and k quantized in different orders (GPTQ gives modules of one input one order): must not load
    "llama3-gptq-w4g32-actorder-mismatch": ("llama3", "gptq", dict(bits=4, group=32, sym=False, fmt="gptq",
                                                                   act_order=True, mismatch=True)),
    "llama3-awq-w4g128": ("llama3", "awq", dict(bits=4, group=128)),
    "llama3-awq-w4g32": ("llama3", "awq", dict(bits=4, group=32)),
    "llama3-ct-w4a16-g128": ("llama3", "ct", dict(bits=4, group=128, sym=True, scale_dtype="bf16")),
    "llama3-ct-w4a16-g64-asym": ("llama3", "ct", dict(bits=4, group=64, sym=False, scale_dtype="f16")),
    "llama3-ct-w8a16-channel": ("llama3", "ct", dict(bits=8, group=-1, sym=True, scale_dtype="bf16")),
    "llama3-ct-fp8-channel": ("llama3", "fp8", dict(block=None)),
    "llama3-fp8-block128": ("llama3", "fp8", dict(block=128)),
}


def fp16_round(x):
    return x.astype(np.float16).astype(np.float32)


def bf16_round(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16  # round to nearest even
    return u.astype(np.uint32).view(np.float32)


def bf16_bytes(x):
    return (np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def pack_along_rows(v, bits):
    """v [R, C] unsigned codes -> [R*bits/32, C] uint32: word r holds rows r*per .. r*per+per-1."""
    per = 32 // bits
    R, C = v.shape
    out = np.zeros(((R + per - 1) // per, C), dtype=np.uint32)
    for j in range(per):
        rows = v[j::per].astype(np.uint32)
        out[: rows.shape[0]] |= rows << np.uint32(bits * j)
    return out


def pack_along_cols(v, bits, order=None):
    """v [R, C] -> [R, ceil(C*bits/32)] uint32; word c holds columns c*per + order[i] in slot i."""
    per = 32 // bits
    R, C = v.shape
    order = order or list(range(per))
    pad = (-C) % per
    v = np.pad(v.astype(np.uint32), ((0, 0), (0, pad)))
    out = np.zeros((R, v.shape[1] // per), dtype=np.uint32)
    for i in range(per):
        out |= v[:, order[i]::per] << np.uint32(bits * i)
    return out


def grouped(w, group):
    """w [N, K] -> [N, G, g] view of its groups (group -1: one group of K)."""
    N, K = w.shape
    g = K if group == -1 else group
    assert K % g == 0, (K, g)
    return w.reshape(N, K // g, g), g


def quantize_gptq(w, bits, group, sym, perm=None):
    """GPTQ's Quantizer.find_params + quantize per (row, group). perm: column order for act-order
    (group i holds the columns perm[i*g:(i+1)*g]). Returns codes [N, K], zeros [N, G], scales [N, G]."""
    maxq = 2 ** bits - 1
    N, K = w.shape
    wp = w if perm is None else w[:, perm]
    wg, g = grouped(wp, group)
    xmin = np.minimum(wg.min(axis=2), 0)
    xmax = np.maximum(wg.max(axis=2), 0)
    if sym:
        xmax = np.maximum(np.abs(xmin), xmax)
        xmin = np.where(xmin < 0, -xmax, xmin)
    both0 = (xmin == 0) & (xmax == 0)
    xmin = np.where(both0, -1, xmin)
    xmax = np.where(both0, 1, xmax)
    scale = fp16_round((xmax - xmin) / maxq)
    zero = np.full_like(scale, (maxq + 1) // 2) if sym else np.round(-xmin / scale)
    q = np.clip(np.round(wg / scale[:, :, None]) + zero[:, :, None], 0, maxq).reshape(N, K)
    if perm is not None:
        inv = np.empty_like(perm)
        inv[perm] = np.arange(K)
        q = q[:, inv]
    return q.astype(np.uint8), zero.astype(np.int64), scale.astype(np.float32), g


def quantize_awq(w, group):
    wg, g = grouped(w, group)
    mx, mn = wg.max(axis=2), wg.min(axis=2)
    scale = fp16_round(np.maximum(mx - mn, 1e-5) / 15)
    zero = np.clip(-np.round(mn / scale), 0, 15)
    q = np.clip(np.round(wg / scale[:, :, None]) + zero[:, :, None], 0, 15).reshape(w.shape)
    return q.astype(np.uint8), zero.astype(np.int64), scale.astype(np.float32), g


def quantize_ct(w, bits, group, sym, scale_round):
    qmin, qmax = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    wg, g = grouped(w, group)
    mn, mx = np.minimum(wg.min(axis=2), 0), np.maximum(wg.max(axis=2), 0)
    if sym:
        scale = scale_round(np.maximum(np.abs(mn), mx) / ((qmax - qmin) / 2))
        zp = np.zeros_like(scale)
    else:
        scale = scale_round((mx - mn) / (qmax - qmin))
        zp = np.clip(np.round(qmin - mn / scale), qmin, qmax)
    q = np.clip(np.round(wg / scale[:, :, None]) + zp[:, :, None], qmin, qmax).reshape(w.shape)
    return q.astype(np.int64), zp.astype(np.int64), scale.astype(np.float32), g


# FP8 E4M3 (bias 7, no infinities, max 448): every finite code's value, for round-to-nearest-even.
_E4M3 = np.array([(-1) ** (c >> 7) * (((c >> 3) & 15) and (1 + (c & 7) / 8) * 2.0 ** (((c >> 3) & 15) - 7)
                   or (c & 7) / 8 * 2.0 ** -6) for c in range(256)], dtype=np.float64)


def fp8_e4m3_codes(x):
    """x (float) -> E4M3 codes, round to nearest (ties to the even code), saturating at +-448."""
    pos = np.arange(0, 127)  # 0x00 .. 0x7e (0x7f is NaN)
    vals = _E4M3[pos]
    a = np.minimum(np.abs(x.astype(np.float64)), 448.0)
    hi = np.clip(np.searchsorted(vals, a), 1, len(vals) - 1)
    lo = hi - 1
    dlo, dhi = a - vals[lo], vals[hi] - a
    pick = np.where((dhi < dlo) | ((dhi == dlo) & (hi % 2 == 0)), hi, lo)
    return (pos[pick] | np.where(x < 0, 128, 0)).astype(np.uint8)


def pack_module(method, s, w, rng, perm=None):
    """Tensors of one packed module (suffix -> array) and its reference values (suffix -> array).
    perm: the act-order column order (GPTQ: the order of decreasing Hessian diagonal, one per input)."""
    N, K = w.shape
    t = {}
    if method == "gptq":
        bits, group = s["bits"], s["group"]
        q, zero, scale, g = quantize_gptq(w, bits, group, s["sym"], perm)
        per = 32 // bits
        qzeros = pack_along_cols(zero.T, bits)
        if s["fmt"] == "gptq":
            # v1 export (GPTQModel's convert_gptq_v2_to_v1_format): each packed word minus 1 in every
            # code slot, as one 32-bit subtraction (a zero of 0 borrows from its neighbour, as there).
            qzeros = qzeros - np.uint32(sum(1 << (bits * j) for j in range(per)))
        # the zero a reader takes: the stored code, + 1 in v1
        read_zero = np.stack([(qzeros >> np.uint32(bits * j)) & np.uint32(2 ** bits - 1) for j in range(per)], axis=2)
        read_zero = read_zero.reshape(qzeros.shape[0], -1)[:, :N].T.astype(np.int64) + (1 if s["fmt"] == "gptq" else 0)
        t["qweight"] = pack_along_rows(q.T, bits).view(np.int32)
        t["qzeros"] = qzeros.view(np.int32)
        t["scales"] = np.ascontiguousarray(scale.T.astype(np.float16))
        ref = dict(codes=q, zeros=read_zero, scales=scale)
        if perm is None:
            t["g_idx"] = (np.arange(K) // g).astype(np.int32)
        else:
            rank = np.empty(K, dtype=np.int64)
            rank[perm] = np.arange(K)
            t["g_idx"] = (rank // g).astype(np.int32)
            ref["g_idx"] = t["g_idx"]
    elif method == "awq":
        q, zero, scale, g = quantize_awq(w, s["group"])
        order = [0, 2, 4, 6, 1, 3, 5, 7]
        t["qweight"] = pack_along_cols(q.T, 4, order).view(np.int32)
        t["qzeros"] = pack_along_cols(zero.T, 4, order).view(np.int32)
        t["scales"] = np.ascontiguousarray(scale.T.astype(np.float16))
        ref = dict(codes=q, zeros=zero, scales=scale)
    elif method == "fp8":
        # compressed-tensors float-quantized channel (scale [N, 1] = max|row| / 448), or quant_method
        # fp8 (weight_scale_inv per 128 x 128 block): weight = fp8 codes, value = fp8 * scale.
        b = s["block"]
        if b is None:
            scale = (np.abs(w).max(axis=1, keepdims=True) / 448.0).astype(np.float32)
            cell = scale
        else:
            SR, SC = -(-N // b), -(-K // b)
            cell = np.zeros((SR, SC), dtype=np.float32)
            for i in range(SR):
                for j in range(SC):
                    cell[i, j] = np.abs(w[i * b:(i + 1) * b, j * b:(j + 1) * b]).max() / 448.0
            scale = np.repeat(np.repeat(cell, b, 0), b, 1)[:N, :K]
        codes = fp8_e4m3_codes(w / scale)
        t["weight"] = codes  # written as F8_E4M3
        t["weight_scale" if b is None else "weight_scale_inv"] = cell
        if b is None:
            t["input_scale"] = np.array([0.02], dtype=np.float32)  # static activation scale (not applied)
        ref = dict(fp8=codes, scales=cell)
    else:
        bits = s["bits"]
        rnd = bf16_round if s["scale_dtype"] == "bf16" else fp16_round
        q, zp, scale, g = quantize_ct(w, bits, s["group"], s["sym"], rnd)
        off = 2 ** (bits - 1)
        t["weight_packed"] = pack_along_cols(q + off, bits).view(np.int32)
        t["weight_scale"] = bf16_bytes(scale) if s["scale_dtype"] == "bf16" else scale.astype(np.float16)
        if not s["sym"]:
            t["weight_zero_point"] = pack_along_cols((zp + off).T, bits).T.copy().view(np.int32)
        t["weight_shape"] = np.array([N, K], dtype=np.int64)
        ref = dict(codes=q + off, zeros=zp + off, scales=scale)  # unsigned domain: (q + off) - (zp + off)
    return t, ref


def quantization_config(method, s):
    if method == "gptq":
        return {"quant_method": "gptq", "bits": s["bits"], "group_size": s["group"], "sym": s["sym"],
                "desc_act": bool(s.get("act_order")), "static_groups": False, "true_sequential": True,
                "damp_percent": 0.01, "checkpoint_format": s["fmt"], "lm_head": False}
    if method == "fp8" and s["block"] is None:
        return {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
                "config_groups": {"group_0": {
                    "targets": ["Linear"], "format": "float-quantized",
                    "weights": {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel",
                                "dynamic": False, "observer": "minmax"},
                    "input_activations": {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "tensor",
                                          "dynamic": False}}},
                "ignore": ["lm_head"], "kv_cache_scheme": None}
    if method == "fp8":
        return {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                "weight_block_size": [s["block"], s["block"]]}
    if method == "awq":
        return {"quant_method": "awq", "bits": 4, "group_size": s["group"], "zero_point": True,
                "version": "gemm", "modules_to_not_convert": None}
    return {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
            "config_groups": {"group_0": {
                "targets": ["Linear"], "input_activations": None, "output_activations": None,
                "format": "pack-quantized",
                "weights": {"num_bits": s["bits"], "type": "int", "symmetric": s["sym"],
                            "strategy": "channel" if s["group"] == -1 else "group",
                            "group_size": None if s["group"] == -1 else s["group"],
                            "dynamic": False, "actorder": None, "observer": "minmax"}}},
            "ignore": ["lm_head"], "kv_cache_scheme": None}


def save_with_bf16(tensors, path):
    """safetensors.numpy has no bfloat16 or float8: write the uint16 weight_scale arrays as BF16 and
    the uint8 .weight arrays as F8_E4M3 by patching the header (same byte layout)."""
    bf16 = [k for k, v in tensors.items() if k.endswith("weight_scale") and v.dtype == np.uint16]
    fp8 = [k for k, v in tensors.items() if k.endswith(".weight") and v.dtype == np.uint8]
    save_file(tensors, path, metadata={"format": "pt"})
    if not bf16 and not fp8:
        return
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    for k in bf16:
        assert header[k]["dtype"] == "U16"
        header[k]["dtype"] = "BF16"
    for k in fp8:
        assert header[k]["dtype"] == "U8"
        header[k]["dtype"] = "F8_E4M3"
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)  # the data section stays 8-byte aligned; its offsets are relative
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + data[8 + n:])


def write_variant(name, src_root, out_root):
    model, method, s = VARIANTS[name]
    src = os.path.join(src_root, model)
    cfg = json.load(open(os.path.join(src, "config.json")))
    weights = load_file(os.path.join(src, "model.safetensors")) if os.path.exists(os.path.join(src, "model.safetensors")) else {}
    if not weights:  # sharded
        index = json.load(open(os.path.join(src, "model.safetensors.index.json")))
        for shard in sorted(set(index["weight_map"].values())):
            weights.update(load_file(os.path.join(src, shard)))
    rng = np.random.default_rng(SEED + sum(map(ord, name)))
    packed, ref, orders = {}, {}, {}
    for key, w in sorted(weights.items()):
        module = key[: -len(".weight")] if key.endswith(".weight") else None
        if module is None or not any(module.endswith(l) for l in LINEARS):
            packed[key] = w
            continue
        perm = None
        if s.get("act_order"):
            # modules reading one input (q/k/v, gate/up) share its order, as GPTQ's per-input Hessian gives
            layer = module.split(".self_attn.")[0].split(".mlp.")[0]
            shared = "qkv" if module.endswith(("q_proj", "k_proj", "v_proj")) else "gu" if module.endswith(("gate_proj", "up_proj")) else module
            key = (layer, module if s.get("mismatch") else shared, w.shape[1])
            if key not in orders:
                orders[key] = rng.permutation(w.shape[1])
            perm = orders[key]
        t, r = pack_module(method, s, w.astype(np.float32), rng, perm)
        for suffix, a in t.items():
            packed[f"{module}.{suffix}"] = a
        if "fp8" in r:
            ref[f"{module}.fp8"] = r["fp8"]
            ref[f"{module}.scales"] = r["scales"].astype(np.float32)
            continue
        ref[f"{module}.codes"] = r["codes"].astype(np.uint8)
        ref[f"{module}.zeros"] = r["zeros"].astype(np.int32)
        ref[f"{module}.scales"] = r["scales"].astype(np.float32)
        if "g_idx" in r:
            ref[f"{module}.g_idx"] = r["g_idx"].astype(np.int32)
    d = os.path.join(out_root, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    qcfg = dict(cfg)
    qcfg["quantization_config"] = quantization_config(method, s)
    json.dump(qcfg, open(os.path.join(d, "config.json"), "w"), indent=2)
    # safetensors writes an array's buffer as it lies: every array C-contiguous (a transposed
    # scales view would otherwise be written column-major)
    packed = {k: np.ascontiguousarray(v) for k, v in packed.items()}
    ref = {k: np.ascontiguousarray(v) for k, v in ref.items()}
    save_with_bf16(packed, os.path.join(d, "model.safetensors"))
    save_file(ref, os.path.join(d, "reference.safetensors"), metadata={"format": "pt"})
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default=os.path.join(ROOT, "models", "tiny"))
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "tiny", "quant"))
    ap.add_argument("variants", nargs="*", help="default: all of " + ", ".join(VARIANTS))
    a = ap.parse_args()
    for name in a.variants or VARIANTS:
        if name not in VARIANTS:
            sys.exit(f"unknown variant {name}; known: {', '.join(VARIANTS)}")
        print(write_variant(name, a.src, a.out))


if __name__ == "__main__":
    main()
