// Readers for the committed reference data (testdata/reference: JSON manifests, raw f32 logits),
// shared by the CPU parity tests and the GPU ones.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagoda::test {

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return nlohmann::json::parse(in);
}

// n little-endian f32 values; a short file fails the calling test.
inline std::vector<float> read_f32(const std::string& path, size_t n) {
  std::vector<float> v(n);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 4));
  EXPECT_EQ(static_cast<size_t>(in.gcount()), n * 4) << path;
  return v;
}

// Index of the first maximum (ties: the lowest index, as torch.argmax).
inline int32_t argmax(const float* row, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = static_cast<int32_t>(i);
  return best;
}

// KL(softmax(want) || softmax(got)) of one row of n logits, in double.
inline double kl_divergence(const float* want, const float* got, int64_t n) {
  double mw = -INFINITY, mg = -INFINITY, zw = 0, zg = 0, kl = 0;
  for (int64_t i = 0; i < n; ++i) {
    mw = std::max<double>(mw, want[i]);
    mg = std::max<double>(mg, got[i]);
  }
  for (int64_t i = 0; i < n; ++i) {
    zw += std::exp(want[i] - mw);
    zg += std::exp(got[i] - mg);
  }
  for (int64_t i = 0; i < n; ++i) {
    const double lw = want[i] - mw - std::log(zw), lg = got[i] - mg - std::log(zg);
    kl += std::exp(lw) * (lw - lg);
  }
  return kl;
}

}  // namespace pagoda::test
