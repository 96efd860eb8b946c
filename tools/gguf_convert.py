#!/usr/bin/env python3
"""Rewrites a GGUF with every tensor dequantized (gguf.quants, an implementation independent of
Pagoda's): to F16 (2-d weights; 1-d tensors f32) as the source llama-quantize requantizes, or to F32
(every tensor) as the reference "dequantized-f32 forward" of a quantized file.

  python tools/gguf_convert.py IN.gguf OUT.gguf --to f16|f32
Metadata is copied unchanged except general.file_type.
"""
import argparse

import numpy as np
from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType, GGUFValueType, LlamaFileType
from gguf.quants import dequantize


def copy_metadata(r: GGUFReader, w: GGUFWriter, file_type: int) -> None:
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if name == "general.file_type":
            w.add_uint32(name, file_type)
            continue
        vtype = f.types[0]
        if vtype == GGUFValueType.ARRAY:
            w.add_key_value(name, f.contents(), vtype, sub_type=f.types[-1])
        else:
            w.add_key_value(name, f.contents(), vtype)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--to", choices=["f16", "f32"], required=True)
    a = ap.parse_args()
    r = GGUFReader(a.src)
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(a.dst, arch)
    copy_metadata(r, w, LlamaFileType.MOSTLY_F16 if a.to == "f16" else LlamaFileType.ALL_F32)
    for t in r.tensors:
        x = dequantize(t.data, t.tensor_type).astype(np.float32)
        shape = [int(d) for d in reversed(t.shape)]  # numpy order: outermost first
        x = x.reshape(shape)
        if a.to == "f16" and x.ndim >= 2:
            x = x.astype(np.float16)
        w.add_tensor(t.name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
