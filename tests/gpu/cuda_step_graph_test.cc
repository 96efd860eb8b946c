// Verification steps of speculative decoding replayed from CUDA graphs keyed by (batch bucket, rows
// a sequence) (backend/cuda/step_graph_shape.h): the same step through a graph and eagerly, and the
// graph's rows against plain one-token decode steps. Skips with a message when no GPU is present.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_test_util.h"
#include "model/model_loader.h"
#include "runtime/forward_batch.h"
#include "test_paths.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kBlock = 16;

// Steps replayed from verification graphs so far (the executor's profile_report line).
int64_t verify_replays(const ModelExecutor& ex) {
  const std::string r = ex.profile_report();
  const size_t at = r.find("verification graphs:");
  if (at == std::string::npos) return 0;
  const size_t p = r.find("), ", at);
  return p == std::string::npos ? -1 : std::stoll(r.substr(p + 3));
}

std::vector<float> copy_logits(const Tensor& t) { return {t.data_as<float>(), t.data_as<float>() + t.numel()}; }

double logit_range(const std::vector<float>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return static_cast<double>(*hi) - *lo;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double w = 0;
  for (size_t i = 0; i < a.size(); ++i) w = std::max(w, std::abs(static_cast<double>(a[i]) - b[i]));
  return w;
}

struct Case {
  std::string path;
  std::string dtype;  // compute dtype
  DType kv;
  double tol;         // bound on |graph - eager| / logit range in the default mode
};

std::vector<Case> cases() {
  std::vector<Case> c;
  const std::string tiny = test::models_dir() + "/tiny/llama3/model-f32.gguf";
  if (fs::exists(tiny)) c.push_back({tiny, "f32", DType::kF32, 1e-4});
  const std::string dir = test::gpu_ref_dir();
  // bf16: the eager step's attention takes the tensor-core prefill kernel (bf16 P), the graph's
  // the split-KV kernel, and their matmuls see different row counts: each path is within the
  // reference set's bf16 bound of fp32 (CudaParity.Bf16PathMatchesTransformersOnRandomModels), so
  // they are within twice that bound of each other.
  if (!dir.empty() && fs::exists(dir + "/qwen3-bf16/config.json") && fs::exists(dir + "/index.json")) {
    std::ifstream f(dir + "/index.json");
    const nlohmann::json index = nlohmann::json::parse(f);
    const double bound = index["sets"]["qwen3-bf16"]["bound_relative_to_range"].get<double>();
    c.push_back({dir + "/qwen3-bf16", "bf16", DType::kBF16, 2 * bound});
  }
  return c;
}

// Sequence s: a prompt of prompt_len[s] tokens, blocks [1 + 16 s, ...).
const int32_t kPromptLen[3] = {40, 23, 61};
std::vector<int32_t> table_of(int s) {
  std::vector<int32_t> t;
  for (int b = 0; b < 8; ++b) t.push_back(1 + 16 * s + b);
  return t;
}
int32_t token(int64_t i, int64_t vocab) { return static_cast<int32_t>(3 + (i * 37) % std::min<int64_t>(500, vocab - 3)); }

// A verification step: sequence s gets new[s] tokens (0: not in the batch) after its prompt,
// logits at every new token.
ForwardBatch verification(const std::vector<int>& fresh, int64_t vocab) {
  ForwardBatch b;
  for (int s = 0; s < static_cast<int>(fresh.size()); ++s) {
    if (fresh[s] == 0) continue;
    std::vector<int32_t> ids;
    for (int j = 0; j < fresh[s]; ++j) ids.push_back(token(1000 + 10 * s + j, vocab));
    b.add_sequence(ids, kPromptLen[s] + fresh[s], table_of(s), kBlock, true, true);
  }
  return b;
}

