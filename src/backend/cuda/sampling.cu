// Token sampling on the GPU, one block (1024 threads) per sampled row, with the CPU sampler's
// semantics (runtime/sampler.h): min_tokens mask -> penalties (repetition over prompt + output,
// presence / frequency over the output) -> greedy argmax (ties to the lowest id) or temperature
// -> min-p -> top-k -> top-p -> draw with the request's uniform number u (computed on the host
// from (seed, output index), so a token never depends on the batch). Logprobs come from the raw
// (masked) logits, as the CPU path reports them.
//
// No sort: top-k and top-p find their threshold probability by binary search over the float bit
// patterns of p in [0, 1] (30 passes of a counting / mass reduction over the row), then admit the
// tied values at the threshold in token-id order, which is exactly the CPU rule "descending
// probability, ties to the lower id". The draw walks the candidates in token-id order (the CPU
// walks its selection order; with no filter both walk ids in order), so with top-p or top-k the
// chosen token can differ from the CPU's for the same u, with the same distribution. Every
// reduction has a fixed order: the same inputs give the same token on every run.
//
// Plain greedy rows (no penalties, no min_tokens mask, no logprobs: the common decode step) take
// a split argmax instead: kGreedySplits blocks a row each find the best (value desc, id asc) of
// a slice, one warp a row combines the slices. One block over a whole 128k vocabulary row (copy
// into the scratch row, then the argmax) sat on the critical path of every batch-1 step.
#include <cfloat>
#include <cmath>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 1024;

struct Scratch {
  float f[33];
  double d[33];
  int i[33];
  int idx_best[32];
  float val_best[32];
  double prefix[kThreads];
  int iprefix[kThreads];
};

// Sum over the block; `slots` holds 33 values of shared memory (one per warp, then the total).
template <class T>
__device__ T block_sum(T v, T* slots) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) slots[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T t = lane < nw ? slots[lane] : T(0);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    if (lane == 0) slots[32] = t;
  }
  __syncthreads();
  return slots[32];
}
__device__ double block_sum_d(double v, Scratch& s) { return block_sum(v, s.d); }
__device__ int block_sum_i(int v, Scratch& s) { return block_sum(v, s.i); }

__device__ float block_max_f(float v, Scratch& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) s.f[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < nw ? s.f[lane] : -INFINITY;
    t = warp_max(t);
    if (lane == 0) s.f[32] = t;
  }
  __syncthreads();
  return s.f[32];
}

// (value desc, index asc) order: is (va, ia) before (vb, ib)?
__device__ __forceinline__ bool before(float va, int ia, float vb, int ib) {
  return va > vb || (va == vb && ia < ib);
}

// Warp argmax by (value desc, index asc) into every lane; idx < 0 for lanes with nothing.
__device__ __forceinline__ void warp_argmax(float& v, int& idx) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
    const int i2 = __shfl_xor_sync(0xffffffffu, idx, o);
    if (i2 >= 0 && (idx < 0 || before(v2, i2, v, idx))) {
      v = v2;
      idx = i2;
    }
  }
}

// Block argmax by (value desc, index asc); ib < 0 for threads with nothing. Returns the index.
__device__ int block_argmax(float v, int idx, Scratch& s, float* best_value) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  warp_argmax(v, idx);
  __syncthreads();
  if (lane == 0) {
    s.val_best[warp] = v;
    s.idx_best[warp] = idx;
  }
  __syncthreads();
  if (warp == 0) {
    v = lane < nw ? s.val_best[lane] : -INFINITY;
    idx = lane < nw ? s.idx_best[lane] : -1;
    warp_argmax(v, idx);
    if (lane == 0) {
      s.i[32] = idx;
      s.f[32] = v;
    }
  }
  __syncthreads();
  if (best_value) *best_value = s.f[32];
  return s.i[32];
}

