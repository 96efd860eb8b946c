// Linear layer dispatch on the CPU: picks the kernel table for the weight's packed family and the
// ISA level once at prepare time, then per call quantizes the activations (qint family) and splits
// the output rows (and, for many tokens, the tokens) over the thread pool.
//
// Generic path (scalar level, or a format without packed kernels at this level): each thread
// dequantizes its rows with the reference to_float and takes plain f32 dot products.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "backend/cpu/isa.h"
#include "backend/cpu/linear_cpu.h"
#include "quant/quant.h"

namespace pagoda::cpu {
namespace {

const KernelTable* table_for(IsaLevel isa) {
  switch (isa) {
    case IsaLevel::kAmx:
    case IsaLevel::kAvx512Vnni: return vnni::kernel_table();
    case IsaLevel::kAvx512: return avx512::kernel_table();
    case IsaLevel::kAvx2: return avx2::kernel_table();
    case IsaLevel::kScalar: return nullptr;
  }
  return nullptr;
}

// Row groups per register tile of the float and integer kernels (thread chunks are multiples).
constexpr int64_t kFloatQuantum = 3;
constexpr int64_t kQintQuantum = 2;

// Grows-only per-thread scratch.
template <class T>
T* scratch(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// Splits [0, total) into nth near-equal contiguous parts; part ith.
inline void split(int64_t total, int ith, int nth, int64_t* b, int64_t* e) {
  *b = total * ith / nth;
  *e = total * (ith + 1) / nth;
}

void linear_generic(const LinearWeight& w, const float* x, int64_t m, float* y, int64_t ldy, ThreadPool& pool) {
  const int64_t n = w.n, k = w.k;
  const quant::QuantOps* ops = quant::quant_ops(w.dtype);
  pool.run([&](int ith, int nth) {
    thread_local std::vector<float> row_buf;
    int64_t r0, r1;
    split(n, ith, nth, &r0, &r1);
    float* row = scratch(row_buf, static_cast<size_t>(k));
    for (int64_t r = r0; r < r1; ++r) {
      ops->to_float(w.weight.row_ptr(r), row, k);
      for (int64_t t = 0; t < m; ++t) {
        const float* xt = x + t * k;
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t e = 0;
        for (; e + 8 <= k; e += 8)
          for (int j = 0; j < 8; ++j) acc[j] += row[e + j] * xt[e + j];
        for (; e < k; ++e) acc[0] += row[e] * xt[e];
        y[t * ldy + r] = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
      }
    }
  });
}

// Work split for the packed kernels: GEMV-sized calls split the row groups; larger calls split the
// row groups too unless there are too few of them per thread, then the tokens. Chunks are claimed
// dynamically (about 4 per thread), so a worker that is scheduled late (an oversubscribed machine)
// finds the work done by the others instead of stalling the call by its whole static share. Chunks
// are multiples of the kernels' register tile: gq groups, mq tokens.
template <class Fn>  // fn(g0, g1, m0, m1)
void run_split(ThreadPool& pool, int64_t groups, int64_t m, int64_t gq, int64_t mq, Fn&& fn) {
  const int nth = pool.size();
  if (nth == 1) {
    fn(int64_t{0}, groups, int64_t{0}, m);
    return;
  }
  const bool split_m = m > kGemvMaxTokens && groups < 4 * nth;
  const int64_t total = split_m ? m : groups;
  const int64_t q = split_m ? mq : gq;
  const int64_t chunk = std::max<int64_t>(1, total / (4 * nth) / q) * q;
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    for (;;) {
      const int64_t b = next.fetch_add(chunk, std::memory_order_relaxed);
      if (b >= total) break;
      const int64_t e = std::min(total, b + chunk);
      if (split_m) {
        fn(int64_t{0}, groups, b, e);
      } else {
        fn(b, e, int64_t{0}, m);
      }
    }
  });
}

// What the integer kernels of a packed weight read besides the codes: the code offset folded into
// c (0: none) and whether c16 (-32 * per-16 sums: the q6_k and q3_k kernels') is needed.
struct ActNeed {
  const KernelTable* kt = nullptr;
  int32_t c_offset = 0;
  bool c16 = false;
};

ActNeed act_need(const LinearWeight& w) {
  ActNeed n{w.kernels, 0, false};
  const int32_t off = w.kernels->act_offset ? w.kernels->act_offset(w.kernel_dtype) : 0;
  if (w.kernel_dtype == DType::kQ6_K || w.kernel_dtype == DType::kQ3_K) {
    n.c16 = off != 0;
  } else {
    n.c_offset = off;
  }
  return n;
}

// `have` serves `want` (one quantization covers both).
bool act_covers(const ActNeed& have, const ActNeed& want) {
  return have.kt == want.kt && (want.c_offset == 0 || want.c_offset == have.c_offset) && (!want.c16 || have.c16);
}
// have and want merged, or false when their offsets conflict.
bool act_merge(ActNeed* have, const ActNeed& want) {
  if (have->kt != want.kt || (want.c_offset != 0 && have->c_offset != 0 && want.c_offset != have->c_offset)) return false;
  if (want.c_offset != 0) have->c_offset = want.c_offset;
  have->c16 = have->c16 || want.c16;
  return true;
}

// Activations quantized once per call for the integer kernels, reused by the parts of a mixed
// fused weight whose needs it covers. Owns no memory: `buf` is the calling thread's scratch.
struct ActState {
  bool valid = false;
  ActNeed need;
  ActQ8 a{};
};

void quantize_acts(const ActNeed& need, const float* x, int64_t m, int64_t k, ThreadPool& pool,
                   std::vector<uint8_t>& buf, ActState* st) {
  const KernelTable* kt = need.kt;
  const int64_t nb = k / kQBlock, tile = kt->act_tile;
  const int64_t slots = (m + tile - 1) / tile * tile * nb;  // (token, block) pairs
  // per slot: 32 codes, d, s, s16[2] (f32), c, c16[2] (i32)
  const size_t bytes = static_cast<size_t>(slots * 32 + slots * 7 * 4 + 64);
  uint8_t* base = scratch(buf, bytes);
  base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(base) + 63) & ~uintptr_t{63});
  ActQ8 a{reinterpret_cast<int8_t*>(base), nullptr, nullptr, nullptr, nullptr, nullptr, nb, tile, 0};
  a.d = reinterpret_cast<float*>(base + slots * 32);
  a.s = a.d + slots;
  a.s16 = a.s + slots;
  int32_t* ints = reinterpret_cast<int32_t*>(a.s16 + 2 * slots);
  a.offset = need.c_offset;
  if (need.c_offset != 0) a.c = ints;
  if (need.c16) a.c16 = ints + slots;
  if (m == 1) {
    kt->quantize_act(x, k, 0, 1, k, a);
  } else {
    pool.run([&](int ith, int nth) {
      int64_t m0, m1;
      split(m, ith, nth, &m0, &m1);
      if (m0 < m1) kt->quantize_act(x, k, m0, m1, k, a);
    });
  }
  st->valid = true;
  st->need = need;
  st->a = a;
}