// Graph and eager runs of the same verification steps (uniform, mixed draft counts with a padding
// sequence, batch 1): identical logits in batch-invariant mode, within `tol` x range otherwise;
// in batch-invariant mode also identical to one-token decode steps of the same tokens (what greedy
// identity of speculative and plain decoding rests on). Lazy and start-up capture.
TEST(CudaStepGraphs, VerificationGraphsMatchEagerStepsAndPlainDecoding) {
  PAGODA_REQUIRE_GPU();
  const auto all = cases();
  if (all.empty()) GTEST_SKIP() << "no test model";
  for (const Case& c : all) {
    for (bool invariant : {true, false}) {
      for (const char* capture : {"lazy", "start"}) {
        if (!invariant && std::string(capture) == "start") continue;
        const std::string label = fmt::format("{} invariant {} capture {}", c.path, invariant, capture);
        ModelLoadOptions lo;
        lo.cpu_kernels = false;
        auto m = load_model(c.path, lo);
        ASSERT_TRUE(m.ok()) << m.status().to_string();
        const int64_t V = m->config.vocab_size;
        KvCacheSpec spec;
        spec.num_blocks = 3 * 16 + 2;
        spec.block_size = kBlock;
        spec.dtype = c.kv;
        CudaExecutorOptions co;
        co.dtype = c.dtype;
        co.max_num_tokens = 256;
        co.max_num_seqs = 32;  // buckets 1, 2, 4, 8, 16, 24, 32: verification graphs up to 32 tokens
        co.max_model_len = 128;
        co.batch_invariant = invariant;
        co.tuning.graph_capture = capture;
        auto ex = make_cuda_executor(*m->model, spec, co);
        ASSERT_TRUE(ex.ok()) << ex.status().to_string();
        ModelExecutor& e = **ex;
        // The prompts, eagerly.
        ForwardBatch pre;
        for (int s = 0; s < 3; ++s) {
          std::vector<int32_t> ids;
          for (int i = 0; i < kPromptLen[s]; ++i) ids.push_back(token(100 * s + i, V));
          pre.add_sequence(ids, kPromptLen[s], table_of(s), kBlock);
        }
        e.forward(pre);
        const std::vector<std::vector<int>> steps = {{5, 5, 5}, {5, 1, 3}, {0, 0, 5}, {2, 0, 0}};
        for (const std::vector<int>& fresh : steps) {
          const ForwardBatch b = verification(fresh, V);
          ASSERT_TRUE(e.set_graphs_enabled(true));
          const int64_t before = verify_replays(e);
          const std::vector<float> g = copy_logits(e.forward(b));
          EXPECT_EQ(verify_replays(e), before + 1) << label << ": the step did not replay a verification graph";
          const std::vector<float> g2 = copy_logits(e.forward(b));  // a second replay of the same inputs
          e.set_graphs_enabled(false);
          const std::vector<float> x = copy_logits(e.forward(b));
          EXPECT_EQ(verify_replays(e), before + 2) << label;
          ASSERT_EQ(g.size(), x.size());
          ASSERT_EQ(g.size(), b.logits_rows.size() * static_cast<size_t>(V));
          EXPECT_EQ(0, std::memcmp(g.data(), g2.data(), g.size() * 4)) << label << ": two replays differ";
          const double diff = max_abs_diff(g, x), range = logit_range(x);
          if (invariant) EXPECT_EQ(0, std::memcmp(g.data(), x.data(), g.size() * 4)) << label << ": max|diff| " << diff;
          else EXPECT_LE(diff, c.tol * range) << label;
          std::printf("[verify-graph] %s rows {%d,%d,%d}: max|graph - eager| %.2e = %.2e x range\n", label.c_str(),
                      fresh[0], fresh[1], fresh[2], diff, diff / range);
        }
        if (!invariant) continue;
        // Plain decoding of the last sequence's 5 tokens, one a step (decode graphs), against the
        // rows of its verification step.
        e.set_graphs_enabled(true);
        const ForwardBatch vb = verification({0, 0, 5}, V);
        const std::vector<float> g = copy_logits(e.forward(vb));
        for (int j = 0; j < 5; ++j) {
          ForwardBatch d;
          d.add_sequence({vb.token_ids[j]}, kPromptLen[2] + j + 1, table_of(2), kBlock);
          const std::vector<float> row = copy_logits(e.forward(d));
          ASSERT_EQ(row.size(), static_cast<size_t>(V));
          EXPECT_EQ(0, std::memcmp(row.data(), g.data() + j * V, static_cast<size_t>(V) * 4))
              << label << ": decode step " << j << " differs from its verification row, max|diff| "
              << max_abs_diff(row, std::vector<float>(g.begin() + j * V, g.begin() + (j + 1) * V));
        }
      }
    }
  }
}

}  // namespace
}  // namespace pagoda
