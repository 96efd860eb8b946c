// WeightSource on the generated tiny models (models/tiny, made by scripts/make_test_models.sh):
// each HF directory (single file, sharded, bf16) and its f32 GGUF hold the same weights, with
// GGUF shapes reversed into torch order and, for GGUF architecture "llama", the Q/K rows in the
// interleaved-pair RoPE layout (HF: half-split). This pins down the layout facts the model loader
// relies on, from C++, on files written by the same tool as the reference logits' models.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/half.h"
#include "loader/gguf.h"
#include "loader/weight_source.h"
#include "model/model_config.h"
#include "test_paths.h"

namespace pagoda {
namespace {

std::string tiny_dir(const std::string& name) { return test::models_dir() + "/tiny/" + name; }

// GGUF name -> HF name (the subset the tiny models use).
std::string hf_name(const std::string& g) {
  static const std::vector<std::pair<std::string, std::string>> layer = {
      {"attn_norm.weight", "input_layernorm.weight"},   {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},     {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"}, {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},         {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"}, {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"}, {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},          {"ffn_down.weight", "mlp.down_proj.weight"}};
  if (g == "token_embd.weight") return "model.embed_tokens.weight";
  if (g == "output_norm.weight") return "model.norm.weight";
  if (g == "output.weight") return "lm_head.weight";
  if (g.rfind("blk.", 0) == 0) {
    const size_t dot = g.find('.', 4);
    const std::string n = g.substr(4, dot - 4), rest = g.substr(dot + 1);
    for (const auto& [from, to] : layer)
      if (rest == from) return "model.layers." + n + "." + to;
  }
  return "";
}

// Row r of an interleaved (GGUF llama) Q/K weight holds HF row perm(r).
int64_t hf_row_of_interleaved(int64_t r, int64_t head_dim) {
  const int64_t h = r / head_dim, i = r % head_dim;
  return h * head_dim + (i % 2) * (head_dim / 2) + i / 2;
}

void expect_same_weights(const std::string& model, const std::string& hf_path, bool bf16) {
  const std::string gguf_path = tiny_dir(model) + "/model-f32.gguf";
  if (!std::filesystem::exists(gguf_path)) GTEST_SKIP() << gguf_path << " missing: run scripts/make_test_models.sh";
  auto hf = load_weight_source(hf_path);
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  auto gg = load_weight_source(gguf_path);
  ASSERT_TRUE(gg.ok()) << gg.status().to_string();
  const GgufFile* meta = (*gg)->gguf();
  const std::string arch = *meta->get_string("general.architecture");
  const int64_t heads = *meta->get_int(arch + ".attention.head_count");
  const int64_t kv_heads = *meta->get_int(arch + ".attention.head_count_kv");
  const bool interleaved = arch == "llama";

  size_t compared = 0;
  for (const auto& name : (*gg)->names()) {
    if (name == "rope_freqs.weight") continue;
    const std::string h = hf_name(name);
    ASSERT_FALSE(h.empty()) << name;
    const Tensor* gt = (*gg)->find(name);
    auto ht = (*hf)->get(h);
    ASSERT_TRUE(ht.ok()) << ht.status().to_string();
    ASSERT_EQ(gt->shape(), (*ht)->shape()) << name << " vs " << h;
    ASSERT_EQ(gt->dtype(), DType::kF32);
    ASSERT_EQ((*ht)->dtype(), bf16 ? DType::kBF16 : DType::kF32);
    const bool permuted = interleaved && (name.ends_with("attn_q.weight") || name.ends_with("attn_k.weight"));
    const int64_t rows = gt->rows(), cols = gt->dim(-1);
    const int64_t n_head = name.ends_with("attn_q.weight") ? heads : kv_heads;
    const int64_t head_dim = rows / n_head;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t hr = permuted ? hf_row_of_interleaved(r, head_dim) : r;
      for (int64_t c = 0; c < cols; ++c) {
        const float g = gt->data_as<float>()[r * cols + c];
        if (bf16) {
          // bf16 = f32 rounded to nearest even
          const uint16_t b = (*ht)->data_as<uint16_t>()[hr * cols + c];
          const uint32_t u = f32_bits(g);
          const uint16_t want = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
          ASSERT_EQ(b, want) << name << " [" << r << ", " << c << "]";
        } else {
          ASSERT_EQ(g, (*ht)->data_as<float>()[hr * cols + c]) << name << " [" << r << ", " << c << "]";
        }
      }
    }
    ++compared;
  }
  // Every HF tensor has its GGUF counterpart (tied models have no lm_head / output).
  EXPECT_EQ(compared, (*hf)->names().size()) << model;
}

TEST(TinyModels, Llama3HfAndGgufAgree) { expect_same_weights("llama3", tiny_dir("llama3"), false); }
TEST(TinyModels, Qwen2ShardedHfAndGgufAgree) { expect_same_weights("qwen2", tiny_dir("qwen2"), false); }
TEST(TinyModels, Qwen3HfAndGgufAgree) { expect_same_weights("qwen3", tiny_dir("qwen3"), false); }
TEST(TinyModels, MistralHfAndGgufAgree) { expect_same_weights("mistral", tiny_dir("mistral"), false); }
TEST(TinyModels, LlamaMqaHfAndGgufAgree) { expect_same_weights("llama-mqa", tiny_dir("llama-mqa"), false); }
TEST(TinyModels, LlamaMqaBf16HfAgrees) { expect_same_weights("llama-mqa", tiny_dir("llama-mqa-bf16"), true); }

TEST(TinyModels, QuantizedGgufTensorsHaveTheirTypes) {
  const std::string path = tiny_dir("llama-mqa") + "/model-q4_0.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " missing: run scripts/make_test_models.sh";
  auto src = load_weight_source(path);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_EQ((*src)->find("blk.0.attn_q.weight")->dtype(), DType::kQ4_0);
  EXPECT_EQ((*src)->find("blk.0.attn_q.weight")->shape(), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ((*src)->find("token_embd.weight")->dtype(), DType::kQ4_0);
  EXPECT_EQ((*src)->find("blk.0.attn_norm.weight")->dtype(), DType::kF32);
  EXPECT_EQ((*src)->find("blk.0.ffn_down.weight")->shape(), (std::vector<int64_t>{64, 192}));
}

// ModelConfig reads the same hyper-parameters from config.json and from the GGUF metadata.
TEST(TinyModels, ConfigsFromHfAndGgufAgree) {
  for (const std::string name : {"llama3", "qwen2", "qwen3", "mistral", "llama-mqa"}) {
    SCOPED_TRACE(name);
    const std::string dir = tiny_dir(name);
    if (!std::filesystem::exists(dir + "/model-f32.gguf")) GTEST_SKIP() << dir << " missing: run scripts/make_test_models.sh";
    auto hf = model_config_from_hf_file(dir + "/config.json");
    ASSERT_TRUE(hf.ok()) << hf.status().to_string();
    auto gguf = GgufFile::open(dir + "/model-f32.gguf");
    ASSERT_TRUE(gguf.ok()) << gguf.status().to_string();
    auto gg = model_config_from_gguf(**gguf);
    ASSERT_TRUE(gg.ok()) << gg.status().to_string();
    EXPECT_EQ(hf->vocab_size, gg->vocab_size);
    EXPECT_EQ(hf->hidden_size, gg->hidden_size);
    EXPECT_EQ(hf->intermediate_size, gg->intermediate_size);
    EXPECT_EQ(hf->num_layers, gg->num_layers);
    EXPECT_EQ(hf->num_heads, gg->num_heads);
    EXPECT_EQ(hf->num_kv_heads, gg->num_kv_heads);
    EXPECT_EQ(hf->head_dim, gg->head_dim);
    EXPECT_EQ(hf->max_position_embeddings, gg->max_position_embeddings);
    EXPECT_FLOAT_EQ(static_cast<float>(hf->rope_theta), static_cast<float>(gg->rope_theta));
    EXPECT_FLOAT_EQ(static_cast<float>(hf->rms_norm_eps), static_cast<float>(gg->rms_norm_eps));
    EXPECT_EQ(hf->tie_word_embeddings, gg->tie_word_embeddings);
    EXPECT_EQ(hf->attention_bias, gg->attention_bias);
    EXPECT_EQ(hf->qk_norm, gg->qk_norm);
    EXPECT_EQ(hf->rope_layout, RopeLayout::kHalfSplit);
    EXPECT_EQ(gg->rope_layout, (name == "qwen2" || name == "qwen3") ? RopeLayout::kHalfSplit : RopeLayout::kInterleaved);
    if (name == "llama3") {
      EXPECT_EQ(hf->rope_scaling.kind, RopeScaling::Kind::kLlama3);
      EXPECT_EQ(hf->rope_scaling.original_max_position, 64);
      EXPECT_DOUBLE_EQ(hf->rope_scaling.factor, 8.0);
      EXPECT_NE((*gguf)->find_tensor("rope_freqs.weight"), nullptr);
    }
  }
}

}  // namespace
}  // namespace pagoda
