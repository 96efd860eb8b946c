#!/usr/bin/env python3
"""Writes seed corpora for the fuzz targets: OUT/<target>/<seed files>.

Standard library only (runs with any python3, no venv). Seeds are small valid files that reach
deep into each parser, plus a few truncated ones; nothing binary is committed.

  gguf_fuzz:         synthetic GGUF v3 files with every metadata type (nested arrays too), f32 /
                     f16 / q8_0 / q4_0 tensors and the llama keys ModelConfig reads; the metadata of
                     ../shared/models/stories260K/stories260K.gguf (its 512-piece vocabulary) with
                     two tiny tensors; that file's first 4 KiB (a truncated header).
  safetensors_fuzz:  valid files with F32/F16/BF16/I64 tensors, metadata, scalar and empty tensors.

Usage: fuzz/make_seeds.py OUT_DIR [--shared ../shared]
"""
import argparse
import json
import os
import struct

# GGUF metadata value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
              BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}
# ggml tensor types: id -> (block size, bytes per block)
GGML = {"f32": (0, 1, 4), "f16": (1, 1, 2), "q4_0": (2, 32, 18), "q8_0": (8, 32, 34)}


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_value(t, v):
    if t == STR:
        return gguf_str(v)
    if t == ARR:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        for it in items:
            out += gguf_value(et, it)
        return out
    return struct.pack(SCALAR_FMT[t], v)


