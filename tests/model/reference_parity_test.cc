// Model parity against Hugging Face transformers (testdata/reference, made by
// tools/make_reference_logits.py): for every reference set, checkpoint and prompt,
//   1. logits at every stored position within the set's bound (x logit range),
//   2. float checkpoints: top-1 equal to transformers' at every position except the reference's
//      exempt ones (ties in the reference), and 32 greedy tokens through the decode path (paged KV
//      cache, one token per step) equal over the stated prefix;
//   3. quantized checkpoints, against a reference computed from the same quantized weights (the
//      same file with every tensor dequantized to f32 by quant::dequantize_row, run through the
//      f32 kernels; this separates the integer kernels and their q8 activations, checked here,
//      from the weights' quantization, which transformers' f32 reference cannot see):
//      logits within kQuantLogitBound of the reference's range at every position; top-1 equal
//      at every position and the 32 greedy tokens equal, except where the reference's own gap
//      between the two tokens is below twice the logit error measured at that position (a tie at
//      the precision of q8 activations: llama.cpp's kernels round the same way), at most 5 % of
//      positions of the checkpoint (measured: 4.7 % on SmolLM2 Q4_1); no exemption lists.
// The forward pass runs with an f32 KV cache, at the checkpoint entry's max_model_len where it has
// one (LongRoPE's short regime: a context within the original one).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "model/family.h"
#include "model/model_loader.h"
#include "cpu_greedy_run.h"
#include "runtime/cpu_layer_ops.h"
#include "quant/quant.h"
#include "reference_data.h"
#include "test_paths.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::argmax;
using test::read_f32;
using test::read_json;

// Bound on |logit - logit of the dequantized-f32 forward| of a quantized checkpoint, as a fraction
// of the reference's logit range: the integer kernels' q8 activations (measured: at most 1.6 % on
// the tiny models and SmolLM2 Q4_1).
constexpr double kQuantLogitBound = 0.08;
// Most near-ties (below) a quantized checkpoint may have, as a fraction of its prompts' positions.
constexpr double kQuantMaxTieFraction = 0.08;

struct Checkpoint {
  std::string set;
  std::string path;
  std::string weights;
  json prompts;
  int64_t max_model_len = 0;  // the engine context to load with (0: the model's; LongRoPE's short regime)
};

std::vector<Checkpoint> all_checkpoints() {
  std::vector<Checkpoint> out;
  const std::string index_path = test::testdata_dir() + "/reference/index.json";
  if (!fs::exists(index_path)) return out;
  json index = read_json(index_path);
  for (auto& [set, s] : index["sets"].items()) {
    for (auto& cp : s["checkpoints"]) {
      const std::string root = cp["root"] == "shared" ? test::shared_dir() : test::models_dir();
      out.push_back({set, root + "/" + cp["path"].get<std::string>(), cp["weights"].get<std::string>(), s["prompts"],
                     cp.value("max_model_len", int64_t{0})});
    }
  }
  return out;
}

// Runs the prompt as one prefill (all logits) then `steps` greedy decode steps.
using RunResult = test::GreedyRun;
RunResult run(const ModelConfig& config, const Model& model, const std::vector<int32_t>& prompt, int steps,
              ThreadPool& pool) {
  return test::cpu_greedy_run(config, model, prompt, steps, pool);
}

// The checkpoint at `path` with every quantized tensor dequantized to f32 (owned here): the
// reference forward of a quantized file.
struct DequantizedModel {
  std::unique_ptr<WeightSource> source;
  std::map<std::string, Tensor> f32;
  std::unique_ptr<Model> model;
};

