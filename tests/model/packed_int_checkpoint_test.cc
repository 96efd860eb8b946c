// GPTQ, AWQ, compressed-tensors and FP8 checkpoints (models/tiny/quant, written by
// tools/make_quantized_checkpoint.py exactly as the reference packers lay them out) against the
// packer's own unpacked values (reference.safetensors beside each: codes, zeros, scales):
//   1. decode: each packed linear becomes "<m>.weight" in the expected native format, and its
//      rows dequantized equal scale * (code - zero) exactly (Q4_0, Q8_0) or within the fp16
//      rounding of Q4_1's m (|error| <= 2^-11 * 16 * scale, quant/grouped_int.h); FP8 weights
//      equal bf16(fp8 * scale);
//   2. the model on the CPU kernels (integer dot products over q8 activations) against the same
//      model with those f32 weights through the f32 kernels: logits within kQuantLogitBound of
//      the range, top-1 and the greedy continuation equal except at near-ties (the reference's gap
//      below twice the logit error there, as reference_parity_test's quantized sets), and the
//      KL divergence per position reported and bounded;
//   3. the weight bytes the memory planner counts are the native rows';
//   4. act-order GPTQ: the decoded columns are the packer's in the order "<m>.input_order" names, the
//      model (which gathers its activations) agrees with the f32 forward of the packer's weights in
//      their own order, and fused modules whose orders differ are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "common/half.h"
#include "cpu_greedy_run.h"
#include "loader/hf_model_dir.h"
#include "loader/packed_int_checkpoint.h"
#include "loader/safetensors.h"
#include "loader/weight_source.h"
#include "model/family.h"
#include "model/model_loader.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "test_paths.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

// As reference_parity_test: the q8 activations' bound on |logit - dequantized-f32 logit|, as a
// fraction of the range, and the most near-ties a checkpoint may have.
constexpr double kQuantLogitBound = 0.08;
constexpr double kQuantMaxTieFraction = 0.08;
// Mean KL(f32 || quantized) over the prompt's positions, in nats: the activations' share (the
// weights are the same). Measured on these random tiny models: 3.7e-4 to 2.0e-3 for the integer sets
// (q8 activations; the 8-bit sets as much as the 4-bit ones), 9e-5 for FP8 (bf16 weights); the bound
// is 5x the largest. A wrong group's scale gives 0.1 to 8.
constexpr double kMaxMeanKl = 1e-2;

struct Variant {
  const char* name;
  DType format;  // what every packed linear decodes to
};

const Variant kVariants[] = {
    {"llama3-gptq-w4g128", DType::kQ4_0},         {"llama3-gptq-w4g32-asym", DType::kQ4_1},
    {"llama3-gptq-w4g64-asym-v2", DType::kQ4_1},  {"llama3-gptq-w4-channel", DType::kQ4_0},
    {"llama3-gptq-w8g128", DType::kQ8_0},         {"qwen2-gptq-w4g32", DType::kQ4_0},
    {"llama3-awq-w4g128", DType::kQ4_1},          {"llama3-awq-w4g32", DType::kQ4_1},
    {"llama3-ct-w4a16-g128", DType::kQ4_0},       {"llama3-ct-w4a16-g64-asym", DType::kQ4_1},
    {"llama3-ct-w8a16-channel", DType::kQ8_0},
    // act-order: columns reordered into contiguous groups, the activations gathered (input_order)
    {"llama3-gptq-w4g32-actorder", DType::kQ4_0},
    // FP8 E4M3 weights: per channel kept as the codes with their row's f32 scale (exact); per block
    // x scale rounded to bf16 at load (exact f32 products; |error| <= 2^-9 relative).
    {"llama3-ct-fp8-channel", DType::kF8E4M3Rows},      {"llama3-fp8-block128", DType::kBF16},
};

std::string variant_dir(const std::string& name) { return test::models_dir() + "/tiny/quant/" + name; }

