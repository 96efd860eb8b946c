// The Gemma family beyond the parity run (reference_parity_test.cc runs the gemma2 / gemma3
// sets): its config parsing in both formats, and that the parity check can fail, i.e. that
// each Gemma feature moves the logits of the tiny models past the parity bound when dropped
// (the attention and final soft-caps, the (1 + w) norms, the sliding windows, the local RoPE
// base, the query scale).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "loader/gguf.h"
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

// Prefill logits [T, V] of `prompt` (one sequence, f32 KV cache).
std::vector<float> prefill(const ModelConfig& c, const Model& model, const std::vector<int32_t>& prompt) {
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
  cpu_forward(model, batch, kv, ws, logits, pool);
  return {logits.data_as<float>(), logits.data_as<float>() + logits.numel()};
}

struct Reference {
  std::vector<int32_t> prompt;
  std::vector<float> logits;
  double bound = 0;  // the parity test's max |logit diff|
};

Reference reference(const std::string& set, const std::string& prompt) {
  const std::string base = test::testdata_dir() + "/reference/" + set + "/" + prompt;
  json ref = test::read_json(base + ".json");
  Reference r;
  r.prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
  const auto positions = ref["logits_positions"].get<std::vector<int64_t>>();
  EXPECT_EQ(positions.size(), r.prompt.size());
  r.logits = test::read_f32(base + ".f32", positions.size() * ref["vocab_size"].get<size_t>());
  r.bound = ref["tolerance"]["max_abs_diff"].get<double>();
  return r;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  return d;
}

// The GGUF's config and weights; `load_as` runs the family's load on a changed config or naming.
struct GgufCheckpoint {
  std::unique_ptr<WeightSource> source;
  ModelConfig config;

  explicit GgufCheckpoint(const std::string& path) {
    auto src = load_weight_source(path);
    PAGODA_CHECK(src.ok(), "{}", src.status().to_string());
    source = std::move(src).value();
    auto c = model_config_from_source(*source);
    PAGODA_CHECK(c.ok(), "{}", c.status().to_string());
    config = *c;
  }
  // naming kHuggingFace reads the same GGUF tensors under their HF names: the loader then adds 1
  // to norm weights that already hold 1 + w.
  std::unique_ptr<Model> load_as(const ModelConfig& c, WeightNaming naming = WeightNaming::kGguf) const {
    const auto table = family_of(c).tensor_table(c);
    auto lookup = [&](const std::string& name) -> Result<const Tensor*> {
      for (const auto& d : table)
        if (decl_name(d, naming) == name) return source->get(d.gguf_name);
      return source->get(name);
    };
    ModelLoadParams params;
    params.max_positions = c.max_position_embeddings;
    auto m = family_of(c).load(c, naming, lookup, params);
    PAGODA_CHECK(m.ok(), "{}", m.status().to_string());
    return std::move(m).value();
  }
};

TEST(GemmaFamily, GgufConfigFollowsLlamaCppsConverter) {
  const std::string p2 = tiny("gemma2/model-f32.gguf"), p3 = tiny("gemma3/model-f32.gguf");
  if (!fs::exists(p2) || !fs::exists(p3)) GTEST_FAIL() << "tiny Gemma models missing: run scripts/make_test_models.sh";
  auto g2 = load_model_config(p2);
  ASSERT_TRUE(g2.ok()) << g2.status().to_string();
  EXPECT_EQ(g2->family, ArchFamily::kGemma2);
  EXPECT_EQ(g2->sliding_window, 16);
  EXPECT_EQ(g2->sliding_layers, (std::vector<bool>{true, false, true, false}));
  EXPECT_DOUBLE_EQ(g2->attn_logit_softcap, 10.0);
  EXPECT_DOUBLE_EQ(g2->final_logit_softcap, 15.0);
  EXPECT_DOUBLE_EQ(g2->query_pre_attn_scalar, 32.0);  // head_dim (not a 27B layer count)
  EXPECT_EQ(g2->rope_layout, RopeLayout::kHalfSplit);
  EXPECT_FALSE(g2->qk_norm);
  auto g3 = load_model_config(p3);
  ASSERT_TRUE(g3.ok()) << g3.status().to_string();
  EXPECT_EQ(g3->family, ArchFamily::kGemma3);
  EXPECT_TRUE(g3->qk_norm);
  EXPECT_EQ(g3->sliding_layers, (std::vector<bool>{true, true, true, true, true, false, true}));
  EXPECT_DOUBLE_EQ(g3->rope_local_theta, 10000.0);
  EXPECT_DOUBLE_EQ(g3->rope_theta, 1e6);
  EXPECT_EQ(g3->rope_scaling.kind, RopeScaling::Kind::kLinear);
  EXPECT_DOUBLE_EQ(g3->attn_logit_softcap, 0.0);
  // The HF directories give the same configs.
  for (const auto& [hf, gg] : {std::pair{tiny("gemma2"), *g2}, std::pair{tiny("gemma3"), *g3}}) {
    auto h = load_model_config(hf);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    EXPECT_EQ(h->sliding_layers, gg.sliding_layers) << hf;
    EXPECT_EQ(h->sliding_window, gg.sliding_window) << hf;
    EXPECT_DOUBLE_EQ(h->attn_logit_softcap, gg.attn_logit_softcap) << hf;
    EXPECT_DOUBLE_EQ(h->final_logit_softcap, gg.final_logit_softcap) << hf;
    EXPECT_DOUBLE_EQ(h->query_pre_attn_scalar, gg.query_pre_attn_scalar) << hf;
    EXPECT_DOUBLE_EQ(h->rope_theta, gg.rope_theta) << hf;
    EXPECT_DOUBLE_EQ(h->rope_local_theta, gg.rope_local_theta) << hf;
    EXPECT_EQ(h->rope_scaling.kind, gg.rope_scaling.kind) << hf;
  }
}

