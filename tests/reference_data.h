// Readers for the committed reference data (testdata/reference: JSON manifests, raw f32 logits),
// shared by the CPU parity tests and the GPU ones.
#pragma once

#include <gtest/gtest.h>

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

}  // namespace pagoda::test
