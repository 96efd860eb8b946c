// `pagoda quantize IN OUT`: a 16-bit (or f32) Hugging Face checkpoint written as a quantized one
// (GPTQ, AWQ GEMM, compressed-tensors pack-quantized or FP8; loader/packed_int_writer.h) that
// Pagoda, transformers and vLLM load.
//
// OUT (created; refused when it exists and is not empty) receives
//   config.json        IN's config.json plus "quantization_config"
//   model.safetensors  every decoder linear (model/online_quantization.h: quantizable_linear, the
//                      family's tensor table) packed by round to nearest; every other tensor
//                      (embeddings, lm_head, norms, biases, routers) copied byte for byte
//   the other files of IN (tokenizer, generation config, chat template), copied
// The tensors are made one module at a time (memory: one module's f32 rows and codes).
// Refused with the tensor's name: an IN that is already quantized, a linear in another dtype than
// f32 / f16 / bf16, a group size that does not divide a linear's inputs, a GGUF or lone file.
//
// Thread-safety: a function of its arguments (writes OUT).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"
#include "loader/packed_int_writer.h"

namespace pagoda {

struct QuantizeCheckpointReport {
  int64_t linears = 0;        // modules packed
  int64_t input_bytes = 0;    // IN's tensors
  int64_t output_bytes = 0;   // OUT's model.safetensors data
};

// progress(done, total): linears packed so far of all, on the calling thread; may be empty.
Result<QuantizeCheckpointReport> quantize_checkpoint(const std::string& in_dir, const std::string& out_dir,
                                                     const PackedIntSpec& spec,
                                                     const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace pagoda