// Exclusive prefix over threads of a per-thread double (thread order = index order of chunks).
__device__ double block_exclusive_d(double v, Scratch& s) {
  __syncthreads();
  s.prefix[threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    double acc = 0.0;
    for (int t = 0; t < static_cast<int>(blockDim.x); ++t) {
      const double x = s.prefix[t];
      s.prefix[t] = acc;
      acc += x;
    }
  }
  __syncthreads();
  return s.prefix[threadIdx.x];
}
__device__ int block_exclusive_i(int v, Scratch& s) {
  __syncthreads();
  s.iprefix[threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    int acc = 0;
    for (int t = 0; t < static_cast<int>(blockDim.x); ++t) {
      const int x = s.iprefix[t];
      s.iprefix[t] = acc;
      acc += x;
    }
  }
  __syncthreads();
  return s.iprefix[threadIdx.x];
}

// Among candidates with p == tau, keeps the first `r` in token-id order (drops the rest).
__device__ void keep_first_ties(const float* p, uint8_t* mask, int V, float tau, int r, Scratch& s) {
  const int chunk = (V + blockDim.x - 1) / blockDim.x;
  const int b = threadIdx.x * chunk, e = min(V, b + chunk);
  int local = 0;
  for (int i = b; i < e; ++i) local += (mask[i] && p[i] == tau) ? 1 : 0;
  int rank = block_exclusive_i(local, s);
  for (int i = b; i < e; ++i) {
    if (mask[i] && p[i] == tau) {
      if (rank >= r) mask[i] = 0;
      ++rank;
    }
  }
  __syncthreads();
}

// The logprob of `token` in the row lg (log-softmax over the row as it stands) into
// out->logprob, the top n_logprobs (logit desc, id asc; tokens at -inf never listed) into
// out->top_*, and, rank non-null, 1 + the number of tokens with a greater logit into *rank.
// Every thread of the block calls it.
__device__ void block_logprobs(const float* lg, int V, int token, int n_logprobs, SampleOutput* out, int32_t* rank,
                               Scratch& s) {
  const int tid = threadIdx.x, nt = blockDim.x;
  float mx = -INFINITY;
  for (int i = tid; i < V; i += nt) mx = fmaxf(mx, lg[i]);
  mx = block_max_f(mx, s);
  double se = 0.0;
  for (int i = tid; i < V; i += nt) se += exp(static_cast<double>(lg[i] - mx));
  se = block_sum_d(se, s);
  const float lse = isfinite(mx) ? mx + static_cast<float>(log(se)) : mx;
  if (tid == 0) out->logprob = lg[token] - lse;
  if (rank != nullptr) {
    const float v = lg[token];
    int above = 0;
    for (int i = tid; i < V; i += nt) above += lg[i] > v ? 1 : 0;
    above = block_sum_i(above, s);
    if (tid == 0) *rank = above + 1;
  }
  // Top-N by (logit desc, id asc): each round takes the best below the previous pick.
  float pv = INFINITY;
  int pi = -1;
  const int n_top = min(n_logprobs, kMaxTopLogprobs);
  for (int k = 0; k < n_top && k < V; ++k) {
    float bv = -INFINITY;
    int bi = -1;
    for (int i = tid; i < V; i += nt) {
      const float v = lg[i];
      const bool below = pi < 0 || before(pv, pi, v, i);
      if (below && (bi < 0 || before(v, i, bv, bi))) {
        bv = v;
        bi = i;
      }
    }
    float best;
    const int id = block_argmax(bv, bi, s, &best);
    if (tid == 0) {
      const bool listed = best > -INFINITY;  // masked tokens are never listed
      out->top_ids[k] = listed ? id : -1;
      out->top_logprobs[k] = listed ? best - lse : -INFINITY;
    }
    pv = best;
    pi = id;
  }
}

