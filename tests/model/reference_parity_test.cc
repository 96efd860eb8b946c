// Model parity against Hugging Face transformers (testdata/reference, made by
// tools/make_reference_logits.py): for every reference set, checkpoint and prompt,
//   1. logits at every stored position within the set's bound (x logit range),
//   2. top-1 equal at every position except the reference's exempt ones,
//   3. 32 greedy tokens through the decode path (paged KV cache, one token per step) equal to the
//      reference's greedy ids over the stated prefix.
// The forward pass runs with an f32 KV cache; quantized checkpoints use the quantized-activation
// tolerance (our integer kernels round activations to q8 blocks, as llama.cpp's do).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/model_loader.h"
#include "runtime/cpu_layer_ops.h"
#include "reference_data.h"
#include "test_paths.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::argmax;
using test::read_f32;
using test::read_json;

struct Checkpoint {
  std::string set;
  std::string path;
  std::string weights;
  json prompts;
};

std::vector<Checkpoint> all_checkpoints() {
  std::vector<Checkpoint> out;
  const std::string index_path = test::testdata_dir() + "/reference/index.json";
  if (!fs::exists(index_path)) return out;
  json index = read_json(index_path);
  for (auto& [set, s] : index["sets"].items()) {
    for (auto& cp : s["checkpoints"]) {
      const std::string root = cp["root"] == "shared" ? test::shared_dir() : test::models_dir();
      out.push_back({set, root + "/" + cp["path"].get<std::string>(), cp["weights"].get<std::string>(), s["prompts"]});
    }
  }
  return out;
}

// Runs the prompt as one prefill (all logits) then `steps` greedy decode steps.
struct RunResult {
  std::vector<float> logits;  // [T, V]
  std::vector<int32_t> greedy;
};

RunResult run(const LoadedModel& m, const std::vector<int32_t>& prompt, int steps, ThreadPool& pool) {
  const int64_t bs = 16;
  const int64_t total = static_cast<int64_t>(prompt.size()) + steps;
  const int64_t nblocks = (total + bs - 1) / bs + 1;
  KvCacheStorage kv(m.config, nblocks + 3, bs, DType::kF32);
  // A scrambled block table (distinct blocks, descending, skipping some): blocks need not be
  // contiguous or in order.
  std::vector<int32_t> table;
  for (int64_t b = 0; b < nblocks; ++b) table.push_back(static_cast<int32_t>(nblocks + 2 - b));
  ForwardWorkspace ws;
  Tensor logits;
  ForwardBatch batch;
  batch.add_sequence(prompt, static_cast<int32_t>(prompt.size()), table, bs, true, /*want_all_logits=*/true);
  cpu_forward(*m.model, batch, kv, ws, logits, pool);
  RunResult r;
  const int64_t V = m.config.vocab_size;
  r.logits.assign(logits.data_as<float>(), logits.data_as<float>() + logits.numel());
  int32_t next = argmax(r.logits.data() + (prompt.size() - 1) * V, V);
  int32_t ctx = static_cast<int32_t>(prompt.size());
  for (int s = 0; s < steps; ++s) {
    r.greedy.push_back(next);
    batch.clear();
    batch.add_sequence({next}, ++ctx, table, bs);
    cpu_forward(*m.model, batch, kv, ws, logits, pool);
    next = argmax(logits.data_as<float>(), V);
  }
  return r;
}

TEST(ReferenceParity, EveryArchitectureMatchesTransformers) {
  const auto checkpoints = all_checkpoints();
  ASSERT_FALSE(checkpoints.empty()) << "no reference index under " << test::testdata_dir() << "/reference";
  ThreadPool pool(2);
  int checked = 0;
  for (const auto& cp : checkpoints) {
    SCOPED_TRACE(cp.set + " @ " + cp.path);
    if (!fs::exists(cp.path)) {
      ADD_FAILURE() << "checkpoint missing: " << cp.path << " (run scripts/setup.sh: it fetches SmolLM2 and makes the tiny models)";
      continue;
    }
    auto loaded = load_model(cp.path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    const bool quantized = cp.weights == "q8_0" || cp.weights == "q4_0" || cp.weights == "q4_1";
    for (const auto& prompt_name : cp.prompts) {
      const std::string base = test::testdata_dir() + "/reference/" + cp.set + "/" + prompt_name.get<std::string>();
      SCOPED_TRACE("prompt " + prompt_name.get<std::string>());
      json ref = read_json(base + ".json");
      const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
      const int64_t V = ref["vocab_size"].get<int64_t>();
      ASSERT_EQ(V, loaded->config.vocab_size);
      const json& tol = quantized && !ref["tolerance_quantized_activations"].is_null() ? ref["tolerance_quantized_activations"]
                                                                                       : ref["tolerance"];
      const double max_abs = tol["max_abs_diff"].get<double>();
      const auto exempt = tol["top1_exempt_positions"].get<std::vector<int64_t>>();
      const int64_t greedy_prefix = tol["greedy_must_match_prefix"].get<int64_t>();
      const auto positions = ref["logits_positions"].get<std::vector<int64_t>>();
      const auto ref_logits = read_f32(base + ".f32", positions.size() * V);
      const auto top1 = ref["top1"].get<std::vector<int32_t>>();
      const auto greedy_ref = ref["greedy"]["ids"].get<std::vector<int32_t>>();

      RunResult got = run(*loaded, prompt, static_cast<int>(greedy_ref.size()), pool);
      double worst = 0;
      for (size_t r = 0; r < positions.size(); ++r)
        for (int64_t v = 0; v < V; ++v)
          worst = std::max(worst, std::abs(static_cast<double>(got.logits[positions[r] * V + v]) - ref_logits[r * V + v]));
      EXPECT_LE(worst, max_abs) << "max |logit diff| " << worst << " (bound " << max_abs << ", range "
                                << ref["logit_range"].get<double>() << ")";
      for (size_t p = 0; p < top1.size(); ++p) {
        if (std::find(exempt.begin(), exempt.end(), static_cast<int64_t>(p)) != exempt.end()) continue;
        EXPECT_EQ(argmax(got.logits.data() + p * V, V), top1[p]) << "top-1 differs at position " << p;
      }
      std::printf("[parity] %-16s %-8s %-7s max|diff| %.2e = %.2e x range (bound %.1e x range)\n", cp.set.c_str(),
                  prompt_name.get<std::string>().c_str(), cp.path.substr(cp.path.size() - 5).c_str(), worst,
                  worst / ref["logit_range"].get<double>(), max_abs / ref["logit_range"].get<double>());
      for (int64_t i = 0; i < greedy_prefix && i < static_cast<int64_t>(greedy_ref.size()); ++i) {
        EXPECT_EQ(got.greedy[i], greedy_ref[i]) << "greedy token " << i << " differs";
        if (got.greedy[i] != greedy_ref[i]) break;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace pagoda
