// Weight repacking for the CPU kernels (layouts documented in kernels.h). Runs once per weight at
// load time; plain scalar code, parallelism is the loader's business.
#include <cstring>

#include "backend/cpu/kernels.h"
#include "common/check.h"
#include "quant/blocks.h"

namespace pagoda::cpu {
namespace {

using namespace quant;

bool has_min(DType t) { return t == DType::kQ4_1 || t == DType::kQ5_1; }
bool has_qh(DType t) { return t == DType::kQ5_0 || t == DType::kQ5_1; }

// Per-row accessors of one GGUF block of a legacy format.
struct LegacyBlock {
  uint16_t d = 0, m = 0;
  const uint8_t* qs = nullptr;  // 16 bytes of nibbles, or 32 int8 for q8_0
  uint32_t qh = 0;
};

LegacyBlock read_block(DType t, const uint8_t* p) {
  LegacyBlock b;
  switch (t) {
    case DType::kQ4_0: {
      auto* q = reinterpret_cast<const BlockQ4_0*>(p);
      b.d = q->d;
      b.qs = q->qs;
      break;
    }
    case DType::kQ4_1: {
      auto* q = reinterpret_cast<const BlockQ4_1*>(p);
      b.d = q->d;
      b.m = q->m;
      b.qs = q->qs;
      break;
    }
    case DType::kQ5_0: {
      auto* q = reinterpret_cast<const BlockQ5_0*>(p);
      b.d = q->d;
      b.qs = q->qs;
      std::memcpy(&b.qh, q->qh, 4);
      break;
    }
    case DType::kQ5_1: {
      auto* q = reinterpret_cast<const BlockQ5_1*>(p);
      b.d = q->d;
      b.m = q->m;
      b.qs = q->qs;
      std::memcpy(&b.qh, q->qh, 4);
      break;
    }
    case DType::kQ8_0: {
      auto* q = reinterpret_cast<const BlockQ8_0*>(p);
      b.d = q->d;
      b.qs = reinterpret_cast<const uint8_t*>(q->qs);
      break;
    }
    default: PAGODA_CHECK(false, "not a qint format: {}", dtype_name(t));
  }
  return b;
}

void pack_qint(DType t, const uint8_t* w, int64_t n, int64_t k, uint8_t* dst) {
  const int64_t nb = k / kQBlock, groups = (n + kGroupRows - 1) / kGroupRows;
  const int64_t rec = qint_record_bytes(t), bb = dtype_traits(t).block_bytes, rb = nb * bb;
  std::memset(dst, 0, groups * nb * rec);
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* r = dst + (g * nb + b) * rec;
      auto* d = reinterpret_cast<uint16_t*>(r);
      uint16_t* m = has_min(t) ? d + 16 : nullptr;
      uint8_t* codes = r + (has_min(t) ? 64 : 32);
      uint8_t* qh = codes + 256;
      for (int64_t row = 0; row < kGroupRows; ++row) {
        const int64_t src_row = g * kGroupRows + row;
        if (src_row >= n) break;
        const LegacyBlock blk = read_block(t, w + src_row * rb + b * bb);
        d[row] = blk.d;
        if (m) m[row] = blk.m;
        if (t == DType::kQ8_0) {
          for (int v = 0; v < 8; ++v)
            for (int i = 0; i < 4; ++i) codes[64 * v + 4 * row + i] = blk.qs[4 * v + i] ^ 0x80;
        } else {
          for (int c = 0; c < 4; ++c) std::memcpy(codes + 64 * c + 4 * row, blk.qs + 4 * c, 4);
        }
        if (has_qh(t)) {
          for (int v = 0; v < 8; ++v) {
            uint64_t mask;
            std::memcpy(&mask, qh + 8 * v, 8);
            for (int i = 0; i < 4; ++i) mask |= static_cast<uint64_t>((blk.qh >> (4 * v + i)) & 1) << (4 * row + i);
            std::memcpy(qh + 8 * v, &mask, 8);
          }
        }
      }
    }
  }
}

void pack_float(DType t, const uint8_t* w, int64_t n, int64_t k, uint8_t* dst) {
  const int64_t es = dtype_traits(t).block_bytes, groups = (n + kGroupRows - 1) / kGroupRows;
  std::memset(dst, 0, groups * kGroupRows * k * es);
  for (int64_t row = 0; row < n; ++row) {
    const int64_t g = row / kGroupRows, r = row % kGroupRows;
    uint8_t* base = dst + g * kGroupRows * k * es;
    for (int64_t e = 0; e < k; ++e) std::memcpy(base + (e * kGroupRows + r) * es, w + (row * k + e) * es, es);
  }
}

}  // namespace

PackKind pack_kind(DType t) {
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0: return PackKind::kQint;
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16: return PackKind::kFloat;
    default: return PackKind::kNone;
  }
}

int64_t qint_record_bytes(DType t) {
  switch (t) {
    case DType::kQ4_0: return 32 + 256;
    case DType::kQ4_1: return 64 + 256;
    case DType::kQ5_0: return 32 + 256 + 64;
    case DType::kQ5_1: return 64 + 256 + 64;
    case DType::kQ8_0: return 32 + 512;
    default: return 0;
  }
}

int64_t packed_bytes(DType t, int64_t n, int64_t k) {
  const int64_t groups = (n + kGroupRows - 1) / kGroupRows;
  switch (pack_kind(t)) {
    case PackKind::kQint: return groups * (k / kQBlock) * qint_record_bytes(t);
    case PackKind::kFloat: return groups * kGroupRows * k * dtype_traits(t).block_bytes;
    case PackKind::kNone: return 0;
  }
  return 0;
}

void pack_weight(DType t, const void* w, int64_t n, int64_t k, void* dst) {
  const auto* src = static_cast<const uint8_t*>(w);
  auto* out = static_cast<uint8_t*>(dst);
  switch (pack_kind(t)) {
    case PackKind::kQint: pack_qint(t, src, n, k, out); break;
    case PackKind::kFloat: pack_float(t, src, n, k, out); break;
    case PackKind::kNone: PAGODA_CHECK(false, "{} has no packed layout", dtype_name(t));
  }
}

}  // namespace pagoda::cpu