json gemma3_hf_config() {
  return json{{"model_type", "gemma3_text"}, {"vocab_size", 512}, {"hidden_size", 64}, {"intermediate_size", 128},
              {"num_hidden_layers", 12}, {"num_attention_heads", 4}, {"num_key_value_heads", 1}, {"head_dim", 32},
              {"max_position_embeddings", 1024}, {"rms_norm_eps", 1e-6}, {"query_pre_attn_scalar", 24},
              {"sliding_window", 512}};
}

TEST(GemmaFamily, HfConfigSpellings) {
  // transformers 4: rope_theta + rope_local_base_freq + rope_scaling (global layers), pattern 6.
  json j = gemma3_hf_config();
  j["rope_theta"] = 1e6;
  j["rope_local_base_freq"] = 20000.0;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  j["sliding_window_pattern"] = 6;
  auto c = model_config_from_hf_json(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c->rope_local_theta, 20000.0);
  EXPECT_EQ(c->rope_scaling.kind, RopeScaling::Kind::kLinear);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c->query_pre_attn_scalar, 24.0);
  std::vector<bool> want(12, true);
  want[5] = want[11] = false;
  EXPECT_EQ(c->sliding_layers, want);
  EXPECT_EQ(c->layer_window(5), 0);
  EXPECT_EQ(c->layer_window(4), 512);

  json bad = gemma3_hf_config();
  bad["layer_types"] = {"sliding_attention", "full_attention"};
  auto e = model_config_from_hf_json(bad);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("layer_types has 2 entries for 12 layers"), std::string::npos) << e.status().to_string();

  json mm = {{"model_type", "gemma3"}, {"architectures", {"Gemma3ForConditionalGeneration"}},
             {"text_config", gemma3_hf_config()}, {"vision_config", json::object()}};
  auto m = model_config_from_hf_json(mm);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("multimodal"), std::string::npos) << m.status().to_string();
}

// Each mutation of a tiny model must break parity with the transformers reference on the 100-token
// prompt (3x beyond the bound the parity test holds), while the unmutated model stays within it.
struct Mutation {
  const char* what;
  std::function<void(ModelConfig&)> change;
  WeightNaming naming = WeightNaming::kGguf;
};

void expect_mutations_break_parity(const std::string& set, const std::vector<Mutation>& mutations) {
  const std::string path = tiny(set + "/model-f32.gguf");
  if (!fs::exists(path)) GTEST_FAIL() << path << " missing: run scripts/make_test_models.sh";
  GgufCheckpoint cp(path);
  const Reference ref = reference(set, "p100");
  const double base = max_diff(prefill(cp.config, *cp.load_as(cp.config), ref.prompt), ref.logits);
  EXPECT_LE(base, ref.bound) << set << " unmutated";
  for (const Mutation& m : mutations) {
    ModelConfig c = cp.config;
    if (m.change) m.change(c);
    const double d = max_diff(prefill(c, *cp.load_as(c, m.naming), ref.prompt), ref.logits);
    std::printf("[gemma mutation] %-7s %-34s max|diff| %.3g (bound %.3g)\n", set.c_str(), m.what, d, ref.bound);
    EXPECT_GT(d, 3 * ref.bound) << set << ": " << m.what << " does not change the logits enough to fail parity";
  }
}

TEST(GemmaFamily, DroppingAFeatureBreaksParity) {
  expect_mutations_break_parity(
      "gemma2", {
                    {"no attention soft-cap", [](ModelConfig& c) { c.attn_logit_softcap = 0; }},
                    {"no final soft-cap", [](ModelConfig& c) { c.final_logit_softcap = 0; }},
                    {"no sliding window", [](ModelConfig& c) { c.sliding_layers.clear(); c.sliding_window = 0; }},
                    {"norm weights w (+1 twice)", nullptr, WeightNaming::kHuggingFace},
                    {"scale 1/sqrt(hidden/heads)", [](ModelConfig& c) { c.query_pre_attn_scalar = 16; }},
                });
  expect_mutations_break_parity(
      "gemma3", {
                    {"no sliding window", [](ModelConfig& c) { c.sliding_layers.clear(); c.sliding_window = 0; }},
                    {"global RoPE on local layers", [](ModelConfig& c) { c.rope_local_theta = 0; }},
                    {"no linear RoPE scaling", [](ModelConfig& c) { c.rope_scaling = RopeScaling{}; }},
                    {"norm weights w (+1 twice)", nullptr, WeightNaming::kHuggingFace},
                    {"window one token wider", [](ModelConfig& c) { c.sliding_window += 1; }},
                });
}

}  // namespace
}  // namespace pagoda
