// What a family's load() does with its tensor table: finds the declared tensors by their GGUF
// names whatever the checkpoint's naming, and builds the matmul weights of ModelWeights from them
// (parts stacked along N; prepared for the CPU kernels when asked, all at once by finish(), on
// several threads; an act-order weight with the input order beside it, equal across fused parts).
// Tensors whose mapped pages the CPU kernels will not read again (they read a
// fused or repacked copy) are released by finish(). One reader per load; not thread-safe.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/family.h"
#include "model/model_weights.h"
#include "model/tensor_table.h"

namespace pagoda {

class WeightTableReader {
 public:
  // `table` was vetted by validate_tensor_table(table, naming, lookup); all three must outlive the reader.
  WeightTableReader(const std::vector<TensorDecl>& table, WeightNaming naming, const TensorLookup& lookup,
                    bool cpu_kernels)
      : table_(table), naming_(naming), lookup_(lookup), cpu_kernels_(cpu_kernels) {}

  // The checkpoint's name of a declared tensor ("" when the checkpoint may lack it).
  const std::string& name_of(const std::string& gguf_name) const;
  // The tensor if present, else nullptr.
  const Tensor* find(const std::string& gguf_name) const;
  // A matmul weight of the tensors `gguf_names` stacked along N (one: unfused), added to `w`:
  // invalid-argument when their K differ or is not whole blocks of a part's dtype.
  Result<LinearId> add_linear(ModelWeights& w, std::initializer_list<std::string> gguf_names, const std::string& label);
  // The same, labelled with the checkpoint's name of its one tensor.
  Result<LinearId> add_linear(ModelWeights& w, const std::string& gguf_name) {
    return add_linear(w, {gguf_name}, name_of(gguf_name));
  }
  // The output head: output.weight, or the embedding where the checkpoint has none (w.tied_output),
  // added to `w` as w.output.
  Status add_output_head(ModelWeights& w);
  // The present tensors of `gguf_names` as f32, concatenated flat in that order (a fused bias, or
  // one norm weight); an undefined tensor when none is present.
  Tensor f32_concat(std::initializer_list<std::string> gguf_names) const;
  // The experts of the stacked declarations `gate`, `up` ([E, F, D]) and `down` ([E, D, F]) as an
  // ExpertSet added to `w`: expert e's gate and up fused, its down alone. GGUF: views of expert e's
  // slice of each 3-d tensor; HF: expert e's own tensors (no stacked copy is made).
  Result<ExpertSetId> add_experts(ModelWeights& w, const std::string& gate, const std::string& up,
                                  const std::string& down, const std::string& label);
  // After the last add_linear() / add_experts(): prepares every matmul weight for the CPU kernels
  // (when asked; with params, only those of layers >= params.cpu_kernels_from_layer and those
  // outside the layers) on `threads` threads, then releases the mapped pages of the tensors only the CPU
  // kernels' copies are read of (never the embedding's: token lookups read it). The first failure
  // in load order.
  Status finish(ModelWeights& w, int threads);
  // The same with the load's packed-weight plan (ModelLoadParams::packed_in / packed_out) and
  // its thread count.
  Status finish(ModelWeights& w, const ModelLoadParams& params);

 private:
  const std::vector<TensorDecl>& table_;
  WeightNaming naming_;
  const TensorLookup& lookup_;
  bool cpu_kernels_;
  void release_prepared(const ModelWeights& w) const;
  const TensorDecl& decl_of(const std::string& gguf_name) const;
  // Expert e's [N, K] matrix of the stacked declaration `gguf_name`.
  Tensor expert_matrix(const std::string& gguf_name, int64_t e) const;
  // A matmul weight of `parts` stacked along N, added to `w` (prepared by finish()); `names` label
  // the parts in errors; `layer` is the decoder layer it belongs to (-1: none).
  Result<LinearId> add_parts(ModelWeights& w, std::vector<Tensor> parts, const std::vector<std::string>& names,
                             const std::string& label, int64_t layer, const std::vector<Tensor>& orders = {});
  // The checkpoint's "<m>.input_order" beside the declared weight `gguf_name` (act-order), or an
  // undefined tensor.
  Tensor input_order_of(const std::string& checkpoint_name) const;

  struct Pending {
    LinearId id;
    std::string label;
    int64_t layer = -1;
  };
  std::vector<Pending> pending_;
  std::vector<Tensor> releasable_;  // views of the mapped tensors only prepared copies are read of
  int64_t packed_reused_ = 0;

 public:
  // Weights finish() took from the plan instead of repacking.
  int64_t packed_reused() const { return packed_reused_; }
};

// The plan section of a packed CPU weight: this prefix and its label ("blk.0.attn_qkv").
inline const std::string kPackedSectionPrefix = "cpu-linear/";

}  // namespace pagoda
