// On-line quantization at load (`--quantization int4|int8|fp8`, model/online_quantization.h) on the
// tiny models, f32 / f16 / bf16 checkpoints in Hugging Face and GGUF form, dense and MoE:
//   1. every decoder linear becomes the mode's native rows (Q4_0 / Q8_0 / F8E4M3Rows), and their values
//      are the plain round-to-nearest of the source weight written here (double arithmetic, its
//      own E4M3 table; int4 ggml's Q4_0 rule, int8 GPTQ's per-channel rule): equal except where
//      the two land on opposite sides of a rounding tie, and within the RTN error budget of the
//      source (half a step; half an E4M3 ulp for fp8); embeddings, lm_head,
//      norms, routers and biases are the source's own tensors; int4's rows are byte-identical to
//      the Q4_0 GGUF files of the same models (the gguf package's quantizer = llama-quantize's);
//   2. the quantized model against the same checkpoint's unquantized forward: greedy agreement and
//      the KL divergence per position, reported and bounded per mode;
//   3. the weight bytes the memory check sees are the quantized rows';
//   4. refusals: an already-quantized checkpoint (GPTQ directory, Q8_0 GGUF), an unknown mode.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "common/half.h"
#include "cpu_greedy_run.h"
#include "reference_data.h"
#include "model/family.h"
#include "model/model_loader.h"
#include "model/online_quantization.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "test_paths.h"