// The packer's dequantized f32 weights "<m>.weight" [N, K] from reference.safetensors.
std::map<std::string, Tensor> reference_weights(const std::string& dir) {
  auto file = SafetensorsFile::open(dir + "/reference.safetensors");
  PAGODA_CHECK(file.ok(), "{}", file.status().to_string());
  std::map<std::string, Tensor> out;
  for (const auto& info : (*file)->tensors()) {
    if (info.name.ends_with(".fp8")) {
      // FP8 codes [N, K] and the scale grid [SR, SC] (one cell per row, or per block).
      const std::string m = info.name.substr(0, info.name.size() - 4);
      const auto* si = (*file)->find_tensor(m + ".scales");
      PAGODA_CHECK(si && si->dtype_name == "F32" && si->shape.size() == 2, "{}", m);
      const int64_t N = info.shape[0], K = info.shape[1], SR = si->shape[0], SC = si->shape[1];
      const int64_t br = (N + SR - 1) / SR, bc = (K + SC - 1) / SC;
      std::vector<float> s(static_cast<size_t>(SR * SC));
      std::memcpy(s.data(), (*file)->tensor_bytes(*si).data(), s.size() * 4);
      const uint8_t* q = (*file)->tensor_bytes(info).data();
      Tensor w = Tensor::empty(DType::kF32, {N, K});
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k)
          w.data_as<float>()[n * K + k] = fp8_e4m3_to_f32(q[n * K + k]) * s[static_cast<size_t>((n / br) * SC + k / bc)];
      out.emplace(m + ".weight", std::move(w));
      continue;
    }
    if (!info.name.ends_with(".codes")) continue;
    const std::string m = info.name.substr(0, info.name.size() - 6);
    const auto* zi = (*file)->find_tensor(m + ".zeros");
    const auto* si = (*file)->find_tensor(m + ".scales");
    PAGODA_CHECK(zi && si && info.dtype_name == "U8" && zi->dtype_name == "I32" && si->dtype_name == "F32", "{}", m);
    const int64_t N = info.shape[0], K = info.shape[1], G = si->shape[1];
    const uint8_t* q = (*file)->tensor_bytes(info).data();
    std::vector<int32_t> gi(static_cast<size_t>(K));  // the group of input k: g_idx (act-order) or k / (K / G)
    for (int64_t k = 0; k < K; ++k) gi[static_cast<size_t>(k)] = static_cast<int32_t>(k / (K / G));
    if (const auto* ii = (*file)->find_tensor(m + ".g_idx")) std::memcpy(gi.data(), (*file)->tensor_bytes(*ii).data(), gi.size() * 4);
    std::vector<int32_t> z(static_cast<size_t>(N * G));
    std::vector<float> s(static_cast<size_t>(N * G));
    std::memcpy(z.data(), (*file)->tensor_bytes(*zi).data(), z.size() * 4);
    std::memcpy(s.data(), (*file)->tensor_bytes(*si).data(), s.size() * 4);
    Tensor w = Tensor::empty(DType::kF32, {N, K});
    float* wp = w.data_as<float>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const int64_t g = n * G + gi[static_cast<size_t>(k)];
        wp[n * K + k] = s[static_cast<size_t>(g)] * static_cast<float>(static_cast<int32_t>(q[n * K + k]) - z[static_cast<size_t>(g)]);
      }
    out.emplace(m + ".weight", std::move(w));
  }
  return out;
}

TEST(PackedIntCheckpoint, DecodesToThePackersValues) {
  int checked = 0;
  for (const Variant& v : kVariants) {
    const std::string dir = variant_dir(v.name);
    SCOPED_TRACE(dir);
    ASSERT_TRUE(fs::exists(dir)) << "run scripts/make_test_models.sh (tools/make_quantized_checkpoint.py)";
    auto src = load_weight_source(dir);
    ASSERT_TRUE(src.ok()) << src.status().to_string();
    for (const std::string& name : (*src)->names())
      for (const char* packed : {".qweight", ".qzeros", ".scales", ".g_idx", ".weight_packed", ".weight_scale",
                                 ".weight_shape", ".weight_scale_inv", ".input_scale"})
        EXPECT_FALSE(name.ends_with(packed)) << name << " is listed: the packed parts must be replaced by <m>.weight";
    const auto ref = reference_weights(dir);
    ASSERT_FALSE(ref.empty());
    double worst_in_scales = 0;
    for (const auto& [name, want] : ref) {
      const Tensor* t = (*src)->find(name);
      ASSERT_NE(t, nullptr) << name;
      ASSERT_EQ(t->dtype(), v.format) << name << " " << t->shape_string();
      ASSERT_EQ(t->shape(), want.shape()) << name;
      const int64_t K = t->dim(1);
      // Act-order: column j of the decoded weight is input order[j] of the packer's.
      std::vector<int32_t> order(static_cast<size_t>(K));
      for (int64_t k = 0; k < K; ++k) order[static_cast<size_t>(k)] = static_cast<int32_t>(k);
      const std::string order_name = name.substr(0, name.size() - 7) + ".input_order";
      if (const Tensor* o = (*src)->find(order_name)) {
        ASSERT_EQ(o->numel(), K);
        std::memcpy(order.data(), o->data(), order.size() * 4);
      }
      EXPECT_EQ(std::string(v.name).find("actorder") != std::string::npos, (*src)->find(order_name) != nullptr) << name;
      std::vector<float> row(static_cast<size_t>(K)), wrow(static_cast<size_t>(K));
      for (int64_t r = 0; r < t->dim(0); ++r) {
        quant::dequantize_row(t->dtype(), t->row_ptr(r), row.data(), K);
        for (int64_t k = 0; k < K; ++k) wrow[static_cast<size_t>(k)] = want.data_as<float>()[r * K + order[static_cast<size_t>(k)]];
        const float* w = wrow.data();
        for (int64_t k = 0; k < K; ++k) {
          if (v.format == DType::kBF16) {
            ASSERT_EQ(row[k], bf16_to_f32(f32_to_bf16(w[k]))) << name << " [" << r << ", " << k << "]";
            continue;
          }
          if (v.format != DType::kQ4_1) {
            ASSERT_EQ(row[k], w[k]) << name << " [" << r << ", " << k << "]";
            continue;
          }
          const auto* blk = reinterpret_cast<const quant::BlockQ4_1*>(t->row_ptr(r)) + k / quant::kQK;
          const double s = std::abs(fp16_to_f32(blk->d));
          const double err = std::abs(static_cast<double>(row[k]) - w[k]);
          ASSERT_LE(err, 16.0 * s / 2048.0 + 1e-7 * std::abs(w[k])) << name << " [" << r << ", " << k << "]";
          if (s > 0) worst_in_scales = std::max(worst_in_scales, err / s);
        }
      }
    }
    std::printf("[packed-int] %-28s -> %s, %zu linears, max |error| %.3g x scale (bound %s)\n", v.name,
                std::string(dtype_name(v.format)).c_str(), ref.size(), worst_in_scales,
                v.format == DType::kQ4_1   ? "16 x 2^-11 = 7.8e-3"
                : v.format == DType::kBF16 ? "bf16 rounding of the exact product"
                : v.format == DType::kF8E4M3Rows ? "exact: the codes and scales as they are"
                                           : "0, exact");
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(std::size(kVariants)));
}