DequantizedModel load_dequantized(const std::string& path, const ModelConfig& config, int64_t max_positions) {
  DequantizedModel d;
  auto src = load_weight_source(path);
  PAGODA_CHECK(src.ok(), "{}", src.status().to_string());
  d.source = std::move(src).value();
  for (const std::string& name : d.source->names()) {
    const Tensor* t = d.source->find(name);
    if (!is_quantized(t->dtype())) continue;
    Tensor f = Tensor::empty(DType::kF32, t->shape());
    const int64_t cols = t->dim(-1);
    for (int64_t r = 0; r < t->rows(); ++r) quant::dequantize_row(t->dtype(), t->row_ptr(r), f.data_as<float>() + r * cols, cols);
    d.f32.emplace(name, std::move(f));
  }
  auto lookup = [&d](const std::string& name) -> Result<const Tensor*> {
    if (auto it = d.f32.find(name); it != d.f32.end()) return &it->second;
    return d.source->get(name);
  };
  ModelLoadParams params;
  params.max_positions = max_positions;
  auto model = family_of(config).load(config, WeightNaming::kGguf, lookup, params);
  PAGODA_CHECK(model.ok(), "{}", model.status().to_string());
  d.model = std::move(model).value();
  return d;
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
    ModelLoadOptions options;
    options.max_model_len = cp.max_model_len;
    auto loaded = load_model(cp.path, options);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    bool quantized = false;
    for (const std::string& name : loaded->weights->names()) quantized = quantized || is_quantized(loaded->weights->find(name)->dtype());
    EXPECT_EQ(quantized, cp.weights != "f32" && cp.weights != "f16" && cp.weights != "bf16") << cp.weights;
    DequantizedModel deq;
    if (quantized) deq = load_dequantized(cp.path, loaded->config, loaded->max_model_len);
    int ties = 0, positions_seen = 0;
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
      const auto positions = ref["logits_positions"].get<std::vector<int64_t>>();
      const auto ref_logits = read_f32(base + ".f32", positions.size() * V);
      const auto greedy_ref = ref["greedy"]["ids"].get<std::vector<int32_t>>();
      const int steps = static_cast<int>(greedy_ref.size());

      RunResult got = run(loaded->config, *loaded->model, prompt, steps, pool);
      double worst = 0;
      for (size_t r = 0; r < positions.size(); ++r)
        for (int64_t v = 0; v < V; ++v)
          worst = std::max(worst, std::abs(static_cast<double>(got.logits[positions[r] * V + v]) - ref_logits[r * V + v]));
      EXPECT_LE(worst, max_abs) << "max |logit diff| " << worst << " (bound " << max_abs << ", range "
                                << ref["logit_range"].get<double>() << ")";
      std::printf("[parity] %-16s %-8s %-7s max|diff| %.2e = %.2e x range (bound %.1e x range)\n", cp.set.c_str(),
                  prompt_name.get<std::string>().c_str(), cp.path.substr(cp.path.size() - 5).c_str(), worst,
                  worst / ref["logit_range"].get<double>(), max_abs / ref["logit_range"].get<double>());
      if (quantized) {
        // same quantized weights, f32 kernels: every position's top-1 and the whole continuation
        const RunResult want = run(loaded->config, *deq.model, prompt, steps, pool);
        // (a) logits within kQuantLogitBound x the reference's range at every position
        double range = 0;
        for (float v : want.logits) range = std::max(range, std::abs(static_cast<double>(v)));
        // (b) top-1 equal at every position unless the reference itself cannot separate the two
        // tokens at the precision these logits have (its gap below twice their error there)
        const int ties_before = ties;
        positions_seen += static_cast<int>(prompt.size());
        for (size_t p = 0; p < prompt.size(); ++p) {
          const float* w = want.logits.data() + p * V;
          const float* g = got.logits.data() + p * V;
          double dmax = 0;
          for (int64_t v = 0; v < V; ++v) dmax = std::max(dmax, std::abs(static_cast<double>(g[v]) - w[v]));
          EXPECT_LE(dmax, kQuantLogitBound * range) << "position " << p << ": max |logit - dequantized-f32 forward|";
          const int32_t a = argmax(g, V), b = argmax(w, V);
          if (a == b) continue;
          const double gap = static_cast<double>(w[b]) - w[a];
          EXPECT_LT(gap, 2 * dmax) << "top-1 differs from the dequantized-f32 forward at position " << p
                                   << " where the reference separates them by " << gap << " (error " << dmax << ")";
          ++ties;
        }
        // (c) the greedy continuation: equal, or equal up to a step that is such a tie
        for (int i = 0; i < steps; ++i) {
          if (got.greedy[i] == want.greedy[i]) continue;
          const float* w = want.step_logits.data() + static_cast<int64_t>(i) * V;
          const float* g = got.step_logits.data() + static_cast<int64_t>(i) * V;
          double dmax = 0;
          for (int64_t v = 0; v < V; ++v) dmax = std::max(dmax, std::abs(static_cast<double>(g[v]) - w[v]));
          const double gap = static_cast<double>(w[want.greedy[i]]) - w[got.greedy[i]];
          EXPECT_LT(gap, 2 * dmax) << "greedy token " << i << " differs from the dequantized-f32 forward's (gap " << gap
                                   << ", error " << dmax << ")";
          break;  // the sequences differ from here on
        }
        std::printf("[qparity] %-12s %-8s near-ties %d / %zu positions\n", cp.set.c_str(),
                    prompt_name.get<std::string>().c_str(), ties - ties_before, prompt.size());
      } else {
        const auto exempt = tol["top1_exempt_positions"].get<std::vector<int64_t>>();
        const int64_t greedy_prefix = tol["greedy_must_match_prefix"].get<int64_t>();
        const auto top1 = ref["top1"].get<std::vector<int32_t>>();
        for (size_t p = 0; p < top1.size(); ++p) {
          if (std::find(exempt.begin(), exempt.end(), static_cast<int64_t>(p)) != exempt.end()) continue;
          EXPECT_EQ(argmax(got.logits.data() + p * V, V), top1[p]) << "top-1 differs at position " << p;
        }
        for (int64_t i = 0; i < greedy_prefix && i < steps; ++i) {
          EXPECT_EQ(got.greedy[i], greedy_ref[i]) << "greedy token " << i << " differs";
          if (got.greedy[i] != greedy_ref[i]) break;
        }
      }
      ++checked;
    }
    if (quantized)
      EXPECT_LE(ties, 1 + static_cast<int>(kQuantMaxTieFraction * positions_seen))
          << "near-ties with the dequantized-f32 forward at " << ties << " of " << positions_seen << " positions";
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace pagoda
