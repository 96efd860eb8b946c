"""Adds (or replaces) one string key of a GGUF file's metadata, in the standard library only: the
structured-output check gives stories260K a chat template this way on a machine with nothing but
python3 (tests/e2e/structured_corpus_check.py). The tensors are copied unchanged; the data section
keeps the file's alignment (general.alignment, else 32).

    with_string_key("stories260K.gguf", "out.gguf", "tokenizer.chat_template", TEMPLATE)
"""
import struct

# GGUF value types (ggml's gguf.h): sizes of the fixed-width ones.
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY, UINT32 = 8, 9, 4


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, n):
        if self.pos + n > len(self.data):
            raise ValueError("truncated GGUF file")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def string(self):
        return self.take(self.u64()).decode("utf-8")

    def skip_value(self, vtype):
        if vtype in FIXED:
            return self.take(FIXED[vtype])
        if vtype == STRING:
            return self.take(self.u64())
        if vtype == ARRAY:
            etype, n = self.u32(), self.u64()
            for _ in range(n):
                self.skip_value(etype)
            return None
        raise ValueError(f"unknown GGUF value type {vtype}")


def encode_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def with_string_key(src, dst, key, value):
    data = open(src, "rb").read()
    r = Reader(data)
    if r.take(4) != b"GGUF":
        raise ValueError(f"{src} is not a GGUF file")
    version = r.u32()
    if version < 2:
        raise ValueError(f"{src}: GGUF version {version} is not supported")
    n_tensors, n_kv = r.u64(), r.u64()
    kvs, alignment = [], 32
    for _ in range(n_kv):
        start = r.pos
        name = r.string()
        vtype = r.u32()
        at = r.pos
        r.skip_value(vtype)
        if name == "general.alignment" and vtype == UINT32:
            alignment = struct.unpack("<I", data[at:at + 4])[0]
        if name != key:
            kvs.append(data[start:r.pos])
    infos_start = r.pos
    for _ in range(n_tensors):
        r.string()
        dims = r.u32()
        r.take(8 * dims + 4 + 8)  # dims, type, offset
    infos = data[infos_start:r.pos]
    data_start = (r.pos + alignment - 1) // alignment * alignment
    head = b"GGUF" + struct.pack("<IQQ", version, n_tensors, len(kvs) + 1) + b"".join(kvs)
    head += encode_string(key) + struct.pack("<I", STRING) + encode_string(value) + infos
    head += b"\0" * ((-len(head)) % alignment)
    with open(dst, "wb") as f:
        f.write(head)
        f.write(data[data_start:])