TEST(PackedIntCheckpoint, ModelAgreesWithItsDequantizedForward) {
  ThreadPool pool(2);
  for (const Variant& v : kVariants) {
    const std::string dir = variant_dir(v.name);
    SCOPED_TRACE(dir);
    ASSERT_TRUE(fs::exists(dir));
    auto loaded = load_model(dir);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    // The f32 forward of the same weights: the packer's values through the f32 kernels.
    const auto ref = reference_weights(dir);
    auto lookup = [&](const std::string& name) -> Result<const Tensor*> {
      if (auto it = ref.find(name); it != ref.end()) return &it->second;
      // the packer's weights are in input order: no gather
      if (name.ends_with(".input_order")) return not_found("{}", name);
      return loaded->weights->get(name);
    };
    ModelLoadParams params;
    params.max_positions = loaded->max_model_len;
    auto f32 = family_of(loaded->config).load(loaded->config, WeightNaming::kHuggingFace, lookup, params);
    ASSERT_TRUE(f32.ok()) << f32.status().to_string();

    const int64_t V = loaded->config.vocab_size;
    std::vector<int32_t> prompt = {1};
    for (int i = 1; i < 48; ++i) prompt.push_back(3 + (i * 37 + i * i) % static_cast<int>(V - 3));
    const int steps = 16;
    const auto got = test::cpu_greedy_run(loaded->config, *loaded->model, prompt, steps, pool);
    const auto want = test::cpu_greedy_run(loaded->config, **f32, prompt, steps, pool);
    double range = 0;
    for (float x : want.logits) range = std::max(range, std::abs(static_cast<double>(x)));
    int ties = 0, top1 = 0;
    double kl_sum = 0, kl_max = 0, worst = 0;
    const int64_t T = static_cast<int64_t>(prompt.size());
    for (int64_t p = 0; p < T; ++p) {
      const float* w = want.logits.data() + p * V;
      const float* g = got.logits.data() + p * V;
      double dmax = 0, mw = -INFINITY, mg = -INFINITY;
      for (int64_t i = 0; i < V; ++i) {
        dmax = std::max(dmax, std::abs(static_cast<double>(g[i]) - w[i]));
        mw = std::max<double>(mw, w[i]);
        mg = std::max<double>(mg, g[i]);
      }
      worst = std::max(worst, dmax);
      EXPECT_LE(dmax, kQuantLogitBound * range) << "position " << p;
      // KL(p_f32 || p_quantized) from log-softmaxes.
      double zw = 0, zg = 0;
      for (int64_t i = 0; i < V; ++i) {
        zw += std::exp(w[i] - mw);
        zg += std::exp(g[i] - mg);
      }
      double kl = 0;
      for (int64_t i = 0; i < V; ++i) {
        const double lw = w[i] - mw - std::log(zw), lg = g[i] - mg - std::log(zg);
        kl += std::exp(lw) * (lw - lg);
      }
      kl_sum += kl;
      kl_max = std::max(kl_max, kl);
      const int32_t a = test::argmax(g, V), b = test::argmax(w, V);
      if (a == b) {
        ++top1;
        continue;
      }
      EXPECT_LT(static_cast<double>(w[b]) - w[a], 2 * dmax) << "top-1 differs at position " << p << " beyond a near-tie";
      ++ties;
    }
    int greedy_equal = 0;
    for (; greedy_equal < steps && got.greedy[greedy_equal] == want.greedy[greedy_equal]; ++greedy_equal) {
    }
    if (greedy_equal < steps) {
      const float* w = want.step_logits.data() + static_cast<int64_t>(greedy_equal) * V;
      const float* g = got.step_logits.data() + static_cast<int64_t>(greedy_equal) * V;
      double dmax = 0;
      for (int64_t i = 0; i < V; ++i) dmax = std::max(dmax, std::abs(static_cast<double>(g[i]) - w[i]));
      EXPECT_LT(static_cast<double>(w[want.greedy[greedy_equal]]) - w[got.greedy[greedy_equal]], 2 * dmax)
          << "greedy token " << greedy_equal << " differs beyond a near-tie";
    }
    EXPECT_LE(ties, 1 + static_cast<int>(kQuantMaxTieFraction * T));
    const double kl_mean = kl_sum / static_cast<double>(T);
    EXPECT_LE(kl_mean, kMaxMeanKl);
    std::printf("[packed-int-model] %-28s top-1 %d/%lld, greedy %d/%d, max|diff| %.2e x range, KL mean %.2e max %.2e\n",
                v.name, top1, static_cast<long long>(T), greedy_equal, steps, worst / range, kl_mean, kl_max);
  }
}

