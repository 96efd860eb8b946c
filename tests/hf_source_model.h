// A model built by its family loader from a WeightSource in Hugging Face naming (random weights,
// a tensor-parallel rank's shards), RoPE tables for 256 positions; null (and a test failure) when
// the loader refuses it.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "loader/weight_source.h"
#include "model/family.h"

namespace pagoda::test {

inline std::unique_ptr<Model> load_hf_model(const ModelConfig& c, const WeightSource& src) {
  TensorLookup lookup = [&src](const std::string& name) { return src.get(name); };
  ModelLoadParams params;
  params.max_positions = 256;
  auto m = family_of(c).load(c, WeightNaming::kHuggingFace, lookup, params);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

}  // namespace pagoda::test