__global__ __launch_bounds__(kThreads) void sample_kernel(float* logits, int V, const SampleRowParams* rows,
                                                          const PenaltyEntry* pens, const int32_t* blocked,
                                                          const BiasEntry* biases, float* work_all, uint8_t* mask_all,
                                                          SampleOutput* outs) {
  __shared__ Scratch s;
  const SampleRowParams P = rows[blockIdx.x];
  float* lg = logits + static_cast<int64_t>(P.logits_row) * V;
  float* p = work_all + static_cast<int64_t>(blockIdx.x) * V;
  uint8_t* mask = mask_all + static_cast<int64_t>(blockIdx.x) * V;
  const int tid = threadIdx.x, nt = blockDim.x;

  for (int i = tid; i < P.block_count; i += nt) {
    const int id = blocked[P.block_begin + i];
    if (id >= 0 && id < V) lg[id] = -INFINITY;
  }
  __syncthreads();
  for (int i = tid; i < V; i += nt) p[i] = lg[i];
  __syncthreads();
  // logit_bias on the working copy (lg, which the logprobs read, keeps the masked logits). Ids are
  // distinct (a JSON object's keys), so no two threads touch one entry.
  for (int e = tid; e < P.bias_count; e += nt) {
    const BiasEntry be = biases[P.bias_begin + e];
    if (be.token >= 0 && be.token < V) p[be.token] += be.bias;
  }
  __syncthreads();
  for (int e = tid; e < P.pen_count; e += nt) {
    const PenaltyEntry pe = pens[P.pen_begin + e];
    if (pe.token < 0 || pe.token >= V) continue;
    float v = p[pe.token];
    if (P.repetition_penalty != 1.0f) v = v > 0.0f ? v / P.repetition_penalty : v * P.repetition_penalty;
    if (pe.output_count > 0) v -= P.presence_penalty + P.frequency_penalty * static_cast<float>(pe.output_count);
    p[pe.token] = v;
  }
  __syncthreads();

  int token;
  if (P.temperature < 1e-5f) {
    float bv = -INFINITY;
    int bi = -1;
    for (int i = tid; i < V; i += nt) {
      const float v = p[i];
      if (bi < 0 || v > bv) {
        bv = v;
        bi = i;
      }
    }
    token = block_argmax(bv, bi, s, nullptr);
  } else {
    const float inv_t = 1.0f / P.temperature;
    float mx = -INFINITY;
    for (int i = tid; i < V; i += nt) {
      const float v = p[i] * inv_t;
      p[i] = v;
      mx = fmaxf(mx, v);
    }
    mx = block_max_f(mx, s);
    int n_local = 0;
    for (int i = tid; i < V; i += nt) {
      const float e = expf(p[i] - mx);
      p[i] = e;
      const uint8_t keep = (P.min_p > 0.0f) ? (e >= P.min_p ? 1 : 0) : 1;
      mask[i] = keep;
      n_local += keep;
    }
    int n = block_sum_i(n_local, s);
    if (P.top_k > 0 && P.top_k < n) {
      // Largest tau with count(p >= tau) >= k.
      uint32_t lo = 0, hi = 0x3F800001u;
      while (hi - lo > 1) {
        const uint32_t mid = lo + (hi - lo) / 2;
        const float t = __uint_as_float(mid);
        int c = 0;
        for (int i = tid; i < V; i += nt) c += (mask[i] && p[i] >= t) ? 1 : 0;
        if (block_sum_i(c, s) >= P.top_k) lo = mid;
        else hi = mid;
      }
      const float tau = __uint_as_float(lo);
      int c = 0;
      for (int i = tid; i < V; i += nt) {
        if (mask[i] && p[i] < tau) mask[i] = 0;
        c += (mask[i] && p[i] > tau) ? 1 : 0;
      }
      const int gt = block_sum_i(c, s);
      keep_first_ties(p, mask, V, tau, P.top_k - gt, s);
      n = P.top_k;
    }
    double local = 0.0;
    for (int i = tid; i < V; i += nt)
      if (mask[i]) local += p[i];
    double kept = block_sum_d(local, s);
    if (P.top_p < 1.0f) {
      const double target = static_cast<double>(P.top_p) * kept;
      uint32_t lo = 0, hi = 0x3F800001u;
      while (hi - lo > 1) {
        const uint32_t mid = lo + (hi - lo) / 2;
        const float t = __uint_as_float(mid);
        double m = 0.0;
        for (int i = tid; i < V; i += nt)
          if (mask[i] && p[i] >= t) m += p[i];
        if (block_sum_d(m, s) >= target) lo = mid;
        else hi = mid;
      }
      const float tau = __uint_as_float(lo);
      double m = 0.0;
      int eq = 0;
      for (int i = tid; i < V; i += nt) {
        if (mask[i] && p[i] < tau) mask[i] = 0;
        if (mask[i] && p[i] > tau) m += p[i];
        eq += (mask[i] && p[i] == tau) ? 1 : 0;
      }
      const double gt_mass = block_sum_d(m, s);
      const int n_eq = block_sum_i(eq, s);
      int r = n_eq;
      if (tau > 0.0f) {
        const double need = ceil((target - gt_mass) / static_cast<double>(tau));
        r = static_cast<int>(need < 1.0 ? 1.0 : (need > n_eq ? n_eq : need));
      }
      keep_first_ties(p, mask, V, tau, r, s);
      local = 0.0;
      for (int i = tid; i < V; i += nt)
        if (mask[i]) local += p[i];
      kept = block_sum_d(local, s);
    }
    // Draw: first candidate (token-id order) whose cumulative mass exceeds u * kept.
    const double u = P.uniform * kept;
    const int chunk = (V + nt - 1) / nt;
    const int b = tid * chunk, e = min(V, b + chunk);
    double mine = 0.0;
    int last = -1;
    for (int i = b; i < e; ++i)
      if (mask[i]) {
        mine += p[i];
        last = i;
      }
    const double base = block_exclusive_d(mine, s);
    if (tid == 0) s.i[0] = -1;
    __syncthreads();
    if (u >= base && u < base + mine) {
      double acc = base;
      for (int i = b; i < e; ++i)
        if (mask[i]) {
          acc += p[i];
          if (acc > u) {
            s.i[0] = i;
            break;
          }
        }
    }
    __syncthreads();
    token = s.i[0];
    if (token < 0) {  // u at the very top (rounding): the last candidate
      float dummy;
      token = block_argmax(static_cast<float>(last), last, s, &dummy);
    }
  }

  SampleOutput* out = outs + blockIdx.x;
  if (tid == 0) {
    out->token = token;
    out->logprob = 0.0f;
  }
  if (P.logprobs >= 0) block_logprobs(lg, V, token, P.logprobs, out, nullptr, s);
}