def gguf_file(kvs, tensors, alignment=32, raw_kv=None, n_raw_kv=0):
    """kvs: [(key, type, value)]; tensors: [(name, dims innermost-first, type name)]."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs) + n_raw_kv)
    out += raw_kv or b""
    for key, t, v in kvs:
        out += gguf_str(key) + struct.pack("<I", t) + gguf_value(t, v)
    offset = 0
    blobs = []
    for name, dims, tname in tensors:
        tid, bs, bb = GGML[tname]
        n = 1
        for d in dims:
            n *= d
        nbytes = n // bs * bb
        out += gguf_str(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", tid, offset)
        blobs.append(bytes((i * 7 + 3) & 0xFF for i in range(nbytes)))
        offset += (nbytes + alignment - 1) // alignment * alignment
    out += b"\0" * (-len(out) % alignment)
    for blob in blobs:
        out += blob + b"\0" * (-len(blob) % alignment)
    return out


def llama_kvs(arch="llama", hidden=8, heads=2, kv_heads=1, layers=1, ffn=16, ctx=64):
    p = arch + "."
    return [("general.architecture", STR, arch),
            (p + "context_length", U32, ctx), (p + "embedding_length", U32, hidden),
            (p + "block_count", U32, layers), (p + "feed_forward_length", U32, ffn),
            (p + "attention.head_count", U32, heads), (p + "attention.head_count_kv", U32, kv_heads),
            (p + "attention.layer_norm_rms_epsilon", F32, 1e-5), (p + "rope.freq_base", F32, 10000.0),
            (p + "rope.dimension_count", U32, hidden // heads if heads else 8)]


def stories_kv_section(path):
    """The raw metadata key/value bytes of a GGUF file and their count (walks the format)."""
    with open(path, "rb") as f:
        data = f.read()
    _, _, n_tensors, n_kv = struct.unpack_from("<4sIQQ", data, 0)
    pos = 24

    def skip_value(t, pos):
        if t == STR:
            (n,) = struct.unpack_from("<Q", data, pos)
            return pos + 8 + n
        if t == ARR:
            et, n = struct.unpack_from("<IQ", data, pos)
            pos += 12
            for _ in range(n):
                pos = skip_value(et, pos)
            return pos
        return pos + struct.calcsize(SCALAR_FMT[t])

    start = pos
    for _ in range(n_kv):
        (klen,) = struct.unpack_from("<Q", data, pos)
        pos += 8 + klen
        (t,) = struct.unpack_from("<I", data, pos)
        pos = skip_value(t, pos + 4)
    return data[start:pos], n_kv, data


def gguf_seeds(shared):
    seeds = {}
    every_type = [
        ("t.u8", U8, 200), ("t.i8", I8, -5), ("t.u16", U16, 60000), ("t.i16", I16, -300),
        ("t.u32", U32, 4000000000), ("t.i32", I32, -70000), ("t.f32", F32, 1.5), ("t.bool", BOOL, True),
        ("t.str", STR, "hello"), ("t.u64", U64, 2**63 + 5), ("t.i64", I64, -(2**40)), ("t.f64", F64, 2.25),
        ("t.arr_i32", ARR, (I32, [1, -2, 3])), ("t.arr_str", ARR, (STR, ["a", "bc", ""])),
        ("t.arr_f32", ARR, (F32, [0.5, -1.0])), ("t.arr_bool", ARR, (BOOL, [True, False])),
        ("t.arr_u64", ARR, (U64, [1, 2**64 - 1])),
        ("t.nested", ARR, (ARR, [(U8, [1, 2]), (STR, ["x"])])),
        ("general.alignment", U32, 32),
    ]
    tensors = [("token_embd.weight", [8, 16], "f32"), ("blk.0.attn_q.weight", [8, 8], "f16"),
               ("blk.0.ffn_up.weight", [32, 2], "q8_0"), ("blk.0.ffn_down.weight", [32, 1], "q4_0"),
               ("output_norm.weight", [8], "f32")]
    seeds["synthetic_llama.gguf"] = gguf_file(llama_kvs() + every_type, tensors)
    seeds["synthetic_qwen3_align64.gguf"] = gguf_file(
        llama_kvs("qwen3", hidden=16, heads=4, kv_heads=2) + [("qwen3.attention.key_length", U32, 8),
                                                              ("general.alignment", U32, 64)],
        [("blk.0.attn_q_norm.weight", [8], "f32"), ("blk.0.attn_k.weight", [16, 16], "f32")], alignment=64)
    seeds["no_tensors.gguf"] = gguf_file([("general.architecture", STR, "llama")], [])
    # Hostile hyper-parameters (issue 25): each must be a clear error, never a crash or a huge allocation.
    small = [("token_embd.weight", [8, 16], "f32")]
    seeds["ctx_u32_max.gguf"] = gguf_file(llama_kvs(ctx=0xFFFFFFFF), small)
    seeds["ctx_2_28.gguf"] = gguf_file(llama_kvs(ctx=1 << 28), small)
    seeds["heads_zero.gguf"] = gguf_file(llama_kvs(heads=0), small)
    seeds["kv_heads_zero.gguf"] = gguf_file(llama_kvs(kv_heads=0), small)
    seeds["heads_not_dividing.gguf"] = gguf_file(
        [kv for kv in llama_kvs(hidden=9, heads=2) if not kv[0].endswith("rope.dimension_count")], small)
    seeds["block_count_float.gguf"] = gguf_file(
        [(k, F32, 1.0) if k.endswith("block_count") else (k, t, v) for k, t, v in llama_kvs()], small)
    seeds["ctx_negative_i64.gguf"] = gguf_file(
        [(k, I64, -5) if k.endswith("context_length") else (k, t, v) for k, t, v in llama_kvs()], small)
    stories = os.path.join(shared, "models", "stories260K", "stories260K.gguf")
    if os.path.exists(stories):
        raw, n_kv, data = stories_kv_section(stories)
        seeds["stories260K_vocab.gguf"] = gguf_file(
            [], [("token_embd.weight", [64, 2], "f32"), ("output_norm.weight", [64], "f32")],
            raw_kv=raw, n_raw_kv=n_kv)
        seeds["stories260K_head4k.gguf"] = data[:4096]
    return seeds


def safetensors_file(tensors, metadata=None, pad=0):
    """tensors: [(name, dtype, shape, element bytes)] laid out in order."""
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, eb in tensors:
        n = eb
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        blobs.append(bytes((i * 13 + 1) & 0xFF for i in range(n)))
        off += n
    h = json.dumps(header, separators=(",", ":")).encode() + b" " * pad
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def safetensors_seeds():
    return {
        "mixed.safetensors": safetensors_file(
            [("model.embed_tokens.weight", "F32", [4, 8], 4), ("model.norm.weight", "BF16", [8], 2),
             ("lm_head.weight", "F16", [4, 8], 2), ("position_ids", "I64", [1, 4], 8)],
            metadata={"format": "pt"}),
        "empty.safetensors": safetensors_file([]),
        "scalar_zero.safetensors": safetensors_file(
            [("s", "F32", [], 4), ("z", "F16", [0, 3], 2), ("u", "U8", [3], 1), ("e4m3", "F8_E4M3", [2], 1)], pad=5),
        "dims.safetensors": safetensors_file([("w", "BF16", [2, 1, 3, 1, 2], 2), ("b", "BOOL", [2], 1)],
                                             metadata={"total": "12", "": ""}),
    }


def rank_command_seeds():
    """Rank commands in runtime/rank_command.h's format (version 1): a forward of two sequences, block copies,
    a graph switch and the shutdown."""
    def u32(n):
        return struct.pack("<I", n)

    def ints(v):
        return u32(len(v)) + b"".join(struct.pack("<i", x) for x in v)

    def head(op):
        return struct.pack("<IHB", 0x43524750, 1, op)

    tokens, positions, slots = [1, 15043, 3186, 29871], [0, 1, 2, 7], [16, 17, 18, 39]
    forward = head(1) + ints(tokens) + ints(positions) + u32(len(slots)) + b"".join(struct.pack("<q", s) for s in slots)
    forward += u32(2) + struct.pack("<iii", 0, 3, 3) + ints([1]) + struct.pack("<iii", 3, 1, 8) + ints([2])
    forward += ints([2, 3])
    copies = u32(2) + struct.pack("<iiii", 5, 1, 6, 2)
    return {"forward.bin": forward, "swap_out.bin": head(2) + copies, "swap_in.bin": head(3) + copies,
            "graphs.bin": head(4) + b"\x01", "shutdown.bin": head(5)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared"))
    args = ap.parse_args()
    # hf_config_fuzz and http_request_fuzz seeds are committed text files (fuzz/seeds/<target>/).
    for target, seeds in (("gguf_fuzz", gguf_seeds(args.shared)), ("safetensors_fuzz", safetensors_seeds()),
                          ("rank_command_fuzz", rank_command_seeds())):
        d = os.path.join(args.out, target)
        os.makedirs(d, exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        print(f"make_seeds: {len(seeds)} seeds in {d}")


if __name__ == "__main__":
    main()
