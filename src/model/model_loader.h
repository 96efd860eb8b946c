// Loading a model from a path: a .gguf file or a Hugging Face directory (config.json +
// safetensors). Reads the hyper-parameters, opens the weights (memory-mapped, never copied unless a
// kernel asks for a repacked layout) and builds the family's forward model. With
// LoadFormat::kDummy the path is a config.json (or a directory holding one) and the weights are
// random (model/random_weights.h).
#pragma once

#include <functional>

#include <memory>
#include <string>

#include "loader/weight_source.h"
#include "model/family.h"
#include "model/load_format.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/online_quantization.h"

namespace pagoda {

struct ModelLoadOptions {
  // Longest sequence the engine will run (RoPE table size); 0: the model's trained context.
  int64_t max_model_len = 0;
  // Prepare (repack) the weights for the CPU kernels. A device executor reads the original
  // tensors and skips this (no packed host copies of the weights).
  bool cpu_kernels = true;
  // A layer split (--n-gpu-layers N): with cpu_kernels, only the layers >= N and the output head are
  // prepared for the CPU, the first N stay views for the device; N >= the model's layers: none
  // (as cpu_kernels = false).
  int64_t cpu_kernels_from_layer = 0;
  // Threads that read and prepare the weights (0: one per core).
  int load_threads = 0;
  // On-line quantization of a 16-bit / f32 checkpoint's decoder linears (model/online_quantization.h);
  // the precheck sees the quantized bytes. An already-quantized checkpoint is a load error.
  // FP8 weights (F8E4M3Rows: FP8 checkpoints with per-tensor / per-channel scales, --quantization
  // fp8) stay FP8 when no layer is prepared for the CPU (cpu_kernels false, or from a layer past the
  // last: the device reads them); otherwise they become bf16(scale x e4m3) rows, D56's values.
  WeightQuantization quantization = WeightQuantization::kNone;
  // kDummy: random weights of the config.json's shape (bf16, or f16 when its torch_dtype says so;
  // seed 0), then everything above as for a checkpoint. A GGUF path is an invalid-argument error.
  LoadFormat load_format = LoadFormat::kAuto;
  // Called on the loading thread as tensors are read (and repacked): bytes done of the source's
  // total; the last call has done == total. Empty: no reports.
  std::function<void(int64_t done, int64_t total)> progress;
  // Called with the checkpoint's config, its weight bytes and the max_model_len chosen above, after
  // the config is validated and before the model (its RoPE table, packed weights) is built: a
  // non-ok Status stops the load (the engine passes its memory-plan check).
  std::function<Status(const ModelConfig&, int64_t weight_bytes, int64_t max_model_len)> precheck;
  // The engine plan's packed CPU weights (ModelLoadParams::packed_in / packed_out / packed_counts).
  const PlanFile* packed_in = nullptr;
  PlanWriter* packed_out = nullptr;
  ModelLoadParams::PackedCounts* packed_counts = nullptr;
  // Tensor parallelism (docs/decisions.md D78): rank `tensor_parallel_rank` of
  // `tensor_parallel_size` builds its model from its shards only (model/tensor_parallel_source.h,
  // cut after any on-line quantization, on the weights' quantization blocks).
  int tensor_parallel_size = 1;
  int tensor_parallel_rank = 0;
};

// Where a tensor-parallel rank's model sits in the whole model (size 1: it is the whole model).
struct TensorParallelPart {
  int size = 1, rank = 0;
  int64_t vocab_begin = 0;          // the rank's embedding and output-head rows start here
  int64_t vocab_rows_per_rank = 0;  // TensorParallelPlan::vocab_rows_per_rank
};

struct LoadedModel {
  ModelConfig config;  // the whole model's (under tensor parallelism model->config() is the rank's)
  std::unique_ptr<WeightSource> weights;  // keeps the mapped files alive (a rank: its shards)
  std::unique_ptr<Model> model;
  int64_t max_model_len = 0;
  TensorParallelPart tensor_parallel;
};

// Hyper-parameters of the checkpoint at `source` (GGUF metadata or config.json).
Result<ModelConfig> model_config_from_source(const WeightSource& source);

// parameter_footprint (model/family.h) of the tensors `source` holds for `config`.
ParameterFootprint checkpoint_footprint(const ModelConfig& config, const WeightSource& source);

// The config.json a path names: a directory's, or the path itself when it ends in ".json"; ""
// otherwise (a GGUF file, a lone .safetensors file).
std::string config_json_path(const std::string& path);

// Only the configuration (no weights are validated or prepared): for `info` and memory plans.
// `path`: a .gguf file, a directory holding config.json (no weight file needed), or a .json file.
Result<ModelConfig> load_model_config(const std::string& path);

// The hyper-parameters and the weights of `path` as `format` reads them (auto: the checkpoint's
// mapped tensors; dummy: random weights of its config.json's shape, made on `threads` threads),
// without validating or preparing anything: what load_model starts from, and `pagoda info`.
struct OpenedCheckpoint {
  ModelConfig config;
  std::unique_ptr<WeightSource> weights;
};
Result<OpenedCheckpoint> open_checkpoint(const std::string& path, LoadFormat format, int threads);

Result<LoadedModel> load_model(const std::string& path, const ModelLoadOptions& options = {});

}  // namespace pagoda
