#include "model/tensor_parallel_plan.h"

#include <numeric>
#include <string_view>

#include "model/family.h"

namespace pagoda {

const char* shard_kind_name(ShardKind k) {
  switch (k) {
    case ShardKind::kReplicated: return "replicated";
    case ShardKind::kColumnParallel: return "column-parallel";
    case ShardKind::kRowParallel: return "row-parallel";
    case ShardKind::kVocabParallel: return "vocab-parallel";
  }
  return "?";
}

int64_t TensorShard::elements() const {
  int64_t n = 1;
  for (int64_t x : shape) n *= x;
  return n;
}

int64_t shard_bytes(const TensorShard& s, int64_t full_bytes) {
  if (s.kind == ShardKind::kReplicated || s.dim < 0) return full_bytes;
  const int64_t full_len = s.decl.shape[static_cast<size_t>(s.dim)];
  int64_t len = 0;
  if (s.kind == ShardKind::kVocabParallel) {
    len = s.padded_rows;
  } else {
    for (const ShardRange& r : s.ranges) len += r.length;
  }
  if (full_len <= 0) return 0;
  return static_cast<int64_t>(static_cast<__int128>(full_bytes) * len / full_len);
}

namespace {

// The tensor's name without its layer prefix ("blk.3.attn_q.weight" -> "attn_q.weight").
std::string_view local_name(const TensorDecl& d) {
  std::string_view n = d.gguf_name;
  if (d.layer >= 0 && n.starts_with("blk.")) {
    const size_t dot = n.find('.', 4);
    if (dot != std::string_view::npos) n.remove_prefix(dot + 1);
  }
  return n;
}

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

struct Builder {
  const ModelConfig& c;
  const ShardConstraints& k;
  int size;

  TensorShard split(const TensorDecl& d, ShardKind kind, int dim, std::vector<ShardRange> ranges) const {
    TensorShard s;
    s.decl = d;
    s.kind = kind;
    s.dim = dim;
    s.shape = d.shape;
    int64_t len = 0;
    for (const ShardRange& r : ranges) len += r.length;
    s.shape[static_cast<size_t>(dim)] = len;
    s.ranges = std::move(ranges);
    return s;
  }
  TensorShard replicated(const TensorDecl& d) const {
    TensorShard s;
    s.decl = d;
    s.shape = d.shape;
    return s;
  }

