// The Phi-3 family beyond the parity run (reference_parity_test.cc runs the phi3 / phi4-mini /
// phi4 sets and their short-context regimes): config parsing in both formats as llama.cpp's
// converter and transformers spell it, malformed LongRoPE configs refused with a message, and that
// the parity check can fail, i.e. that each Phi feature moves the logits of the tiny models past
// the parity bound when dropped (LongRoPE's factors and attention factor, the partial rotary, the
// sliding window).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>

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

TEST(Phi3Family, GgufAndHfConfigsAgree) {
  for (const char* name : {"phi3", "phi4-mini", "phi4"}) {
    SCOPED_TRACE(name);
    const std::string gguf = tiny(std::string(name) + "/model-f32.gguf");
    if (!fs::exists(gguf)) GTEST_FAIL() << gguf << " missing: run scripts/make_test_models.sh";
    auto g = load_model_config(gguf);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    auto h = load_model_config(tiny(name));
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    for (const ModelConfig* c : {&*g, &*h}) {
      EXPECT_EQ(c->family, ArchFamily::kPhi3);
      EXPECT_EQ(c->rope_layout, RopeLayout::kHalfSplit);
      EXPECT_FALSE(c->attention_bias);
    }
    EXPECT_EQ(g->rope_dim, h->rope_dim);
    EXPECT_EQ(g->sliding_window, h->sliding_window);
    EXPECT_EQ(g->tie_word_embeddings, h->tie_word_embeddings);
    EXPECT_EQ(g->rope_scaling.kind, h->rope_scaling.kind);
    EXPECT_EQ(g->rope_scaling.original_max_position, h->rope_scaling.original_max_position);
    EXPECT_NEAR(g->rope_scaling.attention_factor, h->rope_scaling.attention_factor, 1e-6);
  }
  auto phi3 = load_model_config(tiny("phi3"));
  ASSERT_TRUE(phi3.ok());
  EXPECT_EQ(phi3->rope_dim, 32);
  EXPECT_EQ(phi3->sliding_window, 48);
  EXPECT_EQ(phi3->rope_scaling.kind, RopeScaling::Kind::kLongRope);
  EXPECT_EQ(phi3->rope_scaling.original_max_position, 64);
  EXPECT_NEAR(phi3->rope_scaling.attention_factor, std::sqrt(1 + std::log(4.0) / std::log(64.0)), 1e-12);
  EXPECT_EQ(phi3->rope_long_factors.size(), 16u);
  auto mini = load_model_config(tiny("phi4-mini"));
  ASSERT_TRUE(mini.ok());
  EXPECT_EQ(mini->rope_dim, 24);  // 0.75 x 32
  EXPECT_TRUE(mini->tie_word_embeddings);
  auto phi4 = load_model_config(tiny("phi4"));
  ASSERT_TRUE(phi4.ok());
  EXPECT_EQ(phi4->rope_scaling.kind, RopeScaling::Kind::kNone);
  EXPECT_EQ(phi4->sliding_window, 0);  // config null; llama.cpp's converter writes 0
}

json phi3_config() {
  return json{{"model_type", "phi3"}, {"vocab_size", 512}, {"hidden_size", 128}, {"intermediate_size", 256},
              {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 4},
              {"max_position_embeddings", 4096}, {"original_max_position_embeddings", 1024},
              {"rope_scaling", {{"type", "su"}, {"short_factor", std::vector<double>(16, 1.0)},
                                {"long_factor", std::vector<double>(16, 2.0)}}}};
}

TEST(Phi3Family, HfConfigSpellingsAndMalformedLongRope) {
  // transformers 5 spelling: rope_parameters with rope_type, the partial factor inside it.
  json t5 = phi3_config();
  t5.erase("rope_scaling");
  t5["rope_parameters"] = {{"rope_type", "longrope"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5},
                           {"original_max_position_embeddings", 512}, {"short_factor", std::vector<double>(8, 1.0)},
                           {"long_factor", std::vector<double>(8, 3.0)}, {"attention_factor", 1.25}};
  auto c5 = model_config_from_hf_json(t5);
  ASSERT_TRUE(c5.ok()) << c5.status().to_string();
  EXPECT_EQ(c5->rope_dim, 16);
  EXPECT_EQ(c5->rope_scaling.original_max_position, 512);
  EXPECT_DOUBLE_EQ(c5->rope_scaling.attention_factor, 1.25);  // given: not derived
  auto c4 = model_config_from_hf_json(phi3_config());
  ASSERT_TRUE(c4.ok()) << c4.status().to_string();
  EXPECT_EQ(c4->rope_scaling.kind, RopeScaling::Kind::kLongRope);  // "su" is longrope
  EXPECT_NEAR(c4->rope_scaling.attention_factor, std::sqrt(1 + std::log(4.0) / std::log(1024.0)), 1e-12);

  auto refused = [](json j, const std::string& want) {
    auto c = model_config_from_hf_json(j);
    ASSERT_FALSE(c.ok()) << want;
    EXPECT_NE(c.status().message().find(want), std::string::npos) << c.status().to_string();
  };
  json no_long = phi3_config();
  no_long["rope_scaling"].erase("long_factor");
  refused(no_long, "long_factor");
  json short_list = phi3_config();
  short_list["rope_scaling"]["short_factor"] = std::vector<double>(15, 1.0);
  refused(short_list, "rope_dim / 2 = 16");
  json negative = phi3_config();
  negative["rope_scaling"]["long_factor"][3] = -1.0;
  refused(negative, "must be positive");
  json strings = phi3_config();
  strings["rope_scaling"]["long_factor"][0] = "x";
  refused(strings, "expected numbers");
  json partial = phi3_config();
  partial["partial_rotary_factor"] = 1.5;
  refused(partial, "partial_rotary_factor");
  json yarn = phi3_config();
  yarn["rope_scaling"]["type"] = "yarn";
  auto y = model_config_from_hf_json(yarn);
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), StatusCode::kUnimplemented);
}

