#include "backend/cuda/quant_layout.h"

#include <cstring>

#include "common/check.h"
#include "quant/blocks.h"

namespace pagoda::cuda {
namespace {

struct Field {
  int64_t offset, bytes;  // in the file's block
};

struct Planes {
  int64_t block_bytes = 0;
  Field fields[3];
  int n = 0;  // fields, in device order (codes first)
};

bool planes_of(DType f, Planes* p) {
  switch (f) {
    case DType::kQ4_0: *p = {18, {{2, 16}, {0, 2}}, 2}; return true;
    case DType::kQ4_1: *p = {20, {{4, 16}, {0, 4}}, 2}; return true;
    case DType::kQ5_0: *p = {22, {{6, 16}, {2, 4}, {0, 2}}, 3}; return true;
    case DType::kQ5_1: *p = {24, {{8, 16}, {4, 4}, {0, 4}}, 3}; return true;
    case DType::kQ8_0: *p = {34, {{2, 32}, {0, 2}}, 2}; return true;
    case DType::kQ6_K: *p = {210, {{0, 208}, {208, 2}}, 2}; return true;
    default: return false;
  }
}

static_assert(sizeof(quant::BlockQ4_0) == 18 && sizeof(quant::BlockQ4_1) == 20 && sizeof(quant::BlockQ5_0) == 22 &&
              sizeof(quant::BlockQ5_1) == 24 && sizeof(quant::BlockQ8_0) == 34 && sizeof(quant::BlockQ6_K) == 210);

}  // namespace

bool planar_quant_layout(DType format) {
  Planes p;
  return planes_of(format, &p);
}

int64_t device_row_bytes(DType format, int64_t K) {
  const int64_t rb = row_bytes(format, K);
  return is_quantized(format) ? (rb + 15) / 16 * 16 : rb;
}

void to_device_quant_layout(DType format, const uint8_t* in, uint8_t* out, int64_t rows, int64_t K) {
  const int64_t rb = row_bytes(format, K), drb = device_row_bytes(format, K);
  Planes p;
  const bool planar = planes_of(format, &p);
  PAGODA_CHECK(!planar || rb % p.block_bytes == 0, "to_device_quant_layout: a row is not whole blocks");
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = in + r * rb;
    uint8_t* dst = out + r * drb;
    std::memset(dst + rb, 0, static_cast<size_t>(drb - rb));
    if (!planar) {
      std::memcpy(dst, src, static_cast<size_t>(rb));
      continue;
    }
    const int64_t blocks = rb / p.block_bytes;
    for (int i = 0; i < p.n; ++i) {
      const Field& f = p.fields[i];
      for (int64_t b = 0; b < blocks; ++b) std::memcpy(dst + b * f.bytes, src + b * p.block_bytes + f.offset, f.bytes);
      dst += blocks * f.bytes;
    }
  }
}

}  // namespace pagoda::cuda
