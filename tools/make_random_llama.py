#!/usr/bin/env python3
"""A random-weight Llama-shaped BF16 checkpoint (HF directory: config.json + safetensors shards)
for `pagoda bench` on the GPU machine. Shapes are those of tools/hf_baseline.py (Llama-3-8B,
Llama-3.2-1B; rope_theta 5e5, context 8192, no rope scaling), or "small" (2 layers, 256 wide).
Weights ~ N(0, 0.02) (transformers' initializer_range), norms 1: speed does not depend on values.

--peaked [A]: the same shape and the same kinds of weights, but a next-token distribution with one
token far ahead of the rest, so that a greedy continuation does not depend on the kernels that
compute it (rounding of a (1 + k)-row verification vs a plain decode step, batch size, ISA).
Plain random weights give near-uniform logits whose top two differ by less than a kernel change's
rounding, which makes the replay proposer of `pagoda bench spec` lose its record outside
--batch-invariant. The construction: embedding rows e_t ~ A * N(0, 1) (A = 16 by default), and the
output head's row v is the embedding row of perm[v] for a fixed random permutation perm (a tied
model: the embedding's rows in permuted order cannot be one matrix, so the shape's tying is
dropped), divided by A (logits stay below hidden_size: no overflow where logits are 16-bit). The
residual stream at a position is A e_t plus what the random layers add (about 1.5
to 2 per component per layer at unit-scale norm inputs); after the final norm (divided by its rms r) the logit of v is
e_perm[v] . (A e_t + noise) / r, which is about A * hidden_size / r for v = perm^-1[t] and about
4.8 sqrt(hidden_size) sqrt(A^2 + noise^2) / r at most for the 128k others, so the greedy next
token is perm^-1[t] with a lead of about 0.8-0.9 of its logit (measured with `pagoda dump-layers`
at the 1B width with 2 layers: 0.78-0.91, against 0.0003-0.07 for plain random weights, whose
smallest leads are below bf16's relative rounding of 0.004) (a long cycle of the permutation:
continuations do not repeat early). The compute per token is that of the shape.

--sparse-2of4: every decoder linear pruned to 2:4 (the two largest |w| of each group of 4 inputs
kept), and config.json declaring it as llm-compressor does (quantization_config quant_method
compressed-tensors, sparsity_config sparsity_structure "2:4", format dense): `pagoda bench
--cuda-sparsity auto|off` then compares the sparse and dense GEMMs on one checkpoint.

Usage:
  python3 tools/make_random_llama.py llama3-8b /dev/shm/llama3-8b            (torch on the GPU)
  python3 tools/make_random_llama.py llama3-8b /dev/shm/llama3-8b-2of4 --sparse-2of4
  python3 tools/make_random_llama.py llama3-8b /dev/shm/llama3-8b-peaked --peaked
  PAGODA_RANDOM_DEVICE=numpy .venv-test/bin/python tools/make_random_llama.py small /tmp/m --peaked
PAGODA_RANDOM_DEVICE: cuda (default), cpu (torch on the CPU) or numpy (no torch: numpy and
safetensors only; slower, for a CPU check of small shapes).
"""
import argparse
import json
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SMALL = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=1000)


# Shapes only written with --config-only (too large for a file here; `--load-format dummy` makes
# their weights at load).
CONFIG_ONLY_SHAPES = {
    "llama3-70b": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                       num_key_value_heads=8, vocab_size=128256),
}


def shapes():
    try:
        from hf_baseline import SHAPES  # imports torch / transformers
        return {**SHAPES, **CONFIG_ONLY_SHAPES}
    except ImportError:
        return {**CONFIG_ONLY_SHAPES,
            "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                              num_attention_heads=32, num_key_value_heads=8, vocab_size=128256),
            "llama3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                                num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                                tie_word_embeddings=True),
        }