namespace pagoda {
namespace {

const WeightQuantization kModes[] = {WeightQuantization::kInt4, WeightQuantization::kInt8, WeightQuantization::kFp8};

// Checkpoints of every source dtype and layout the flag takes.
const char* const kModels[] = {
    "tiny/llama3",                 // HF f32
    "tiny/llama3/model-f16.gguf",  // GGUF f16 (interleaved RoPE rows)
    "tiny/llama-mqa-bf16",         // HF bf16
    "tiny/qwen2",                  // HF sharded, q/k/v biases
    "tiny/mixtral",                // HF experts, one tensor each
    "tiny/qwen3-moe/model-f16.gguf",  // GGUF stacked experts [E, N, K]
};

std::string model_path(const char* m) { return test::models_dir() + "/" + m; }

// ---- the plain reference quantizers (double arithmetic) ----

double fp16_round(double x) { return fp16_to_f32(f32_to_fp16(static_cast<float>(x))); }

// Nearest E4M3 value of x (ties to the even code), saturating at 448: from the table of every value.
double e4m3_nearest(double x) {
  static const std::vector<double> values = [] {
    std::vector<double> v;
    for (int c = 0; c < 127; ++c) {  // 0x00 .. 0x7e, ascending
      const int e = (c >> 3) & 15, m = c & 7;
      v.push_back(e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1 + m / 8.0) * std::ldexp(1.0, e - 7));
    }
    return v;
  }();
  const double a = std::min(std::abs(x), 448.0);
  size_t hi = static_cast<size_t>(std::lower_bound(values.begin(), values.end(), a) - values.begin());
  if (hi == 0) return 0.0;
  if (hi >= values.size()) hi = values.size() - 1;
  const size_t lo = hi - 1;
  const double dlo = a - values[lo], dhi = values[hi] - a;
  const size_t pick = (dhi < dlo || (dhi == dlo && hi % 2 == 0)) ? hi : lo;
  return std::copysign(values[pick], x);
}

struct Check {
  int64_t elements = 0, mismatches = 0;
  double worst_over_budget = 0;  // max |got - w| / budget
};

// Row r of W [n, k] (f32 source values) against `got` (the dequantized native row).
void check_row(WeightQuantization q, const float* w, const float* got, int64_t k, Check& c) {
  const int64_t group = online_quantization_group(k, q);
  ASSERT_GT(group, 0);
  for (int64_t g0 = 0; g0 < k; g0 += group) {
    double amax = 0, lo = 0;
    for (int64_t j = g0; j < g0 + group; ++j) {
      amax = std::max(amax, std::abs(static_cast<double>(w[j])));
      lo = std::min(lo, static_cast<double>(w[j]));
    }
    for (int64_t j = g0; j < g0 + group; ++j) {
      double want, budget;
      if (q == WeightQuantization::kFp8) {
        const double s = amax / 448.0;
        // F8E4M3Rows: the code times the f32 scale, exact in f32 (no bf16 rounding)
        want = s == 0 ? 0.0 : static_cast<double>(static_cast<float>(e4m3_nearest(w[j] / s)) * static_cast<float>(s));
        // half an E4M3 ulp (2^-4 relative; 2^-10 x s among the subnormals)
        budget = (std::abs(w[j]) * std::ldexp(1.0, -4) + s * std::ldexp(1.0, -10)) * (1 + std::ldexp(1.0, -8));
      } else if (q == WeightQuantization::kInt4) {
        // ggml's Q4_0: d = the block's signed extreme / -8, code = min(15, trunc(w / d + 8.5)), stored fp16(d)
        double ext = 0;
        for (int64_t i = g0; i < g0 + group; ++i)
          if (std::abs(static_cast<double>(w[i])) > std::abs(ext)) ext = w[i];
        const double d = ext / -8;
        const double unclamped = d == 0 ? 8 : std::trunc(w[j] / d + 8.5);
        const double code = std::min(15.0, unclamped);
        const double dh = fp16_round(d);
        want = dh * (code - 8);
        // half a step, plus the fp16 rounding of d over up to 8 steps; the side opposite the extreme
        // clamps at code 15 (7 d): up to a whole step there (the format's own rule)
        budget = std::abs(d) * ((unclamped > 15 ? 1.0 : 0.5) + 8 * std::ldexp(1.0, -11)) + 1e-12;
      } else {
        const int bits = 8;
        const double maxq = (1 << bits) - 1, zero = 1 << (bits - 1);
        // GPTQ's symmetric range: [-amax, amax], or [0, amax] for a group without negative weights
        const double s = amax == 0 ? fp16_round(2.0 / maxq) : fp16_round((lo < 0 ? 2 * amax : amax) / maxq);
        const double unclamped = std::nearbyint(w[j] / s) + zero;
        const double code = std::clamp(unclamped, 0.0, maxq);
        want = s * (code - zero);
        // half a step (the fp16 rounding of the scale is inside: s is the rounded scale). A group
        // without negative weights has GPTQ's range [0, amax] around the zero 2^(bits-1): its codes
        // above maxq clamp (the formats' own rule), outside any step budget.
        budget = unclamped > maxq ? INFINITY : s / 2 * (1 + 1e-6) + 1e-12;
      }
      ++c.elements;
      if (static_cast<double>(got[j]) != want) ++c.mismatches;
      c.worst_over_budget = std::max(c.worst_over_budget, std::abs(got[j] - static_cast<double>(w[j])) / budget);
    }
  }
}

DType expected_format(WeightQuantization q) {
  return q == WeightQuantization::kInt4 ? DType::kQ4_0 : q == WeightQuantization::kInt8 ? DType::kQ8_0 : DType::kF8E4M3Rows;
}

TEST(OnlineQuantization, WeightsAreThePlainRoundToNearest) {
  for (const char* m : kModels) {
    for (WeightQuantization q : kModes) {
      SCOPED_TRACE(std::string(m) + " " + std::string(weight_quantization_name(q)));
      auto base = load_weight_source(model_path(m));
      ASSERT_TRUE(base.ok()) << base.status().to_string();
      auto config = model_config_from_source(**base);
      ASSERT_TRUE(config.ok());
      auto plain = load_weight_source(model_path(m));  // the unquantized tensors, for comparison
      ASSERT_TRUE(plain.ok());
      auto quantized = quantize_weight_source(std::move(*base), *config, q, 2);
      ASSERT_TRUE(quantized.ok()) << quantized.status().to_string();
      const WeightNaming naming = (*plain)->format() == WeightFormat::kGguf ? WeightNaming::kGguf : WeightNaming::kHuggingFace;
      std::set<std::string> linears;
      for (const TensorDecl& d : family_of(*config).tensor_table(*config)) {
        if (!online_quantized_format(d, q)) continue;
        if (d.experts > 0 && naming == WeightNaming::kHuggingFace)
          for (int64_t e = 0; e < d.experts; ++e) linears.insert(expert_tensor_name(d, e));
        else
          linears.insert(decl_name(d, naming));
      }
      ASSERT_GE(linears.size(), 7u * static_cast<size_t>(config->num_layers) / (config->is_moe() ? 2 : 1));
      Check c;
      for (const std::string& name : (*plain)->names()) {
        const Tensor* src = (*plain)->find(name);
        const Tensor* got = (*quantized)->find(name);
        ASSERT_NE(got, nullptr) << name;
        if (!src) continue;
        if (!linears.count(name)) {
          // Everything else is the checkpoint's own tensor: same dtype, same bytes.
          ASSERT_EQ(got->dtype(), src->dtype()) << name;
          ASSERT_EQ(got->nbytes(), src->nbytes()) << name;
          EXPECT_EQ(std::memcmp(got->data(), src->data(), static_cast<size_t>(src->nbytes())), 0) << name;
          continue;
        }
        ASSERT_EQ(got->dtype(), expected_format(q)) << name;
        ASSERT_EQ(got->shape(), src->shape()) << name;
        const int64_t k = src->dim(-1);
        std::vector<float> w(static_cast<size_t>(k)), g(static_cast<size_t>(k));
        for (int64_t r = 0; r < src->rows(); ++r) {
          quant::dequantize_row(src->dtype(), src->row_ptr(r), w.data(), k);
          quant::dequantize_row(got->dtype(), got->row_ptr(r), g.data(), k);
          check_row(q, w.data(), g.data(), k, c);
        }
      }
      // Ties of round-to-nearest land either way between f32 (the quantizer, as the formats' own
      // tools) and double (this reference): a few per million elements.
      EXPECT_LE(c.mismatches, 1 + c.elements / 1000) << c.mismatches << " of " << c.elements;
      EXPECT_LE(c.worst_over_budget, 1.0);
      std::printf("[online-quant] %-30s %-4s %zu linears, %lld values: %lld differ from the plain RTN, max |error| %.3f "
                  "of the budget\n",
                  m, std::string(weight_quantization_name(q)).c_str(), linears.size(), static_cast<long long>(c.elements),
                  static_cast<long long>(c.mismatches), c.worst_over_budget);
    }
  }
}

// int4 is llama-quantize's Q4_0: the linears of a Q4_0 GGUF written from the same f32 weights are
// the same bytes.
TEST(OnlineQuantization, Int4RowsAreTheQ4_0FilesBytes) {
  for (const char* m : {"tiny/qwen2", "tiny/mixtral"}) {
    SCOPED_TRACE(m);
    auto f32 = load_weight_source(model_path(m) + "/model-f32.gguf");
    auto q4 = load_weight_source(model_path(m) + "/model-q4_0.gguf");
    ASSERT_TRUE(f32.ok() && q4.ok());
    auto config = model_config_from_source(**f32);
    ASSERT_TRUE(config.ok());
    auto quantized = quantize_weight_source(std::move(*f32), *config, WeightQuantization::kInt4, 2);
    ASSERT_TRUE(quantized.ok()) << quantized.status().to_string();
    int same = 0;
    for (const TensorDecl& d : family_of(*config).tensor_table(*config)) {
      if (!online_quantized_format(d, WeightQuantization::kInt4)) continue;
      const Tensor* got = (*quantized)->find(d.gguf_name);
      const Tensor* want = (*q4)->find(d.gguf_name);
      ASSERT_TRUE(got && want) << d.gguf_name;
      if (want->dtype() != DType::kQ4_0) continue;  // the file's mix keeps some tensors in another type
      ASSERT_EQ(got->nbytes(), want->nbytes()) << d.gguf_name;
      EXPECT_EQ(std::memcmp(got->data(), want->data(), static_cast<size_t>(got->nbytes())), 0) << d.gguf_name;
      ++same;
    }
    EXPECT_GE(same, 2 * config->num_layers) << "too few Q4_0 linears compared";
    std::printf("[online-quant] %s: %d int4 linears byte-identical to model-q4_0.gguf's\n", m, same);
  }
}

// Greedy agreement and KL(16-bit || quantized) per position, for each model and mode, against
// bounds of about twice the largest measured on these random tiny models (printed; KL means, all
// six models: int4 0.09-0.22, int8 0.9e-3-2.9e-3, fp8 7e-3-4.2e-2: E4M3's 3 mantissa bits are a
// coarser grid than int8's per-channel steps for these Gaussian-like rows). Random weights have no
// outliers for RTN to clip and no redundancy to hide the error: a trained model's KL is far lower
// (docs/quantization.md). The weights themselves are checked exactly by the test above.
double kl_bound(WeightQuantization q) {
  switch (q) {
    case WeightQuantization::kInt4: return 0.6;
    case WeightQuantization::kInt8: return 0.01;
    default: return 0.08;
  }
}

TEST(OnlineQuantization, ModelAgreesWithItsOwnUnquantizedForward) {
  ThreadPool pool(2);
  for (const char* m : kModels) {
    auto base = load_model(model_path(m));
    ASSERT_TRUE(base.ok()) << base.status().to_string();
    const int64_t V = base->config.vocab_size;
    std::vector<int32_t> prompt = {1};
    for (int i = 1; i < 48; ++i) prompt.push_back(3 + (i * 37 + i * i) % static_cast<int>(V - 3));
    const int steps = 16;
    const auto want = test::cpu_greedy_run(base->config, *base->model, prompt, steps, pool);
    for (WeightQuantization q : kModes) {
      SCOPED_TRACE(std::string(m) + " " + std::string(weight_quantization_name(q)));
      ModelLoadOptions lo;
      lo.quantization = q;
      auto loaded = load_model(model_path(m), lo);
      ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
      const auto got = test::cpu_greedy_run(loaded->config, *loaded->model, prompt, steps, pool);
      const int64_t T = static_cast<int64_t>(prompt.size());
      int top1 = 0;
      double kl_sum = 0, kl_max = 0;
      for (int64_t p = 0; p < T; ++p) {
        const float* w = want.logits.data() + p * V;
        const float* g = got.logits.data() + p * V;
        const double kl = test::kl_divergence(w, g, V);
        kl_sum += kl;
        kl_max = std::max(kl_max, kl);
        top1 += test::argmax(g, V) == test::argmax(w, V);
      }
      int greedy_equal = 0;
      for (; greedy_equal < steps && got.greedy[greedy_equal] == want.greedy[greedy_equal]; ++greedy_equal) {
      }
      const double kl_mean = kl_sum / static_cast<double>(T);
      EXPECT_LE(kl_mean, kl_bound(q));
      // top-1 agreement: most positions (a random tiny model has many near-ties)
      EXPECT_GE(top1, T * (q == WeightQuantization::kInt4 ? 6 : q == WeightQuantization::kFp8 ? 7 : 9) / 10);
      std::printf("[online-quant-model] %-30s %-4s top-1 %d/%lld, greedy %d/%d, KL mean %.2e max %.2e\n", m,
                  std::string(weight_quantization_name(q)).c_str(), top1, static_cast<long long>(T), greedy_equal, steps,
                  kl_mean, kl_max);
    }
  }
}

TEST(OnlineQuantization, MemoryCheckSeesTheQuantizedBytes) {
  const std::string path = model_path("tiny/llama3");
  auto plain = load_weight_source(path);
  ASSERT_TRUE(plain.ok());
  auto config = model_config_from_source(**plain);
  ASSERT_TRUE(config.ok());
  int64_t f32_bytes = 0, linear_elems = 0, linear_rows = 0;
  for (const std::string& name : (*plain)->names()) f32_bytes += (*plain)->find(name)->nbytes();
  for (const TensorDecl& d : family_of(*config).tensor_table(*config))
    if (d.linear && d.layer >= 0) {
      linear_elems += (*plain)->find(d.hf_name)->numel();
      linear_rows += (*plain)->find(d.hf_name)->rows();
    }
  for (WeightQuantization q : kModes) {
    SCOPED_TRACE(std::string(weight_quantization_name(q)));
    int64_t seen = -1;
    ModelLoadOptions lo;
    lo.quantization = q;
    lo.precheck = [&seen](const ModelConfig&, int64_t weight_bytes, int64_t) {
      seen = weight_bytes;
      return Status();
    };
    auto loaded = load_model(path, lo);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    int64_t held = 0;
    for (const std::string& name : loaded->weights->names()) held += loaded->weights->find(name)->nbytes();
    // f32 source: the linears' 4 bytes an element become Q4_0's 18 / 32, Q8_0's 34 / 32, bf16's 2.
    const int64_t per32 = q == WeightQuantization::kInt4 ? 18 : q == WeightQuantization::kInt8 ? 34 : 64;
    EXPECT_EQ(held, f32_bytes - linear_elems * 4 + linear_elems / 32 * per32);
    EXPECT_EQ(seen, held);
    // A CPU load keeps fp8 as bf16 rows; a device load keeps the F8E4M3Rows: a byte an element and
    // an f32 scale a row.
    auto predicted = online_quantized_bytes(*config, **plain, q, /*fp8_rows=*/false);
    ASSERT_TRUE(predicted.ok());
    EXPECT_EQ(*predicted, held);
    auto on_device = online_quantized_bytes(*config, **plain, q, /*fp8_rows=*/true);
    ASSERT_TRUE(on_device.ok());
    EXPECT_EQ(*on_device, q == WeightQuantization::kFp8 ? f32_bytes - linear_elems * 3 + linear_rows * 4 : held);
  }
}

TEST(OnlineQuantization, RefusesQuantizedCheckpointsAndUnknownModes) {
  for (const char* m : {"tiny/quant/llama3-gptq-w4g128", "tiny/quant/llama3-ct-fp8-channel", "tiny/llama3/model-q8_0.gguf"}) {
    ModelLoadOptions lo;
    lo.quantization = WeightQuantization::kInt4;
    auto r = load_model(model_path(m), lo);
    ASSERT_FALSE(r.ok()) << m;
    const std::string msg = r.status().message();
    EXPECT_NE(msg.find("already quantized"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--quantization int4"), std::string::npos) << msg;
    lo.precheck = [](const ModelConfig&, int64_t, int64_t) { return Status(); };
    r = load_model(model_path(m), lo);  // refused before the memory check too
    ASSERT_FALSE(r.ok()) << m;
    EXPECT_NE(r.status().message().find("already quantized"), std::string::npos) << r.status().message();
  }
  for (const char* bad : {"int3", "INT4", "q4_0", "gptq"}) {
    auto q = parse_weight_quantization(bad);
    ASSERT_FALSE(q.ok()) << bad;
    EXPECT_NE(q.status().message().find(bad), std::string::npos);
    EXPECT_NE(q.status().message().find("int4, int8, fp8"), std::string::npos) << q.status().message();
  }
  for (WeightQuantization q : {WeightQuantization::kNone, WeightQuantization::kInt4, WeightQuantization::kInt8, WeightQuantization::kFp8})
    EXPECT_EQ(*parse_weight_quantization(weight_quantization_name(q)), q);
}

}  // namespace
}  // namespace pagoda