  // Checks that every cut of a sharded linear falls on its format's boundaries.
  Status check_cuts(const TensorShard& s) const {
    if (size == 1 || !s.decl.linear || s.kind == ShardKind::kReplicated) return {};
    const bool along_k = s.kind == ShardKind::kRowParallel;
    const int64_t unit = along_k ? k.k_block : k.n_tile;
    if (unit <= 1) return {};
    for (const ShardRange& r : s.ranges) {
      if (r.offset % unit != 0 || r.length % unit != 0)
        return invalid_argument(
            "tensor parallel size {}: '{}' would be cut at [{}, {}) along {}, not on a multiple of the {} ({}); "
            "use a tensor parallel size whose shards are whole {}",
            size, s.decl.gguf_name, r.offset, r.offset + r.length, along_k ? "K" : "N",
            along_k ? "quantization block" : "row tile", unit, along_k ? "blocks" : "row tiles");
    }
    return {};
  }
};

}  // namespace

Result<TensorParallelPlan> plan_tensor_parallel(const ModelConfig& c, int size, const ShardConstraints& k) {
  if (size < 1 || size > 1024) return invalid_argument("tensor parallel size must be in [1, 1024], got {}", size);
  if (k.k_block < 1 || k.n_tile < 1 || k.vocab_pad < 1)
    return invalid_argument("shard constraints must be >= 1 (k_block {}, n_tile {}, vocab_pad {})", k.k_block, k.n_tile,
                            k.vocab_pad);
  PAGODA_RETURN_IF_ERROR(c.validate());
  const int64_t H = c.num_heads, KV = c.num_kv_heads, hd = c.head_dim, Q = c.q_size(), KVs = c.kv_size();
  if (H % size != 0)
    return invalid_argument("tensor parallel size {} does not divide the {} query heads", size, H);
  if (KV % size != 0 && size % KV != 0)
    return invalid_argument(
        "tensor parallel size {} and the {} KV heads: the KV heads must be a multiple of the size (split) or divide it "
        "(replicated)", size, KV);
  if (size > 1 && c.qk_norm_full)
    return invalid_argument(
        "tensor parallel size {}: {}'s q/k RMSNorm spans the whole projection, which needs a cross-rank sum of squares "
        "that the tensor-parallel plan does not provide", size, arch_family_name(c.family));
  if (!c.is_moe() || c.shared_expert_intermediate_size > 0) {
    const int64_t F = c.is_moe() ? c.shared_expert_intermediate_size : c.intermediate_size;
    if (F % size != 0)
      return invalid_argument("tensor parallel size {} does not divide the {} width {}", size,
                              c.is_moe() ? "shared expert's intermediate" : "intermediate", F);
  }
  if (c.is_moe() && c.expert_intermediate_size % size != 0)
    return invalid_argument("tensor parallel size {} does not divide the expert intermediate width {}", size,
                            c.expert_intermediate_size);

  TensorParallelPlan plan;
  plan.size = size;
  plan.kv_head_replicas = KV >= size ? 1 : size / KV;
  plan.table = family_of(c).tensor_table(c);
  const int64_t V = c.vocab_size;
  const int64_t vocab_unit = std::lcm(k.vocab_pad, k.n_tile);
  plan.vocab_rows_per_rank = size == 1 ? V : round_up((V + size - 1) / size, vocab_unit);
  const int64_t F = c.intermediate_size, Fe = c.expert_intermediate_size, Fs = c.shared_expert_intermediate_size;
  const Builder b{c, k, size};

  for (int r = 0; r < size; ++r) {
    RankShards rs;
    rs.rank = r;
    rs.num_heads = H / size;
    rs.first_head = r * rs.num_heads;
    rs.num_kv_heads = KV >= size ? KV / size : 1;
    rs.first_kv_head = KV >= size ? r * rs.num_kv_heads : r / plan.kv_head_replicas;
    const int64_t dense_f = c.is_moe() ? Fs : F;
    rs.intermediate_size = dense_f / size;
    rs.intermediate_begin = r * rs.intermediate_size;
    rs.expert_intermediate_size = c.is_moe() ? Fe / size : 0;
    rs.expert_intermediate_begin = r * rs.expert_intermediate_size;
    rs.vocab_begin = std::min<int64_t>(V, r * plan.vocab_rows_per_rank);
    rs.vocab_end = std::min<int64_t>(V, (r + 1) * plan.vocab_rows_per_rank);
    const ShardRange q{rs.first_head * hd, rs.num_heads * hd};
    const ShardRange kv{rs.first_kv_head * hd, rs.num_kv_heads * hd};
    const ShardRange f{rs.intermediate_begin, rs.intermediate_size};
    const ShardRange fe{rs.expert_intermediate_begin, rs.expert_intermediate_size};

    for (const TensorDecl& d : plan.table) {
      const std::string_view n = local_name(d);
      const auto col = [&](std::vector<ShardRange> rg, int dim = 0) {
        return b.split(d, ShardKind::kColumnParallel, dim, std::move(rg));
      };
      const auto row = [&](ShardRange rg, int dim = 1) { return b.split(d, ShardKind::kRowParallel, dim, {rg}); };
      TensorShard s;
      if (n == "token_embd.weight" || n == "output.weight") {
        s = b.split(d, ShardKind::kVocabParallel, 0, {{rs.vocab_begin, rs.vocab_end - rs.vocab_begin}});
        s.padded_rows = plan.vocab_rows_per_rank;
      } else if (n == "attn_q.weight" || n == "attn_q.bias") {
        s = col({q});
      } else if (n == "attn_k.weight" || n == "attn_k.bias" || n == "attn_v.weight" || n == "attn_v.bias") {
        s = col({kv});
      } else if (n == "attn_qkv.weight") {  // fused rows: q, then k, then v
        s = col({q, {Q + kv.offset, kv.length}, {Q + KVs + kv.offset, kv.length}});
      } else if (n == "attn_output.weight") {
        s = row(q);
      } else if (n == "ffn_up.weight" && d.shape[0] == 2 * F && c.family == ArchFamily::kPhi3) {
        s = col({f, {F + f.offset, f.length}});  // fused rows: gate, then up
      } else if (n == "ffn_gate.weight" || n == "ffn_up.weight" || n == "ffn_gate_shexp.weight" ||
                 n == "ffn_up_shexp.weight") {
        s = col({f});
      } else if (n == "ffn_down.weight" || n == "ffn_down_shexp.weight") {
        s = row(f);
      } else if (n == "ffn_gate_exps.weight" || n == "ffn_up_exps.weight") {  // [E, Fe, D]
        s = col({fe}, 1);
      } else if (n == "ffn_down_exps.weight") {  // [E, D, Fe]
        s = row(fe, 2);
      } else if (!d.linear || n == "ffn_gate_inp.weight" || n == "ffn_gate_inp_shexp.weight") {
        s = b.replicated(d);  // norms, biases of replicated outputs, rope factors, the MoE router
      } else {
        return unimplemented("tensor parallel plan: no sharding rule for the linear '{}' of {}", d.gguf_name,
                              arch_family_name(c.family));
      }
      PAGODA_RETURN_IF_ERROR(b.check_cuts(s));
      rs.tensors.push_back(std::move(s));
    }
    plan.ranks.push_back(std::move(rs));
  }
  return plan;
}

}  // namespace pagoda
