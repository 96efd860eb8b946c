// Paged KV cache layout on the CPU (one layer's view).
//
//   K: [num_blocks, num_kv_heads, head_dim, block_size]   keys transposed inside a block, so the
//      scores of one query against a block's keys are `head_dim` vector FMAs over contiguous
//      block_size-wide rows (16 f32 = one AVX-512 register at the default block size);
//   V: [num_blocks, num_kv_heads, block_size, head_dim]   values row-major, so P.V is
//      broadcast-p FMAs over head_dim.
// Element type f32, f16 or bf16. A token's slot is block_id * block_size + offset; slot -1 means
// "do not write" (padding). Block ids come from the KV cache manager; this struct only says where
// the bytes are.
#pragma once

#include <cstdint>

#include "common/dtype.h"

namespace pagoda {

struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
  DType dtype = DType::kF32;
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;

  int64_t elem_bytes() const { return dtype == DType::kF32 ? 4 : 2; }
  int64_t head_block_elems() const { return head_dim * block_size; }
  int64_t block_elems() const { return num_kv_heads * head_dim * block_size; }
  // Element offset of (block, head) in K (and V: same offset, different inner layout).
  int64_t head_block_offset(int64_t block, int64_t head) const { return (block * num_kv_heads + head) * head_block_elems(); }
};

}  // namespace pagoda