TEST(PackedIntCheckpoint, MemoryPlanCountsTheNativeBytes) {
  const std::string dir = variant_dir("llama3-gptq-w4g128");
  auto src = load_weight_source(dir);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  auto f32 = load_weight_source(test::models_dir() + "/tiny/llama3");
  ASSERT_TRUE(f32.ok());
  int64_t bytes = 0, want = 0;
  for (const std::string& name : (*src)->names()) {
    const Tensor* t = (*src)->find(name);
    ASSERT_NE(t, nullptr) << name << ": every listed tensor of a decoded checkpoint is usable";
    bytes += t->nbytes();
    const Tensor* orig = (*f32)->find(name);
    ASSERT_NE(orig, nullptr) << name;
    // Q4_0: 18 bytes per 32 weights; everything else as the f32 source.
    want += t->dtype() == DType::kQ4_0 ? orig->numel() / 32 * 18 : orig->nbytes();
  }
  EXPECT_EQ(bytes, want);
  // `pagoda memplan` on config.json alone takes the same format for the linears.
  auto dir_src = HfModelDir::open(dir);
  ASSERT_TRUE(dir_src.ok());
  auto planned = packed_int_linear_format((*dir_src)->config());
  ASSERT_TRUE(planned.ok()) << planned.status().to_string();
  ASSERT_TRUE(planned->has_value());
  EXPECT_EQ(**planned, DType::kQ4_0);
  for (const char* v : {"llama3-awq-w4g128", "llama3-ct-w8a16-channel", "llama3-gptq-w4g32-asym"}) {
    auto d = HfModelDir::open(variant_dir(v));
    ASSERT_TRUE(d.ok());
    auto f = packed_int_linear_format((*d)->config());
    ASSERT_TRUE(f.ok() && f->has_value()) << v;
    auto s = load_weight_source(variant_dir(v));
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(**f, (*s)->find("model.layers.0.mlp.down_proj.weight")->dtype()) << v;
  }
  int64_t f32_bytes = 0;
  for (const std::string& name : (*f32)->names()) f32_bytes += (*f32)->find(name)->nbytes();
  EXPECT_LT(bytes, f32_bytes);
  std::printf("[packed-int] weight bytes %lld (f32 source %lld)\n", static_cast<long long>(bytes), static_cast<long long>(f32_bytes));
}

TEST(PackedIntCheckpoint, ActOrderModulesOfOneInputMustShareTheirOrder) {
  // q and k quantized in different orders cannot be one fused matmul over one gathered input.
  auto m = load_model(variant_dir("llama3-gptq-w4g32-actorder-mismatch"));
  ASSERT_FALSE(m.ok());
  const std::string msg = m.status().message();
  EXPECT_NE(msg.find("different act-order input orders"), std::string::npos) << msg;
  EXPECT_NE(msg.find("attn_q.weight"), std::string::npos) << msg;
}

}  // namespace
}  // namespace pagoda
