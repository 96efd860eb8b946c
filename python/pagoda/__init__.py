"""Pagoda's Python API: offline batches on the C++ engine of `pagoda serve` (vLLM's LLM class).

    import pagoda
    llm = pagoda.LLM("models/SmolLM2-135M-Instruct.Q4_1.gguf")
    outs = llm.generate(["Hello", "The capital of France is"], pagoda.SamplingParams(temperature=0, max_tokens=32))
    print(outs[0].outputs[0].text)    # or outs[0].text
    for delta in llm.stream(["Once upon a time"]):
        print(delta.outputs[0].text, end="", flush=True)
    llm.chat([{"role": "user", "content": "Hi!"}])[0].text

The implementation is src/offline/llm.h (C++), bound in python/pagoda_binding.cc; docs/python.md.
"""
from ._pagoda import (
    LLM,
    CompletionOutput,
    GenerationStream,
    Logprob,
    RequestOutput,
    SamplingParams,
    __version__,
    set_log_level,
)

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "GenerationStream", "Logprob",
           "set_log_level", "__version__"]