// Prompt logprobs: one block per row, of the raw row (no masks apply to prompt positions).
__global__ __launch_bounds__(kThreads) void row_logprobs_kernel(const float* logits, int V, const RowLogprobRow* rows,
                                                                SampleOutput* outs, int32_t* ranks) {
  __shared__ Scratch s;
  const RowLogprobRow R = rows[blockIdx.x];
  const float* lg = logits + static_cast<int64_t>(R.logits_row) * V;
  block_logprobs(lg, V, R.token, R.top_n, outs + blockIdx.x, ranks + blockIdx.x, s);
}

constexpr int kGreedySplits = 64;
constexpr int kGreedyThreads = 256;

// The best (value desc, id asc) of one slice of a row: block (split, row). Each thread keeps its
// first maximum in id order, as sample_kernel's greedy branch does. Partial results go to the
// row's scratch: value at work[row * V + split], id (as bits) at work[row * V + kGreedySplits + split].
__global__ __launch_bounds__(kGreedyThreads) void greedy_slices_kernel(const float* logits, int V, const SampleRowParams* rows,
                                                                      float* work) {
  __shared__ Scratch s;
  const int split = blockIdx.x, row = blockIdx.y, tid = threadIdx.x;
  const float* lg = logits + static_cast<int64_t>(rows[row].logits_row) * V;
  const int per = (V + kGreedySplits - 1) / kGreedySplits;
  const int b = split * per, e = min(V, b + per);
  float bv = -INFINITY;
  int bi = -1;
  for (int i = b + tid; i < e; i += kGreedyThreads) {
    const float v = lg[i];
    if (bi < 0 || v > bv) {
      bv = v;
      bi = i;
    }
  }
  const int best = block_argmax(bv, bi, s, &bv);
  if (tid == 0) {
    float* part = work + static_cast<int64_t>(row) * V;
    part[split] = bv;
    part[kGreedySplits + split] = __int_as_float(best);
  }
}

