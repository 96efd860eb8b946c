"""Native-PyTorch anchor: HF transformers generate() on a randomly initialised Llama-shaped model.

Measures batch-1 decode tokens/s and batched generation throughput, the way a user who does not
run an inference engine would serve a model. Prints one JSON line per measurement.

Copied from ../shared/tools/hf_baseline.py so it travels to the GPU machine with the worktree.
One addition: `--runs BATCH:PROMPT:NEW,...` replaces the default measurement list (bs1 128/256,
bs16 512/256, bs64 512/256), so a session can measure exactly the shapes it compares against
(e.g. --runs 64:128:128,64:1000:1000) within its device time. Everything else is unchanged.
"""
import json
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256),
    "llama3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                        num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                        tie_word_embeddings=True),
}


def build(shape):
    cfg = LlamaConfig(**SHAPES[shape], max_position_embeddings=8192, rope_theta=500000.0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    model.eval()
    return model, cfg


def run(model, cfg, batch, prompt_len, new_tokens, label, **gen):
    ids = torch.randint(0, cfg.vocab_size, (batch, prompt_len), device="cuda")
    attn = torch.ones_like(ids)
    with torch.no_grad():
        model.generate(input_ids=ids[:, :16], attention_mask=attn[:, :16], max_new_tokens=4,
                       min_new_tokens=4, do_sample=False, **gen)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, **gen)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    produced = (out.shape[1] - prompt_len) * batch
    rec = dict(label=label, batch=batch, prompt=prompt_len, new=new_tokens, seconds=round(dt, 3),
               output_tok_s=round(produced / dt, 1),
               peak_mem_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2))
    print(json.dumps(rec), flush=True)
    return rec


def main():
    shape = sys.argv[1] if len(sys.argv) > 1 else "llama3-8b"
    model, cfg = build(shape)
    print(json.dumps(dict(shape=shape, params_b=round(sum(p.numel() for p in model.parameters()) / 1e9, 3),
                          torch=torch.__version__, device=torch.cuda.get_device_name())), flush=True)
    runs = [(1, 128, 256), (16, 512, 256), (64, 512, 256)]
    for a in sys.argv:
        if a.startswith("--runs="):
            runs = [tuple(int(x) for x in r.split(":")) for r in a[len("--runs="):].split(",")]
    for bs, prompt, new in runs:
        run(model, cfg, bs, prompt, new, f"{shape} eager bs{bs} {prompt}/{new}")
    if "--compile" in sys.argv:
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        run(model, cfg, 1, 128, 256, f"{shape} static+compile bs1", cache_implementation="static")


if __name__ == "__main__":
    main()
