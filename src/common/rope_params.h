// Rotary position embedding parameters, shared by the model config (which parses them), the RoPE
// table (ops/rope.h) and the reference kernels.
#pragma once

#include <cstdint>

namespace pagoda {

// How rotary position embedding pairs up the dimensions of a head.
enum class RopeLayout {
  kInterleaved,  // pairs (2i, 2i+1): Meta/llama2.c checkpoints, GGUF from the llama converters
  kHalfSplit,    // pairs (i, i + d/2): HF transformers checkpoints ("NeoX" style)
};
inline const char* rope_layout_name(RopeLayout l) { return l == RopeLayout::kInterleaved ? "interleaved" : "half-split"; }

struct RopeScaling {
  // kLongRope (Phi-3 "longrope" / "su"): every frequency divided by its own factor, from one of
  // two lists (long when the engine's context exceeds original_max_position, else short; the
  // lists are config.json's short_factor / long_factor or GGUF's rope_factors_* tensors and come
  // to the table as its freq_factors), and cos / sin multiplied by attention_factor.
  enum class Kind { kNone, kLinear, kLlama3, kLongRope };
  Kind kind = Kind::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;            // llama3
  double high_freq_factor = 4.0;           // llama3
  int64_t original_max_position = 8192;    // llama3, longrope
  double attention_factor = 1.0;           // longrope: cos / sin scale
};

// What the RoPE table is computed from.
struct RopeSpec {
  int64_t rope_dim = 0;  // rotated dimensions per head
  double theta = 10000.0;
  RopeLayout layout = RopeLayout::kHalfSplit;
  RopeScaling scaling;
};

}  // namespace pagoda
