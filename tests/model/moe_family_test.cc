// The mixture-of-experts family beyond the parity run (reference_parity_test.cc runs the mixtral,
// qwen2-moe, qwen3-moe and olmoe sets, the "same16" prompt among them): config parsing in both
// formats, routing coverage of the tiny models (a 100-token prompt reaches every expert of every
// layer; a prompt of one repeated token reaches exactly top-k experts per layer, all tokens each),
// the footprint `pagoda info` reports, and that the parity check can fail (dropping the
// renormalisation or the shared expert, or routing to fewer experts, moves the logits past the
// bound).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "loader/weight_source.h"
#include "model/family.h"
#include "model/model_loader.h"
#include "runtime/cpu_layer_ops.h"
#include "reference_data.h"
#include "test_paths.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string tiny(const std::string& rel) { return test::models_dir() + "/tiny/" + rel; }

const char* const kModels[] = {"mixtral", "qwen2-moe", "qwen3-moe", "olmoe"};

struct Prefill {
  std::vector<float> logits;                      // [T, V]
  std::vector<std::vector<int64_t>> expert_tokens;  // [layer][expert]
};

Prefill prefill(const ModelConfig& c, const Model& model, const std::vector<int32_t>& prompt) {
  const int64_t bs = 16;
  const int64_t nblocks = (static_cast<int64_t>(prompt.size()) + bs - 1) / bs;
  KvCacheStorage kv(c, nblocks, bs, DType::kF32);
  std::vector<int32_t> table;
  for (int64_t b = 0; b < nblocks; ++b) table.push_back(static_cast<int32_t>(b));
  ForwardBatch batch;
  batch.add_sequence(prompt, static_cast<int32_t>(prompt.size()), table, bs, true, /*want_all_logits=*/true);
  ForwardWorkspace ws;
  Tensor logits;
  ThreadPool pool(2);
  Prefill out;
  // The hook runs after each layer's last op: the scratch then holds that layer's routing.
  cpu_forward(model, batch, kv, ws, logits, pool,
              [&](int64_t, const Tensor&) { out.expert_tokens.push_back(ws.moe.expert_tokens); });
  out.logits.assign(logits.data_as<float>(), logits.data_as<float>() + logits.numel());
  return out;
}

std::vector<int32_t> prompt_of(const std::string& set, const std::string& prompt) {
  return test::read_json(test::testdata_dir() + "/reference/" + set + "/" + prompt + ".json")["prompt_ids"]
      .get<std::vector<int32_t>>();
}

TEST(MoeFamily, ConfigOfBothFormatsAgrees) {
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    if (!fs::exists(tiny(std::string(name) + "/model-f32.gguf"))) GTEST_FAIL() << "tiny MoE models missing: run scripts/make_test_models.sh";
    auto hf = load_model_config(tiny(name));
    auto gg = load_model_config(tiny(std::string(name) + "/model-f32.gguf"));
    ASSERT_TRUE(hf.ok()) << hf.status().to_string();
    ASSERT_TRUE(gg.ok()) << gg.status().to_string();
    EXPECT_EQ(hf->family, gg->family);
    EXPECT_TRUE(hf->is_moe());
    EXPECT_EQ(hf->num_experts, gg->num_experts);
    EXPECT_EQ(hf->num_experts_per_tok, gg->num_experts_per_tok);
    EXPECT_EQ(hf->expert_intermediate_size, gg->expert_intermediate_size);
    EXPECT_EQ(hf->norm_topk_prob, gg->norm_topk_prob);
    EXPECT_EQ(hf->shared_expert_intermediate_size, gg->shared_expert_intermediate_size);
    EXPECT_EQ(hf->attention_bias, gg->attention_bias);
    EXPECT_EQ(hf->qk_norm, gg->qk_norm);
    EXPECT_EQ(hf->qk_norm_full, gg->qk_norm_full);
  }
  auto mixtral = load_model_config(tiny("mixtral/model-f32.gguf"));
  ASSERT_TRUE(mixtral.ok());
  EXPECT_EQ(mixtral->family, ArchFamily::kMixtral);
  EXPECT_EQ(mixtral->arch_name, "llama");  // llama.cpp's spelling: architecture llama + expert_count
  EXPECT_EQ(mixtral->rope_layout, RopeLayout::kInterleaved);
  EXPECT_TRUE(mixtral->norm_topk_prob);
  auto q2 = load_model_config(tiny("qwen2-moe"));
  ASSERT_TRUE(q2.ok());
  EXPECT_EQ(q2->shared_expert_intermediate_size, 96);
  EXPECT_FALSE(q2->norm_topk_prob);
  auto ol = load_model_config(tiny("olmoe"));
  ASSERT_TRUE(ol.ok());
  EXPECT_TRUE(ol->qk_norm_full);
  // A dense llama GGUF stays in the llama family.
  auto dense = load_model_config(tiny("llama3/model-f32.gguf"));
  ASSERT_TRUE(dense.ok());
  EXPECT_EQ(dense->family, ArchFamily::kLlama);
  EXPECT_FALSE(dense->is_moe());
}

