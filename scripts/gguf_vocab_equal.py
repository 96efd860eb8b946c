#!/usr/bin/env python3
"""Checks that two GGUF files carry the same tokenizer vocabulary (tokenizer.ggml.tokens, and the
merges when present): the precondition for one to draft for the other in speculative decoding.
Usage: scripts/gguf_vocab_equal.py A.gguf B.gguf   (exit 0: equal; 1: different, with the first difference)"""
import struct
import sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # scalar types


def read_metadata(path, wanted):
    out = {}
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            sys.exit(f"{path}: not a GGUF file")
        version, = struct.unpack("<I", f.read(4))
        if version < 2:
            sys.exit(f"{path}: GGUF version {version} is not supported")
        _, n_kv = struct.unpack("<QQ", f.read(16))

        def string():
            n, = struct.unpack("<Q", f.read(8))
            return f.read(n)

        def value(t):
            if t == 8:
                return string()
            if t == 9:
                et, n = struct.unpack("<IQ", f.read(12))
                return [value(et) for _ in range(n)]
            return f.read(SIZES[t])

        for _ in range(n_kv):
            key = string().decode()
            t, = struct.unpack("<I", f.read(4))
            v = value(t)
            if key in wanted:
                out[key] = v
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    keys = {"tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.model"}
    a, b = (read_metadata(p, keys) for p in sys.argv[1:])
    for k in sorted(keys):
        va, vb = a.get(k), b.get(k)
        if va == vb:
            print(f"{k}: equal ({len(va) if isinstance(va, list) else va!r})")
            continue
        if isinstance(va, list) and isinstance(vb, list):
            i = next((i for i, (x, y) in enumerate(zip(va, vb)) if x != y), min(len(va), len(vb)))
            print(f"{k}: differ ({len(va)} vs {len(vb)} entries; first difference at {i})")
        else:
            print(f"{k}: differ")
        sys.exit(1)
    print("vocabularies match")


if __name__ == "__main__":
    main()
