// The families this build runs (each defined in its own file here; registered in model/family.cc).
#pragma once

#include "model/family.h"

namespace pagoda {

// Llama 1-3.x, Mistral, Qwen2/2.5, Qwen3, SmolLM, TinyLlama (families/llama.cc).
const Family& llama_family();
// Gemma 2, Gemma 3 text (families/gemma.cc).
const Family& gemma_family();
// Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE (families/moe.cc).
const Family& moe_family();
// Phi-3, Phi-3.5-mini, Phi-4, Phi-4-mini (families/phi3.cc).
const Family& phi3_family();

}  // namespace pagoda