// One (non-mixed) weight: y[t * ldy + r] for r < w.n. `merge_with`: the weights run after this one
// in the same call (their activation needs are merged into this quantization where compatible).
void run_weight(const LinearWeight& w, const float* x, int64_t m, float* y, int64_t ldy, ThreadPool& pool,
                std::vector<uint8_t>& act_buf, ActState* st, const std::shared_ptr<const LinearWeight>* merge_with,
                size_t n_merge) {
  const KernelTable* kt = w.kernels;
  const int64_t groups = (w.n + kGroupRows - 1) / kGroupRows;
  const auto* packed = static_cast<const uint8_t*>(w.packed.get());
  switch (w.pack) {
    case PackKind::kNone: linear_generic(w, x, m, y, ldy, pool); return;
    case PackKind::kFloat: {
      if (m <= kGemvMaxTokens || kt->fgemm_packed == nullptr) {
        run_split(pool, groups, m, kFloatQuantum, kXTile, [&](int64_t g0, int64_t g1, int64_t m0, int64_t m1) {
          kt->fgemm(w.kernel_dtype, packed, w.k, g0, g1, x, w.k, m0, m1, y, ldy, w.n);
        });
        return;
      }
      // GEMM: x into token tiles once (all threads), then the threads split the panels
      thread_local std::vector<float> xp_buf;
      const int64_t tiles = (m + kXTile - 1) / kXTile;
      float* xp = scratch(xp_buf, static_cast<size_t>(packed_x_floats(m, w.k)));
      pool.run([&](int ith, int nth) {
        int64_t t0, t1;
        split(tiles, ith, nth, &t0, &t1);
        if (t0 < t1) kt->pack_x(x, w.k, t0 * kXTile, std::min(m, t1 * kXTile), m, w.k, xp);
      });
      run_split(pool, groups, m, kFloatQuantum, kXTile, [&](int64_t g0, int64_t g1, int64_t m0, int64_t m1) {
        kt->fgemm_packed(w.kernel_dtype, packed, w.k, g0, g1, xp, m, m0, m1, y, ldy, w.n);
      });
      return;
    }
    case PackKind::kQint:
    case PackKind::kQintK: {
      const ActNeed need = act_need(w);
      if (!st->valid || !act_covers(st->need, need)) {
        ActNeed merged = need;
        for (size_t i = 0; i < n_merge; ++i) {
          const LinearWeight& o = *merge_with[i];
          if (o.pack == PackKind::kQint || o.pack == PackKind::kQintK) act_merge(&merged, act_need(o));
        }
        quantize_acts(merged, x, m, w.k, pool, act_buf, st);
      }
      const ActQ8& a = st->a;
      run_split(pool, groups, m, kQintQuantum, kt->act_tile, [&](int64_t g0, int64_t g1, int64_t m0, int64_t m1) {
        kt->qgemm(w.kernel_dtype, packed, w.k, g0, g1, a, m0, m1, y, ldy, w.n);
      });
      return;
    }
  }
}

