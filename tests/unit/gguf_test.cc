// GGUF parser: every metadata type, v2 and v3, alignment, tensor data views, and clear errors on
// truncated or corrupt files (every truncation point of a valid file is tried).
#include <gtest/gtest.h>

#include <memory>

#include "gguf_builder.h"
#include "loader/gguf.h"
#include "model/model_config.h"
#include "test_paths.h"

namespace pagoda {
namespace {

using test::GgufBuilder;

Result<std::shared_ptr<GgufFile>> parse(const std::vector<uint8_t>& bytes) {
  auto owner = std::make_shared<std::vector<uint8_t>>(bytes);
  return GgufFile::parse(std::span<const uint8_t>(owner->data(), owner->size()), owner);
}

GgufBuilder every_type(uint32_t version) {
  GgufBuilder b(version);
  b.kv_u8("u8", 200).kv_i8("i8", -5).kv_u16("u16", 60000).kv_i16("i16", -30000).kv_u32("u32", 4000000000u)
      .kv_i32("i32", -7).kv_f32("f32", 0.5f).kv_bool("bool", true).kv_str("str", "héllo").kv_u64("u64", 1ull << 40)
      .kv_i64("i64", -(1ll << 40)).kv_f64("f64", 0.125).kv_str_array("strs", {"a", "", "ccc"})
      .kv_f32_array("floats", {1.5f, -2.0f}).kv_i32_array("ints", {3, -4, 5});
  b.tensor_f32("w", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  b.tensor_f32("b", {3}, {9, 10, 11});
  return b;
}

TEST(Gguf, ParsesEveryMetadataTypeV2AndV3) {
  for (uint32_t version : {2u, 3u}) {
    auto r = parse(every_type(version).build());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const GgufFile& g = **r;
    EXPECT_EQ(g.version(), version);
    EXPECT_EQ(g.get_int("u8"), 200);
    EXPECT_EQ(g.get_int("i8"), -5);
    EXPECT_EQ(g.get_int("u16"), 60000);
    EXPECT_EQ(g.get_int("i16"), -30000);
    EXPECT_EQ(g.get_int("u32"), 4000000000ll);
    EXPECT_EQ(g.get_int("i32"), -7);
    EXPECT_EQ(g.get_float("f32"), 0.5);
    EXPECT_EQ(g.get_bool("bool"), true);
    EXPECT_EQ(g.get_string("str"), "héllo");
    EXPECT_EQ(g.get_int("u64"), 1ll << 40);
    EXPECT_EQ(g.get_int("i64"), -(1ll << 40));
    EXPECT_EQ(g.get_float("f64"), 0.125);
    ASSERT_NE(g.get_array("strs"), nullptr);
    EXPECT_EQ(g.get_array("strs")->strings, (std::vector<std::string>{"a", "", "ccc"}));
    EXPECT_EQ(g.get_array("floats")->floats, (std::vector<double>{1.5, -2.0}));
    EXPECT_EQ(g.get_array("ints")->ints, (std::vector<int64_t>{3, -4, 5}));
    EXPECT_FALSE(g.get_int("str").has_value());  // wrong type reads as absent
    ASSERT_EQ(g.tensors().size(), 2u);
    const GgufTensorInfo* w = g.find_tensor("w");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->dims, (std::vector<int64_t>{4, 2}));
    EXPECT_EQ(w->nbytes, 32u);
    EXPECT_EQ(reinterpret_cast<const float*>(g.tensor_data(*w))[5], 6.0f);
    EXPECT_EQ(reinterpret_cast<const float*>(g.tensor_data(*g.find_tensor("b")))[2], 11.0f);
    EXPECT_EQ(g.data_offset() % 32, 0u);
  }
}

TEST(Gguf, CustomAlignment) {
  GgufBuilder b;
  b.kv_u32("general.alignment", 64).tensor_f32("t", {3}, {1, 2, 3}).tensor_f32("u", {2}, {4, 5});
  auto r = parse(b.build(64));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->alignment(), 64u);
  EXPECT_EQ(reinterpret_cast<const float*>((*r)->tensor_data(*(*r)->find_tensor("u")))[1], 5.0f);
  GgufBuilder bad;
  bad.kv_u32("general.alignment", 24);
  auto e = parse(bad.build());
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("power of two"), std::string::npos);
}

TEST(Gguf, EveryTruncationIsAnErrorNotACrash) {
  const auto bytes = every_type(3).build();
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
    auto r = parse(cut);
    // Cuts inside the final tensor's trailing alignment padding are still valid files.
    if (r.ok()) {
      for (const auto& t : (*r)->tensors()) ASSERT_LE((*r)->data_offset() + t.offset + t.nbytes, n);
      continue;
    }
    EXPECT_FALSE(r.status().message().empty());
  }
}

TEST(Gguf, CorruptFieldsNameTheProblem) {
  auto expect_error = [](std::vector<uint8_t> bytes, const std::string& needle) {
    auto r = parse(bytes);
    ASSERT_FALSE(r.ok()) << "expected an error containing '" << needle << "'";
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  auto good = every_type(3).build();
  auto bad_magic = good;
  bad_magic[0] = 'X';
  expect_error(bad_magic, "not a GGUF file");
  auto bad_version = good;
  bad_version[4] = 9;
  expect_error(bad_version, "version 9");
  auto v1 = good;
  v1[4] = 1;
  expect_error(v1, "version 1");
  auto huge_count = good;
  huge_count[8 + 7] = 0x7f;  // tensor count
  expect_error(huge_count, "tensor count");
  // A string length that runs past the end of the file.
  GgufBuilder b;
  b.kv_str("k", "value");
  auto s = b.build();
  s[24 + 8 + 1 + 4] = 0xff;  // low byte of the value's length
  expect_error(s, "exceeds");
  // Unknown tensor type, bad dims, tensor beyond the file.
  expect_error(GgufBuilder().tensor("t", {4}, 99, std::vector<uint8_t>(16)).build(), "unknown ggml type");
  expect_error(GgufBuilder().tensor("t", {0}, 0, {}).build(), "dimension 0 is 0");
  expect_error(GgufBuilder().tensor("q", {33}, 8, std::vector<uint8_t>(34)).build(), "not a multiple");
  auto short_data = GgufBuilder().tensor_f32("t", {64}, std::vector<float>(64, 1.0f)).build();
  short_data.resize(short_data.size() - 8);
  expect_error(short_data, "tensor 't'");
  expect_error(GgufBuilder().kv_u32("a", 1).kv_u32("a", 2).build(), "appears twice");
}

TEST(Gguf, RealStoriesModelAndConfig) {
  auto r = GgufFile::open(test::stories260k_gguf());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->tensors().size(), 48u);
  auto cfg = model_config_from_gguf(**r);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_EQ(cfg->hidden_size, 64);
  EXPECT_EQ(cfg->intermediate_size, 172);
  EXPECT_EQ(cfg->num_layers, 5);
  EXPECT_EQ(cfg->num_heads, 8);
  EXPECT_EQ(cfg->num_kv_heads, 4);
  EXPECT_EQ(cfg->head_dim, 8);
  EXPECT_EQ(cfg->vocab_size, 512);
  EXPECT_EQ(cfg->rope_layout, RopeLayout::kInterleaved);
  EXPECT_EQ(cfg->kv_bytes_per_token(DType::kF32), 2 * 5 * 4 * 8 * 4);
  auto missing = GgufFile::open("/nonexistent/model.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/model.gguf"), std::string::npos);
}

}  // namespace
}  // namespace pagoda
