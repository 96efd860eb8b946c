// Random weights of a real model's shape (`--load-format dummy`, model/load_format.h): a
// WeightSource that holds every required tensor the config's family declares, under its Hugging
// Face name and shape (a stacked expert declaration: one tensor per expert), generated in host
// memory at load, so that a model of any size can be benchmarked without a checkpoint file.
//
// Values: 1-d tensors whose name contains "norm" are 1.0 (each in memory of its own); every other
// tensor is a view into one shared pool of N(0, 0.02) values (transformers' initializer_range), the
// pool being the largest such tensor's bytes plus 64 MiB long, each tensor starting at its own
// 256-byte-aligned offset chosen from a hash of its name (distinct tensors read different values,
// and no two start at the same address, so pointer-identity checks such as the tied-embedding
// test see distinct tensors). Host memory is therefore about the largest tensor, not the model.
//
// The pool's element i is a function of (seed, i) alone (splitmix64, then the sum of four 16-bit
// uniforms, Irwin-Hall, scaled to unit variance): the bytes do not depend on the thread count.
//
// The memory is a memfd mapped shared and read-only: MADV_DONTNEED (release_mapped_pages, which
// the CPU weight preparation calls on tensors it repacked) drops only this mapping's pages, the
// data stays for the other views that overlap them. The tensors keep the mapping alive.
//
// Thread-safety: the source is immutable after construction; concurrent reads are fine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "common/dtype.h"
#include "common/status.h"
#include "loader/weight_source.h"
#include "model/model_config.h"

namespace pagoda {

// The dtype random weights take for a config.json object: f16 when its torch_dtype (transformers
// 4.x) or dtype (5.x) is "float16", else bf16 (an f32 checkpoint's shape is benchmarked in bf16).
DType random_weight_dtype(const nlohmann::json& config_json);

// Format WeightFormat::kRandom, path() == `path`. `dtype`: kBF16 or kF16 (else invalid-argument).
// threads <= 0: one per core.
Result<std::unique_ptr<WeightSource>> make_random_weight_source(const ModelConfig& config, const std::string& path,
                                                                DType dtype, uint64_t seed, int threads);

}  // namespace pagoda