// The unpacked weight's description, and the kernel table that can run it packed (nullptr: none at
// this ISA level for this dtype, so linear() takes the reference path).
std::shared_ptr<LinearWeight> describe_linear(const Tensor& w, const std::string& name, IsaLevel isa,
                                              const KernelTable** usable) {
  auto lw = std::make_shared<LinearWeight>();
  lw->weight = w;
  lw->name = name;
  lw->dtype = w.dtype();
  lw->kernel_dtype = kernel_dtype(w.dtype());
  lw->n = w.dim(0);
  lw->k = w.dim(1);
  lw->isa = isa;
  const KernelTable* kt = table_for(isa);
  const PackKind kind = pack_kind(w.dtype());
  const bool ok = kt != nullptr && ((kind == PackKind::kQint && kt->qgemm && kt->quantize_act) ||
                                    (kind == PackKind::kQintK && kt->qgemm && kt->quantize_act && kt->qgemm_k) ||
                                    (kind == PackKind::kFloat && kt->fgemm));
  *usable = ok ? kt : nullptr;
  return lw;
}

}  // namespace

std::shared_ptr<LinearWeight> prepare_linear_cpu(const Tensor& w, const std::string& name, IsaLevel isa) {
  const KernelTable* kt = nullptr;
  auto lw = describe_linear(w, name, isa, &kt);
  const PackKind kind = pack_kind(w.dtype());
  const bool usable = kt != nullptr;
  if (usable) {
    lw->pack = kind;
    lw->kernels = kt;
    lw->packed = aligned_host_alloc(static_cast<size_t>(packed_bytes(lw->dtype, lw->n, lw->k)), false);
    pack_weight(lw->dtype, w.data(), lw->n, lw->k, lw->packed.get());
  }
  return lw;
}

std::shared_ptr<LinearWeight> prepare_linear_cpu_prepacked(const Tensor& w, const std::string& name, IsaLevel isa,
                                                           std::shared_ptr<void> packed, size_t bytes) {
  const KernelTable* kt = nullptr;
  auto lw = describe_linear(w, name, isa, &kt);
  const PackKind kind = pack_kind(w.dtype());
  const bool usable = kt != nullptr;
  if (!usable || packed == nullptr || bytes != static_cast<size_t>(packed_bytes(lw->dtype, lw->n, lw->k))) return nullptr;
  lw->pack = kind;
  lw->kernels = kt;
  lw->packed = std::move(packed);
  return lw;
}

std::shared_ptr<LinearWeight> make_mixed_linear(std::vector<std::shared_ptr<const LinearWeight>> parts,
                                                const std::string& name) {
  PAGODA_CHECK(parts.size() >= 2, "mixed linear '{}' needs two parts or more", name);
  auto lw = std::make_shared<LinearWeight>();
  lw->name = name;
  lw->dtype = parts[0]->dtype;
  lw->kernel_dtype = parts[0]->kernel_dtype;
  lw->k = parts[0]->k;
  lw->isa = parts[0]->isa;
  for (const auto& p : parts) {
    PAGODA_CHECK(p->k == lw->k && p->parts.empty(), "mixed linear '{}': parts must be plain and share K", name);
    lw->part_col.push_back(lw->n);
    lw->n += p->n;
  }
  lw->weight = Tensor::view(lw->dtype, {lw->n, lw->k}, nullptr, nullptr);
  lw->parts = std::move(parts);
  return lw;
}

void linear_cpu(const LinearWeight& w, const float* x, int64_t m, float* y, ThreadPool& pool) {
  if (m <= 0) return;
  thread_local std::vector<uint8_t> act_buf;
  ActState st;
  if (w.parts.empty()) {
    run_weight(w, x, m, y, w.n, pool, act_buf, &st, nullptr, 0);
    return;
  }
  for (size_t i = 0; i < w.parts.size(); ++i)
    run_weight(*w.parts[i], x, m, y + w.part_col[i], w.n, pool, act_buf, &st, w.parts.data() + i + 1,
               w.parts.size() - i - 1);
}

}  // namespace pagoda::cpu
