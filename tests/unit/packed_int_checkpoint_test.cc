// Packed-integer checkpoints (loader/packed_int_checkpoint.h) on hand-made directories: a minimal
// valid module of each method decodes to the expected native rows, and each malformed config or
// tensor is a load error that names what is wrong (never a silently different weight).
#include "loader/packed_int_checkpoint.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/half.h"
#include "loader/weight_source.h"
#include "quant/grouped_int.h"
#include "quant/quant.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct RawTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

template <class T>
RawTensor tensor(std::string name, std::string dtype, std::vector<int64_t> shape, const std::vector<T>& v) {
  RawTensor t{std::move(name), std::move(dtype), std::move(shape), {}};
  t.bytes.resize(v.size() * sizeof(T));
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

void write_safetensors(const fs::path& path, const std::vector<RawTensor>& ts) {
  json h = json::object();
  uint64_t off = 0;
  for (const auto& t : ts) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(header.data(), static_cast<std::streamsize>(n));
  for (const auto& t : ts) out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
}

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() / fmt::format("pagoda_pic_{}_{}", ::getpid(), counter++);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

constexpr int64_t N = 16, K = 64;

// A GPTQ module m [N, K], 4-bit, group 32: codes (n + k) % 16, zeros 8 (stored 7, v1), scales
// 1/64 * (1 + n).
std::vector<RawTensor> gptq_module(int bits = 4, int64_t group = 32, uint32_t zero_word = 0x77777777u) {
  const int per = 32 / bits;
  const int64_t G = K / group;
  std::vector<uint32_t> qw(static_cast<size_t>(K / per * N), 0);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n)
      qw[static_cast<size_t>((k / per) * N + n)] |= static_cast<uint32_t>((n + k) % (1 << bits)) << (bits * (k % per));
  std::vector<uint32_t> qz(static_cast<size_t>(G * N / per), zero_word);
  std::vector<uint16_t> sc(static_cast<size_t>(G * N));
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n) sc[static_cast<size_t>(g * N + n)] = f32_to_fp16((1.0f + n) / 64);
  return {tensor("m.qweight", "I32", {K / per, N}, qw), tensor("m.qzeros", "I32", {G, N / per}, qz),
          tensor("m.scales", "F16", {G, N}, sc)};
}

// Writes config.json (with `qcfg` as quantization_config unless null) and the tensors; returns the
// weight source's result.
Result<std::unique_ptr<WeightSource>> open_dir(const TempDir& d, const json& qcfg, const std::vector<RawTensor>& ts) {
  json cfg = {{"model_type", "llama"}, {"hidden_size", K}};
  if (!qcfg.is_null()) cfg["quantization_config"] = qcfg;
  std::ofstream(d.path() / "config.json") << cfg.dump();
  write_safetensors(d.path() / "model.safetensors", ts);
  return load_weight_source(d.path().string());
}

json gptq_config(int bits = 4, int group = 32) {
  return {{"quant_method", "gptq"}, {"bits", bits}, {"group_size", group}, {"sym", true}, {"desc_act", false}};
}

std::string error_of(const Result<std::unique_ptr<WeightSource>>& r) {
  return r.ok() ? std::string("(loaded)") : r.status().message();
}

