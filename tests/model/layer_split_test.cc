// Layer splits (runtime/split_executor.h, model/layer_range_ops.h) on the CPU: two CPU executors,
// layers [0, N) and [N, L), give the logits of the one executor of the whole model within f32
// rounding (the boundary adds the last projection into the residual before the next norm instead
// of inside it), for every N, over prefill, decode and mixed steps that reuse the cached K/V of
// both parts, at batch 2. The CUDA first part is tests/gpu/cuda_engine_test.cc's.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/layer_range_ops.h"
#include "model/model_loader.h"
#include "runtime/model_executor.h"
#include "runtime/split_executor.h"
#include "test_paths.h"

namespace pagoda {
namespace {

// Three steps over two sequences (blocks {1, 2} and {3, 4}, 16 tokens a block): a prefill of 5
// and 9 tokens (every token's logits for the second), a decode of each, then a prefill chunk of 3
// for the first and a decode for the second.
std::vector<ForwardBatch> steps(int64_t vocab) {
  auto tok = [&](int i) { return static_cast<int32_t>((i * 37 + 11) % vocab); };
  std::vector<int32_t> a, b;
  for (int i = 0; i < 5; ++i) a.push_back(tok(i));
  for (int i = 0; i < 9; ++i) b.push_back(tok(100 + i));
  std::vector<ForwardBatch> out(3);
  out[0].add_sequence(a, 5, {1, 2}, 16);
  out[0].add_sequence(b, 9, {3, 4}, 16, true, true);
  out[1].add_sequence({tok(7)}, 6, {1, 2}, 16);
  out[1].add_sequence({tok(8)}, 10, {3, 4}, 16);
  out[2].add_sequence({tok(1), tok(2), tok(3)}, 9, {1, 2}, 16);
  out[2].add_sequence({tok(9)}, 11, {3, 4}, 16);
  return out;
}

int64_t argmax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return best;
}

TEST(LayerSplit, CpuPartsMatchTheWholeModel) {
  for (const std::string name : {"llama3/model-f32.gguf", "gemma2/model-f32.gguf", "gemma3/model-f32.gguf",
                                 "qwen3-moe/model-f32.gguf", "phi3/model-f32.gguf", "qwen2/model-f32.gguf"}) {
    SCOPED_TRACE(name);
    auto m = load_model(test::models_dir() + "/tiny/" + name);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    const Model& model = *m->model;
    const int64_t L = model.config().num_layers, V = model.config().vocab_size;
    ThreadPool pool(2);
    KvCacheSpec spec;
    spec.num_blocks = 8;
    spec.block_size = 16;
    spec.dtype = DType::kF32;
    const std::vector<ForwardBatch> batches = steps(V);
    // The whole model's logits of each step.
    std::vector<std::vector<float>> want;
    {
      auto whole = make_cpu_executor(model, spec, pool);
      for (const ForwardBatch& b : batches) {
        const Tensor& lg = whole->forward(b);
        want.emplace_back(lg.data_as<const float>(), lg.data_as<const float>() + lg.numel());
      }
    }
    for (int64_t n = 1; n < L; ++n) {
      SCOPED_TRACE("N = " + std::to_string(n));
      auto first = make_cpu_executor(model, spec, pool, {0, n});
      auto rest = make_cpu_executor(model, spec, pool, {n, -1});
      // Each part caches only its own layers.
      EXPECT_EQ(first->kv_cache_bytes() + rest->kv_cache_bytes(), make_cpu_executor(model, spec, pool)->kv_cache_bytes());
      EXPECT_LT(first->kv_cache_bytes(), make_cpu_executor(model, spec, pool)->kv_cache_bytes());
      auto split = make_split_executor(std::move(first), std::move(rest), L);
      EXPECT_FALSE(split->samples_on_device());
      EXPECT_FALSE(split->set_hidden_capture({0}));
      for (size_t s = 0; s < batches.size(); ++s) {
        SCOPED_TRACE("step " + std::to_string(s));
        const Tensor& lg = split->forward(batches[s]);
        ASSERT_EQ(lg.numel(), static_cast<int64_t>(want[s].size()));
        ASSERT_EQ(lg.dim(1), V);
        const float* got = lg.data_as<const float>();
        double max_err = 0, max_ref = 0;
        for (size_t i = 0; i < want[s].size(); ++i) {
          ASSERT_TRUE(std::isfinite(got[i])) << i;
          max_err = std::max(max_err, std::abs(double(got[i]) - want[s][i]));
          max_ref = std::max(max_ref, std::abs(double(want[s][i])));
        }
        EXPECT_LE(max_err, 1e-5 * std::max(1.0, max_ref)) << "max |logit| " << max_ref;
        for (int64_t r = 0; r < lg.dim(0); ++r)
          EXPECT_EQ(argmax(got + r * V, V), argmax(want[s].data() + r * V, V)) << "row " << r;
      }
    }
  }
}

// A part's input: the residual stream exactly when it starts past layer 0.
TEST(LayerSplit, PartsCheckTheirInput) {
  auto m = load_model(test::models_dir() + "/tiny/llama3/model-f32.gguf");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ThreadPool pool(1);
  KvCacheSpec spec;
  spec.num_blocks = 4;
  spec.dtype = DType::kF32;
  ForwardBatch b;
  b.add_sequence({1, 2, 3}, 3, {1}, 16);
  auto first = make_cpu_executor(*m->model, spec, pool, {0, 1});
  const Tensor& residual = first->forward_part(b, nullptr);
  EXPECT_EQ(residual.dim(0), 3);
  EXPECT_EQ(residual.dim(1), m->config.hidden_size);
  EXPECT_DEATH(first->forward(b), "forward_part");
  auto rest = make_cpu_executor(*m->model, spec, pool, {1, -1});
  EXPECT_DEATH(rest->forward_part(b, nullptr), "input residual");
  EXPECT_EQ(rest->forward_part(b, &residual).dim(1), m->config.vocab_size);
  EXPECT_FALSE(LayerRange({0, 0}).valid(2));
  EXPECT_FALSE(LayerRange({1, 3}).valid(2));
  EXPECT_TRUE(LayerRange({1, -1}).valid(2));
}

}  // namespace
}  // namespace pagoda