TEST(MoeFamily, LongPromptRoutesToEveryExpertOfEveryLayer) {
  for (const char* name : kModels) {
    for (const std::string path : {tiny(name), tiny(std::string(name) + "/model-f32.gguf")}) {
      SCOPED_TRACE(path);
      auto m = load_model(path);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      const Prefill p = prefill(m->config, *m->model, prompt_of(name, "p100"));
      ASSERT_EQ(static_cast<int64_t>(p.expert_tokens.size()), m->config.num_layers);
      for (size_t l = 0; l < p.expert_tokens.size(); ++l) {
        int64_t total = 0;
        for (size_t e = 0; e < p.expert_tokens[l].size(); ++e) {
          EXPECT_GT(p.expert_tokens[l][e], 0) << "layer " << l << " expert " << e << " received no token";
          total += p.expert_tokens[l][e];
        }
        EXPECT_EQ(total, 100 * m->config.num_experts_per_tok);
      }
    }
  }
}

TEST(MoeFamily, RepeatedTokenRoutesEveryPositionToTheSameExperts) {
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    auto m = load_model(tiny(name));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    const auto prompt = prompt_of(name, "same16");
    const Prefill p = prefill(m->config, *m->model, prompt);
    for (size_t l = 0; l < p.expert_tokens.size(); ++l) {
      int64_t used = 0;
      for (int64_t n : p.expert_tokens[l]) {
        if (n == 0) continue;
        ++used;
        EXPECT_EQ(n, static_cast<int64_t>(prompt.size())) << "layer " << l;
      }
      EXPECT_EQ(used, m->config.num_experts_per_tok) << "layer " << l;
    }
  }
}

TEST(MoeFamily, FootprintCountsTheActiveExperts) {
  auto src = load_weight_source(tiny("qwen2-moe/model-f32.gguf"));
  ASSERT_TRUE(src.ok());
  auto c = model_config_from_source(**src);
  ASSERT_TRUE(c.ok());
  const ParameterFootprint f = checkpoint_footprint(*c, **src);
  // 2 layers of 8 experts x 3 x 64 x 32, 2 of them active; f32.
  const int64_t expert = 3 * 64 * 32, E = 8, k = 2, L = 2;
  EXPECT_EQ(f.total_parameters - f.active_parameters, L * (E - k) * expert);
  int64_t all = 0;
  for (const auto& name : (*src)->names()) all += (*src)->find(name)->numel();
  EXPECT_EQ(f.total_parameters, all);
  EXPECT_EQ(f.total_bytes, 4 * all);
  // untied: the embedding's one row is read, not its 512 x 64
  EXPECT_EQ(f.bytes_per_token, 4 * (f.active_parameters - 512 * 64 + 64));
  // The HF directory of the same model: per-expert tensors, the same footprint.
  auto hf = load_weight_source(tiny("qwen2-moe"));
  ASSERT_TRUE(hf.ok());
  const ParameterFootprint g = checkpoint_footprint(*c, **hf);
  EXPECT_EQ(g.total_parameters, f.total_parameters);
  EXPECT_EQ(g.active_parameters, f.active_parameters);
  EXPECT_EQ(g.bytes_per_token, f.bytes_per_token);
}

// Each variant flag changes the logits of its tiny model by more than the parity bound, so the
// parity test would catch a loader that ignored it.
TEST(MoeFamily, EachVariantFlagMattersBeyondTheParityBound) {
  struct Flip {
    const char* model;
    void (*change)(ModelConfig&);
    const char* what;
  };
  const Flip flips[] = {
      {"mixtral", [](ModelConfig& c) { c.norm_topk_prob = false; }, "Mixtral without renormalised top-k"},
      {"qwen3-moe", [](ModelConfig& c) { c.norm_topk_prob = false; }, "Qwen3-MoE without renormalised top-k"},
      {"qwen2-moe", [](ModelConfig& c) { c.norm_topk_prob = true; }, "Qwen2-MoE with renormalised top-k"},
      {"qwen2-moe", [](ModelConfig& c) { c.shared_expert_intermediate_size = 0; }, "Qwen2-MoE without its shared expert"},
      {"olmoe", [](ModelConfig& c) { c.num_experts_per_tok = 1; }, "OLMoE with top-1"},
  };
  for (const Flip& f : flips) {
    SCOPED_TRACE(f.what);
    const std::string base = test::testdata_dir() + "/reference/" + f.model + "/p33";
    const json ref = test::read_json(base + ".json");
    const auto want = test::read_f32(base + ".f32", 33 * ref["vocab_size"].get<size_t>());
    auto src = load_weight_source(tiny(f.model));
    ASSERT_TRUE(src.ok());
    auto c = model_config_from_source(**src);
    ASSERT_TRUE(c.ok());
    auto lookup = [&](const std::string& name) { return (*src)->get(name); };
    ModelLoadParams params;
    params.max_positions = c->max_position_embeddings;
    auto same = family_of(*c).load(*c, WeightNaming::kHuggingFace, lookup, params);
    ASSERT_TRUE(same.ok()) << same.status().to_string();
    ModelConfig changed = *c;
    f.change(changed);
    auto other = family_of(changed).load(changed, WeightNaming::kHuggingFace, lookup, params);
    ASSERT_TRUE(other.ok()) << other.status().to_string();
    const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
    auto diff = [&](const std::vector<float>& got) {
      double d = 0;
      for (size_t i = 0; i < got.size(); ++i) d = std::max(d, std::abs(static_cast<double>(got[i]) - want[i]));
      return d;
    };
    const double bound = ref["tolerance"]["max_abs_diff"].get<double>();
    EXPECT_LE(diff(prefill(*c, **same, prompt).logits), bound);
    EXPECT_GT(diff(prefill(changed, **other, prompt).logits), 10 * bound);
  }
}

}  // namespace
}  // namespace pagoda