TEST(PackedIntCheckpoint, GptqModuleDecodesToQ4_0) {
  TempDir d;
  auto src = open_dir(d, gptq_config(), gptq_module());
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  const Tensor* w = (*src)->find("m.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype(), DType::kQ4_0);
  EXPECT_EQ(w->shape(), (std::vector<int64_t>{N, K}));
  EXPECT_EQ((*src)->names(), std::vector<std::string>{"m.weight"});
  std::vector<float> row(K);
  for (int64_t n = 0; n < N; ++n) {
    quant::dequantize_row(w->dtype(), w->row_ptr(n), row.data(), K);
    for (int64_t k = 0; k < K; ++k)
      ASSERT_EQ(row[k], fp16_to_f32(f32_to_fp16((1.0f + n) / 64)) * static_cast<float>((n + k) % 16 - 8)) << n << ", " << k;
  }
}

TEST(PackedIntCheckpoint, ActOrderColumnsAreReorderedIntoContiguousGroups) {
  TempDir d;
  auto ts = gptq_module();
  // Inputs alternate between the groups: even k in group 1, odd k in group 0.
  std::vector<int32_t> gi(K);
  for (int64_t k = 0; k < K; ++k) gi[static_cast<size_t>(k)] = static_cast<int32_t>(1 - k % 2);
  ts.push_back(tensor("m.g_idx", "I32", {K}, gi));
  auto src = open_dir(d, gptq_config(), ts);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  const Tensor* w = (*src)->find("m.weight");
  const Tensor* o = (*src)->find("m.input_order");
  ASSERT_TRUE(w && o);
  ASSERT_EQ(o->dtype(), DType::kI32);
  const int32_t* order = o->data_as<const int32_t>();
  for (int64_t j = 0; j < K; ++j) EXPECT_EQ(order[j], j < 32 ? 2 * j + 1 : 2 * (j - 32)) << j;
  std::vector<float> row(K);
  for (int64_t n = 0; n < N; ++n) {
    quant::dequantize_row(w->dtype(), w->row_ptr(n), row.data(), K);
    for (int64_t j = 0; j < K; ++j) {
      const int64_t k = order[j];  // the input column j reads; its code and its group's scale
      ASSERT_EQ(row[j], fp16_to_f32(f32_to_fp16((1.0f + n) / 64)) * static_cast<float>((n + k) % 16 - 8)) << n << ", " << j;
    }
  }
}

TEST(PackedIntCheckpoint, AutoGptqQuantizeConfigFileIsRead) {
  TempDir d;
  std::ofstream(d.path() / "quantize_config.json") << gptq_config().dump();
  auto src = open_dir(d, nullptr, gptq_module());
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_EQ((*src)->find("m.weight")->dtype(), DType::kQ4_0);
}

TEST(PackedIntCheckpoint, MalformedConfigsAndTensorsAreClearErrors) {
  struct Case {
    const char* what;
    json config;
    std::vector<RawTensor> tensors;
    const char* expect;  // a substring of the error
  };
  auto no_scales = gptq_module();
  no_scales.pop_back();
  auto bad_zeros = gptq_module();
  bad_zeros[1].shape = {2, N};  // packed along N means N / 8 columns
  bad_zeros[1].bytes.resize(2 * N * 4);
  auto scales_i32 = gptq_module();
  scales_i32[2].dtype = "I32";
  scales_i32[2].shape = {2, N / 2};
  auto lopsided_g_idx = gptq_module();
  lopsided_g_idx.push_back(tensor("m.g_idx", "I32", {K}, std::vector<int32_t>(K, 0)));
  auto bad_g_idx = gptq_module();
  std::vector<int32_t> gi(K, 1);
  gi[3] = 5;
  bad_g_idx.push_back(tensor("m.g_idx", "I32", {K}, gi));
  auto with_weight = gptq_module();
  with_weight.push_back(tensor("m.weight", "F32", {1}, std::vector<float>{0}));
  const std::vector<Case> cases = {
      {"3 bits", gptq_config(3), gptq_module(), "GPTQ with 3 bits is not supported"},
      {"unknown method", {{"quant_method", "bitsandbytes"}}, gptq_module(), "quant_method 'bitsandbytes' is not supported"},
      {"missing scales", gptq_config(), no_scales, "no tensor 'm.scales'"},
      {"wrong qzeros shape", gptq_config(), bad_zeros, "'m.qzeros' has shape [2, 16], expected [2, 2]"},
      {"scales of an integer dtype", gptq_config(), scales_i32, "'m.scales' has dtype I32"},
      {"group 16", gptq_config(4, 16), gptq_module(4, 16), "group size 16 is not a multiple of 32"},
      {"act-order groups of unequal size", gptq_config(), lopsided_g_idx, "act-order group 0 holds 64 inputs, not group_size 32"},
      {"g_idx out of range", gptq_config(), bad_g_idx, "g_idx[3] = 5 is not a group index (0 to 1)"},
      {"group not dividing K", gptq_config(4, 48), gptq_module(), "group_size 48 does not divide K = 64"},
      {"asymmetric 8-bit", gptq_config(8), gptq_module(8, 32, 0x05050505u), "asymmetric 8-bit"},
      {"marlin layout", [] { json c = gptq_config(); c["checkpoint_format"] = "marlin"; return c; }(), gptq_module(),
       "checkpoint_format 'marlin' is not supported"},
      {"packed weight without config", nullptr, gptq_module(), "has no quantization_config"},
      {"packed and plain weight", gptq_config(), with_weight, "both a packed weight and 'm.weight'"},
      {"AWQ gemv", {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 32}, {"version", "gemv"}}, gptq_module(),
       "AWQ version 'gemv' is not supported"},
      {"compressed-tensors nvfp4", {{"quant_method", "compressed-tensors"}, {"format", "nvfp4-pack-quantized"}}, {},
       "compressed-tensors format 'nvfp4-pack-quantized' is not supported"},
      {"compressed-tensors fp8 without groups", {{"quant_method", "compressed-tensors"}, {"format", "float-quantized"}}, {},
       "compressed-tensors needs config_groups"},
      {"compressed-tensors w8a8",
       {{"quant_method", "compressed-tensors"}, {"format", "pack-quantized"},
        {"config_groups", {{"g", {{"weights", {{"num_bits", 8}, {"type", "int"}, {"strategy", "channel"}}},
                                  {"input_activations", {{"num_bits", 8}}}}}}}},
       {}, "activation quantization (input_activations) is not supported"},
      {"config with no packed tensor", gptq_config(), {tensor("x.weight", "F32", {1}, std::vector<float>{0})},
       "no tensor ends in '.qweight'"},
      {"fp8 without its scale", {{"quant_method", "fp8"}, {"weight_block_size", {32, 32}}},
       {tensor("m.weight", "F8_E4M3", {N, K}, std::vector<uint8_t>(N * K, 0x38))}, "no tensor 'm.weight_scale_inv'"},
      {"fp8 scale grid that tiles nothing", {{"quant_method", "fp8"}, {"weight_block_size", {32, 32}}},
       {tensor("m.weight", "F8_E4M3", {N, K}, std::vector<uint8_t>(N * K, 0x38)),
        tensor("m.weight_scale_inv", "F32", {3, 5}, std::vector<float>(15, 1.0f))},
       "has shape [3, 5], expected [1, 2] (blocks of 32 x 32 over [16, 64])"},
      {"fp8 per-tensor scale of the wrong size", {{"quant_method", "fp8"}},
       {tensor("m.weight", "F8_E4M3", {N, K}, std::vector<uint8_t>(N * K, 0x38)),
        tensor("m.weight_scale_inv", "F32", {3}, std::vector<float>(3, 1.0f))},
       "not one scale or one per row"},
      {"fp8 e5m2", {{"quant_method", "fp8"}, {"fmt", "e5m2"}}, {}, "FP8 format 'e5m2' is not supported"},
  };
  for (const Case& c : cases) {
    TempDir d;
    auto r = open_dir(d, c.config, c.tensors);
    EXPECT_FALSE(r.ok()) << c.what;
    EXPECT_NE(error_of(r).find(c.expect), std::string::npos) << c.what << ": " << error_of(r);
  }
}