class TorchGen:
    """Random tensors from torch on `dev`, returned as CPU bfloat16 tensors."""

    def __init__(self, dev):
        import torch
        from safetensors.torch import save_file
        self.torch, self.save_file, self.dev = torch, save_file, dev
        self.g = torch.Generator(device=dev).manual_seed(0)

    def normal(self, scale, *shape):
        t = self.torch
        return (t.randn(*shape, device=self.dev, generator=self.g, dtype=t.float32) * scale).to(t.bfloat16).cpu()

    def ones(self, n):
        return self.torch.ones(n, dtype=self.torch.bfloat16)

    def permutation(self, n):
        return self.torch.randperm(n, generator=self.torch.Generator().manual_seed(1))

    def rows(self, m, index, scale):
        return (m[index].float() * scale).to(self.torch.bfloat16).contiguous()

    def nbytes(self, t):
        return t.numel() * 2

    def prune_2of4(self, t):
        g = t.to(self.dev).reshape(-1, 4)
        keep = g.float().abs().topk(2, dim=1).indices
        mask = self.torch.zeros_like(g, dtype=self.torch.bool).scatter_(1, keep, True)
        return (g * mask).reshape(t.shape).cpu()

    def save(self, shard, path):
        self.save_file(shard, path, metadata={"format": "pt"})