// One warp a row: the best of the row's slices (slices with no element hold id -1).
__global__ __launch_bounds__(32) void greedy_combine_kernel(const float* work, int V, SampleOutput* outs) {
  const int row = blockIdx.x, lane = threadIdx.x;
  const float* part = work + static_cast<int64_t>(row) * V;
  float v = -INFINITY;
  int idx = -1;
  for (int j = lane; j < kGreedySplits; j += 32) {
    const float vj = part[j];
    const int ij = __float_as_int(part[kGreedySplits + j]);
    if (ij >= 0 && (idx < 0 || before(vj, ij, v, idx))) {
      v = vj;
      idx = ij;
    }
  }
  warp_argmax(v, idx);
  if (lane == 0) {
    outs[row].token = idx;
    outs[row].logprob = 0.0f;
  }
}

__global__ void token_mask_kernel(float* logits, int V, const int32_t* row_ids, const uint32_t* masks, int mask_words) {
  const int r = blockIdx.y;
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= V) return;
  const int w = t >> 5;
  const bool allowed = w < mask_words && ((masks[static_cast<int64_t>(r) * mask_words + w] >> (t & 31)) & 1u);
  if (!allowed) logits[static_cast<int64_t>(row_ids[r]) * V + t] = -INFINITY;
}

}  // namespace

void apply_token_masks(float* logits, int64_t vocab, const int32_t* row_ids, const uint32_t* masks, int64_t mask_words,
                       int64_t num_rows, cudaStream_t s) {
  if (num_rows <= 0) return;
  constexpr int kMaskThreads = 256;
  const dim3 grid(static_cast<unsigned>((vocab + kMaskThreads - 1) / kMaskThreads), static_cast<unsigned>(num_rows));
  token_mask_kernel<<<grid, kMaskThreads, 0, s>>>(logits, static_cast<int>(vocab), row_ids, masks, static_cast<int>(mask_words));
  CUDA_CHECK_LAUNCH();
}

void row_logprobs(const float* logits, int64_t vocab, const RowLogprobRow* rows, int64_t num_rows, SampleOutput* out,
                  int32_t* ranks, cudaStream_t s) {
  if (num_rows <= 0) return;
  row_logprobs_kernel<<<static_cast<unsigned>(num_rows), kThreads, 0, s>>>(logits, static_cast<int>(vocab), rows, out, ranks);
  CUDA_CHECK_LAUNCH();
}

bool sample_rows_split_greedy(int64_t vocab) { return vocab >= 2 * kGreedySplits * 32; }

void sample_rows(float* logits, int64_t vocab, const SampleRowParams* rows, int64_t num_rows,
                 const PenaltyEntry* penalties, const int32_t* blocked, float* work, uint8_t* mask, SampleOutput* out,
                 cudaStream_t s, bool plain_greedy, const BiasEntry* biases) {
  if (num_rows <= 0) return;
  if (plain_greedy && sample_rows_split_greedy(vocab)) {
    greedy_slices_kernel<<<dim3(kGreedySplits, static_cast<unsigned>(num_rows)), kGreedyThreads, 0, s>>>(
        logits, static_cast<int>(vocab), rows, work);
    CUDA_CHECK_LAUNCH();
    greedy_combine_kernel<<<static_cast<unsigned>(num_rows), 32, 0, s>>>(work, static_cast<int>(vocab), out);
    CUDA_CHECK_LAUNCH();
    return;
  }
  sample_kernel<<<static_cast<unsigned>(num_rows), kThreads, 0, s>>>(logits, static_cast<int>(vocab), rows, penalties,
                                                                     blocked, biases, work, mask, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