TEST(PackedIntCheckpoint, Fp8BlockScalesDecodeToBf16) {
  TempDir d;
  // 1.5 (0x3c) everywhere; the 16 x 64 weight in blocks of 8 x 32: scale 2^(row block + col block).
  std::vector<float> sc = {1, 2, 2, 4};
  auto src = open_dir(d, {{"quant_method", "fp8"}, {"weight_block_size", {8, 32}}},
                      {tensor("m.weight", "F8_E4M3", {N, K}, std::vector<uint8_t>(N * K, 0x3c)),
                       tensor("m.weight_scale_inv", "F32", {2, 2}, sc), tensor("norm.weight", "F32", {2}, std::vector<float>{1, 1})});
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  const Tensor* w = (*src)->find("m.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype(), DType::kBF16);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      ASSERT_EQ(bf16_to_f32(w->data_as<uint16_t>()[n * K + k]), 1.5f * sc[(n / 8) * 2 + k / 32]) << n << ", " << k;
  EXPECT_NE((*src)->find("norm.weight"), nullptr) << "tensors that are not FP8 stay";
}

TEST(PackedIntCheckpoint, Fp8ChannelAndTensorScalesKeepTheCodes) {
  // Per row ([N, 1], bf16 scales) and per tensor ([], f32): F8E4M3Rows rows, [f32 scale][codes], with
  // the file's codes and the scale exact; dequantize_row gives scale x e4m3(code).
  for (bool per_row : {true, false}) {
    SCOPED_TRACE(per_row ? "per row" : "per tensor");
    TempDir d;
    std::vector<uint8_t> codes(N * K);
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>((i * 37) % 0x7e) | (i % 3 == 0 ? 0x80 : 0);
    std::vector<uint16_t> row_scales(N);
    for (int64_t n = 0; n < N; ++n) row_scales[static_cast<size_t>(n)] = f32_to_bf16(0.125f * static_cast<float>(n + 1));
    const nlohmann::json scheme = {{"quant_method", "compressed-tensors"},
                                   {"format", "float-quantized"},
                                   {"config_groups",
                                    {{"group_0",
                                      {{"targets", {"Linear"}},
                                       {"weights", {{"num_bits", 8}, {"type", "float"}, {"strategy", per_row ? "channel" : "tensor"},
                                                    {"symmetric", true}, {"dynamic", false}}}}}}}};
    auto src = open_dir(d, scheme,
                        {tensor("m.weight", "F8_E4M3", {N, K}, codes),
                         per_row ? tensor("m.weight_scale", "BF16", {N, 1}, row_scales)
                                 : tensor("m.weight_scale", "F32", {1}, std::vector<float>{0.75f})});
    ASSERT_TRUE(src.ok()) << src.status().to_string();
    const Tensor* w = (*src)->find("m.weight");
    ASSERT_NE(w, nullptr);
    ASSERT_EQ(w->dtype(), DType::kF8E4M3Rows);
    ASSERT_EQ(w->row_bytes(), K + 4);
    std::vector<float> row(K);
    for (int64_t n = 0; n < N; ++n) {
      const float s = per_row ? bf16_to_f32(row_scales[static_cast<size_t>(n)]) : 0.75f;
      float got_s;
      std::memcpy(&got_s, w->row_ptr(n), 4);
      ASSERT_EQ(got_s, s) << n;
      ASSERT_EQ(std::memcmp(w->row_ptr(n) + 4, codes.data() + n * K, K), 0) << n;
      quant::dequantize_row(DType::kF8E4M3Rows, w->row_ptr(n), row.data(), K);
      for (int64_t k = 0; k < K; ++k) ASSERT_EQ(row[k], fp8_e4m3_to_f32(codes[n * K + k]) * s) << n << ", " << k;
    }
  }
}

TEST(GroupedInt, Q4_1ErrorStaysWithinTheFp16RoundingOfM) {
  quant::GroupedIntWeight w;
  w.n = 4;
  w.k = 64;
  w.group = 32;
  w.bits = 4;
  uint32_t x = 12345;
  auto next = [&x] { return x = x * 1103515245u + 12345u, (x >> 16) & 0x7fff; };
  for (int64_t i = 0; i < w.n * w.k; ++i) w.codes.push_back(static_cast<uint8_t>(next() % 16));
  for (int64_t i = 0; i < w.n * w.groups(); ++i) {
    w.zeros.push_back(static_cast<int32_t>(next() % 16));
    w.scales.push_back(f32_to_fp16(0.001f + static_cast<float>(next()) / 32768.0f * 0.05f));
  }
  auto f = quant::native_format(w, "w");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, DType::kQ4_1);
  const double e = quant::native_max_error_in_scales(w, *f);
  EXPECT_LE(e, 16.0 / 2048);
  EXPECT_GT(e, 0.0) << "some -scale * zero is not an fp16 value";
  std::fill(w.zeros.begin(), w.zeros.end(), 8);
  f = quant::native_format(w, "w");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, DType::kQ4_0);
  EXPECT_EQ(quant::native_max_error_in_scales(w, *f), 0.0);
}

}  // namespace
}  // namespace pagoda