class NumpyGen:
    """The same without torch: float32 draws rounded to bfloat16 bits (uint16 arrays)."""

    def __init__(self):
        import numpy as np
        self.np = np
        self.rng = np.random.default_rng(0)

    def to_bf16(self, a):
        np = self.np
        u = a.astype(np.float32).view(np.uint32)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even

    def normal(self, scale, *shape):
        return self.to_bf16(self.rng.standard_normal(shape, dtype=self.np.float32) * scale)

    def ones(self, n):
        return self.to_bf16(self.np.ones(n, dtype=self.np.float32))

    def permutation(self, n):
        return self.np.random.default_rng(1).permutation(n)

    def rows(self, m, index, scale):
        f = (m[index].astype(self.np.uint32) << 16).view(self.np.float32)
        return self.to_bf16(f * scale)

    def nbytes(self, t):
        return t.size * 2

    def prune_2of4(self, t):
        np = self.np
        g = t.reshape(-1, 4)
        mag = np.abs((g.astype(np.uint32) << 16).view(np.float32))
        drop = np.argsort(-mag, axis=1, kind="stable")[:, 2:]
        out = g.copy()
        np.put_along_axis(out, drop, 0, axis=1)
        return out.reshape(t.shape)

    def save(self, shard, path):
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for k, v in shard.items():
            header[k] = {"dtype": "BF16", "shape": list(v.shape), "data_offsets": [offset, offset + v.nbytes]}
            offset += v.nbytes
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(h)))
            f.write(h)
            for v in shard.values():
                f.write(v.tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shape", help="llama3-8b, llama3.2-1b, small, or (--config-only) llama3-70b")
    ap.add_argument("out", help="output directory")
    ap.add_argument("--peaked", nargs="?", type=float, const=16.0, default=None, metavar="A",
                    help="a peaked next-token distribution (embedding scale A, default 16)")
    ap.add_argument("--num-layers", type=int, default=None,
                    help="fewer layers than the shape (a quick CPU check of the head's statistics at full width)")
    ap.add_argument("--vocab-size", type=int, default=None,
                    help="another vocabulary size than the shape's, e.g. that of a tokenizer served with it "
                         "(`pagoda serve --tokenizer`: 512 for stories260K's, so that every id has a piece)")
    ap.add_argument("--sparse-2of4", action="store_true",
                    help="decoder linears pruned to 2:4, declared in config.json (compressed-tensors sparsity_config)")
    ap.add_argument("--config-only", action="store_true",
                    help="write config.json alone (for `pagoda bench --load-format dummy`: random weights at load)")
    args = ap.parse_args()
    table = shapes()
    if args.shape != "small" and args.shape not in table:
        sys.exit(f"unknown shape {args.shape!r}: {', '.join(table)} or small")
    if args.shape in CONFIG_ONLY_SHAPES and not args.config_only:
        sys.exit(f"{args.shape}: weights are not written here (too large); use --config-only and --load-format dummy")
    s = dict(table[args.shape]) if args.shape in table else dict(SMALL)
    tied = s.pop("tie_word_embeddings", False) and args.peaked is None
    if args.num_layers is not None:
        s["num_hidden_layers"] = args.num_layers
    if args.vocab_size is not None:
        s["vocab_size"] = args.vocab_size
    H, I, L, V = s["hidden_size"], s["intermediate_size"], s["num_hidden_layers"], s["vocab_size"]
    heads, kv = s["num_attention_heads"], s["num_key_value_heads"]
    hd = H // heads
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **s, "head_dim": hd,
           "max_position_embeddings": 8192, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
           "tie_word_embeddings": tied, "hidden_act": "silu", "torch_dtype": "bfloat16", "bos_token_id": 1,
           "eos_token_id": 2}
    if args.sparse_2of4:
        cfg["quantization_config"] = {
            "quant_method": "compressed-tensors", "format": "dense",
            "sparsity_config": {"format": "dense", "sparsity_structure": "2:4", "global_sparsity": 0.5,
                                "targets": ["Linear"], "ignore": ["lm_head"]}}
    out = args.out
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    if args.config_only:
        print(json.dumps({"shape": args.shape, "dir": out, "config_only": True}), flush=True)
        return
    t0 = time.time()
    dev = os.environ.get("PAGODA_RANDOM_DEVICE", "cuda")
    gen = NumpyGen() if dev == "numpy" else TorchGen(dev)

    shard, shard_no, weight_map, size = {}, 0, {}, 0

    def flush():
        nonlocal shard, shard_no, size
        if not shard:
            return
        name = f"model-{shard_no:05d}.safetensors"
        gen.save(shard, os.path.join(out, name))
        for k in shard:
            weight_map[k] = name
        shard, shard_no, size = {}, shard_no + 1, 0

    def add(name, t):
        nonlocal size
        shard[name] = t
        size += gen.nbytes(t)
        if size > (4 << 30):
            flush()

    rnd = lambda *shape: gen.normal(0.02, *shape)  # noqa: E731
    lin = (lambda *shape: gen.prune_2of4(rnd(*shape))) if args.sparse_2of4 else rnd  # noqa: E731
    embed = gen.normal(args.peaked, V, H) if args.peaked is not None else rnd(V, H)
    add("model.embed_tokens.weight", embed)
    for l in range(L):
        p = f"model.layers.{l}."
        add(p + "input_layernorm.weight", gen.ones(H))
        add(p + "self_attn.q_proj.weight", lin(heads * hd, H))
        add(p + "self_attn.k_proj.weight", lin(kv * hd, H))
        add(p + "self_attn.v_proj.weight", lin(kv * hd, H))
        add(p + "self_attn.o_proj.weight", lin(H, heads * hd))
        add(p + "post_attention_layernorm.weight", gen.ones(H))
        add(p + "mlp.gate_proj.weight", lin(I, H))
        add(p + "mlp.up_proj.weight", lin(I, H))
        add(p + "mlp.down_proj.weight", lin(H, I))
    add("model.norm.weight", gen.ones(H))
    if args.peaked is not None:
        add("lm_head.weight", gen.rows(embed, gen.permutation(V), 1.0 / args.peaked))
    elif not tied:
        add("lm_head.weight", rnd(V, H))
    flush()
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    print(json.dumps({"shape": args.shape, "dir": out, "peaked": args.peaked, "sparse_2of4": args.sparse_2of4, "seconds": round(time.time() - t0, 1)}),
          flush=True)


if __name__ == "__main__":
    main()