// Prefill logits [T, V] of `prompt` on `model` (one sequence, f32 KV cache).
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

// The set's p100 reference (the long regime) and its bound.
struct Reference {
  std::vector<int32_t> prompt;
  std::vector<float> logits;
  double bound = 0;
};
Reference reference(const std::string& set, const std::string& prompt) {
  const std::string base = test::testdata_dir() + "/reference/" + set + "/" + prompt;
  json ref = test::read_json(base + ".json");
  Reference r;
  r.prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
  r.logits = test::read_f32(base + ".f32", r.prompt.size() * ref["vocab_size"].get<size_t>());
  r.bound = ref["tolerance"]["max_abs_diff"].get<double>();
  return r;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  return d;
}

struct Mutation {
  const char* what;
  std::function<void(ModelConfig&)> change;
};

// The HF checkpoint loaded through its family with a changed config: every mutation must move the
// p100 logits 3x past the parity bound while the unmutated model stays within it.
void expect_mutations_break_parity(const std::string& set, const std::vector<Mutation>& mutations) {
  const std::string dir = tiny(set);
  if (!fs::exists(dir)) GTEST_FAIL() << dir << " missing: run scripts/make_test_models.sh";
  auto src = load_weight_source(dir);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  auto base_config = model_config_from_source(**src);
  ASSERT_TRUE(base_config.ok());
  auto load_as = [&](const ModelConfig& c) {
    ModelLoadParams params;
    params.max_positions = c.max_position_embeddings;  // LongRoPE's long regime
    auto lookup = [&](const std::string& name) -> Result<const Tensor*> { return (*src)->get(name); };
    auto m = family_of(c).load(c, WeightNaming::kHuggingFace, lookup, params);
    PAGODA_CHECK(m.ok(), "{}", m.status().to_string());
    return std::move(m).value();
  };
  const Reference ref = reference(set, "p100");
  const double base = max_diff(prefill(*base_config, *load_as(*base_config), ref.prompt), ref.logits);
  EXPECT_LE(base, ref.bound) << set << " unmutated";
  for (const Mutation& m : mutations) {
    ModelConfig c = *base_config;
    if (m.change) m.change(c);
    const double d = max_diff(prefill(c, *load_as(c), ref.prompt), ref.logits);
    std::printf("[phi mutation] %-9s %-36s max|diff| %.3g (bound %.3g)\n", set.c_str(), m.what, d, ref.bound);
    EXPECT_GT(d, 3 * ref.bound) << set << ": " << m.what << " does not change the logits enough to fail parity";
  }
}

TEST(Phi3Family, DroppingAFeatureBreaksParity) {
  expect_mutations_break_parity(
      "phi3", {
                  {"no LongRoPE attention factor", [](ModelConfig& c) { c.rope_scaling.attention_factor = 1.0; }},
                  {"short factors in the long regime", [](ModelConfig& c) { c.rope_long_factors = c.rope_short_factors; }},
                  {"no sliding window", [](ModelConfig& c) { c.sliding_window = 0; }},
                  {"window one token wider", [](ModelConfig& c) { c.sliding_window += 1; }},
              });
  expect_mutations_break_parity(
      "phi4-mini", {
                       {"whole head rotated", [](ModelConfig& c) {
                          c.rope_dim = c.head_dim;
                          c.rope_long_factors.resize(c.rope_dim / 2, 1.0f);
                          c.rope_short_factors.resize(c.rope_dim / 2, 1.0f);
                        }},
                       {"no LongRoPE attention factor", [](ModelConfig& c) { c.rope_scaling.attention_factor = 1.0; }},
                   });
}

}  // namespace
}  // namespace pagoda
