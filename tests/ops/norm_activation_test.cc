// rms_norm, add_rms_norm, head_rms_norm, swiglu, embedding: every ISA level vs the reference.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/reference/reference_ops.h"
#include "common/half.h"
#include "ops/activation.h"
#include "ops/embedding.h"
#include "ops/norm.h"
#include "test_util.h"

namespace pagoda {
namespace {

using test::nmse;
using test::random_floats;

Tensor from_vec(const std::vector<float>& v, std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(DType::kF32, std::move(shape));
  std::memcpy(t.data(), v.data(), v.size() * 4);
  return t;
}
std::vector<float> to_vec(const Tensor& t) { return std::vector<float>(t.data_as<float>(), t.data_as<float>() + t.numel()); }

class OpsByIsa : public ::testing::TestWithParam<IsaLevel> {};

TEST_P(OpsByIsa, RmsNorm) {
  test::ScopedIsaCap cap(GetParam());
  ThreadPool pool(2);
  for (int64_t D : {8, 64, 576, 1000, 2048}) {
    const int64_t T = 7;
    auto x = random_floats(T * D, 1 + D, -3, 3), w = random_floats(D, 2 + D, 0.5f, 1.5f);
    std::vector<float> ref(T * D);
    reference::rms_norm(x.data(), w.data(), T, D, 1e-5, ref.data());
    Tensor xt = from_vec(x, {T, D}), wt = from_vec(w, {D}), out = Tensor::empty(DType::kF32, {T, D});
    rms_norm(xt, wt, 1e-5, out, pool);
    EXPECT_LT(nmse(to_vec(out), ref), 1e-12) << "D=" << D;
    rms_norm(xt, wt, 1e-5, xt, pool);  // in place
    EXPECT_LT(nmse(to_vec(xt), ref), 1e-12) << "in place D=" << D;
  }
}

TEST_P(OpsByIsa, AddRmsNorm) {
  test::ScopedIsaCap cap(GetParam());
  ThreadPool pool(2);
  const int64_t T = 5, D = 576;
  auto r = random_floats(T * D, 3), x = random_floats(T * D, 4), w = random_floats(D, 5);
  std::vector<float> sum(T * D), ref(T * D);
  for (int64_t i = 0; i < T * D; ++i) sum[i] = r[i] + x[i];
  reference::rms_norm(sum.data(), w.data(), T, D, 1e-6, ref.data());
  Tensor rt = from_vec(r, {T, D}), xt = from_vec(x, {T, D}), wt = from_vec(w, {D});
  add_rms_norm(rt, xt, wt, 1e-6, xt, pool);  // out aliases x
  EXPECT_LT(nmse(to_vec(rt), sum), 1e-14);
  EXPECT_LT(nmse(to_vec(xt), ref), 1e-12);
}

TEST_P(OpsByIsa, HeadRmsNorm) {
  test::ScopedIsaCap cap(GetParam());
  ThreadPool pool(2);
  const int64_t T = 3, H = 4, hd = 128;
  auto x = random_floats(T * H * hd, 6), w = random_floats(hd, 7);
  std::vector<float> ref(x.size());
  reference::rms_norm(x.data(), w.data(), T * H, hd, 1e-6, ref.data());
  Tensor xt = from_vec(x, {T, H * hd}), wt = from_vec(w, {hd});
  head_rms_norm(xt, hd, wt, 1e-6, pool);
  EXPECT_LT(nmse(to_vec(xt), ref), 1e-12);
}

TEST_P(OpsByIsa, SwiGlu) {
  test::ScopedIsaCap cap(GetParam());
  ThreadPool pool(2);
  const int64_t T = 9, F = 1536;
  auto g = random_floats(T * F, 8, -20, 20), u = random_floats(T * F, 9, -2, 2);
  std::vector<float> ref(T * F);
  reference::swiglu(g.data(), u.data(), T * F, ref.data());
  Tensor gt = from_vec(g, {T, F}), ut = from_vec(u, {T, F}), out = Tensor::empty(DType::kF32, {T, F});
  swiglu(gt, ut, out, pool);
  EXPECT_LT(nmse(to_vec(out), ref), 1e-12);
}

TEST_P(OpsByIsa, GegluTanhFused) {
  test::ScopedIsaCap cap(GetParam());
  ThreadPool pool(2);
  const int64_t T = 5, F = 1000;  // F not a multiple of the vector width: the scalar tail runs too
  auto gu = random_floats(T * 2 * F, 14, -12, 12);
  std::vector<float> ref(T * F);
  for (int64_t t = 0; t < T; ++t) reference::geglu_tanh(&gu[t * 2 * F], &gu[t * 2 * F + F], F, &ref[t * F]);
  Tensor gut = from_vec(gu, {T, 2 * F}), out = Tensor::empty(DType::kF32, {T, F});
  geglu_tanh_fused(gut, out, pool);
  EXPECT_LT(nmse(to_vec(out), ref), 1e-12);
}

TEST_P(OpsByIsa, EmbeddingFloatTypes) {
  test::ScopedIsaCap cap(GetParam());
  ThreadPool pool(2);
  const int64_t V = 50, D = 72;
  auto table = random_floats(V * D, 10);
  std::vector<int32_t> ids = {0, 49, 7, 7, 23};
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    Tensor t = Tensor::empty(dt, {V, D});
    std::vector<float> rounded(V * D);
    for (int64_t i = 0; i < V * D; ++i) {
      if (dt == DType::kF32) {
        t.data_as<float>()[i] = rounded[i] = table[i];
      } else if (dt == DType::kF16) {
        t.data_as<uint16_t>()[i] = f32_to_fp16(table[i]);
        rounded[i] = fp16_to_f32(t.data_as<uint16_t>()[i]);
      } else {
        t.data_as<uint16_t>()[i] = f32_to_bf16(table[i]);
        rounded[i] = bf16_to_f32(t.data_as<uint16_t>()[i]);
      }
    }
    Tensor out = Tensor::empty(DType::kF32, {static_cast<int64_t>(ids.size()), D});
    embedding_lookup(t, ids, out, pool);
    for (size_t i = 0; i < ids.size(); ++i)
      for (int64_t j = 0; j < D; ++j)
        ASSERT_EQ(out.data_as<float>()[i * D + j], rounded[ids[i] * D + j]) << dtype_name(dt) << " row " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsa, OpsByIsa, ::testing::ValuesIn(test::supported_isa_levels()),
                         [](const auto& info) { std::string s = isa_level_name(info.param); for (auto& c : s) if (c == '-') c = '_'; return s; });

TEST(Half, RoundTripMatchesHardwareRules) {
  // fp16: exact values survive, ties round to even, overflow to inf, subnormals.
  EXPECT_EQ(f32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_fp16(5.9604644775390625e-08f), 0x0001);
  EXPECT_EQ(f32_to_fp16(1.0f + 1.0f / 2048), 0x3c00);  // tie -> even
  EXPECT_EQ(f32_to_fp16(1.0f + 3.0f / 2048), 0x3c02);  // tie -> even (up)
  for (uint32_t h = 0; h < 0x7c00; ++h) ASSERT_EQ(f32_to_fp16(fp16_to_f32(static_cast<uint16_t>(h))), h);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f818000u)), 0x3f82);
}

}  // namespace
}  // namespace pagoda
