// The family registry: a family is one file under model/families/ that turns a checkpoint's
// metadata into a ModelConfig, declares the tensors it expects, and loads a Model whose forward
// pass is written against the layer ops. Adding a family is that file plus one line in
// family.cc's table.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/tensor_table.h"

namespace pagoda {

class GgufFile;
class PlanFile;
class PlanWriter;

struct ModelLoadParams {
  int64_t max_positions = 0;  // RoPE table size: the longest sequence the engine will run
  // Prepare (repack) the matmul weights for the CPU kernels; false keeps plain views of the
  // checkpoint for device executors.
  bool cpu_kernels = true;
  // With cpu_kernels: only the matmul weights of layers >= this one (and those outside the layers:
  // the output head) are prepared; the others stay views for a layer split's device part.
  int64_t cpu_kernels_from_layer = 0;
  int load_threads = 1;       // threads preparing the matmul weights (WeightTableReader::finish)
  // Packed CPU weights of an earlier load (an engine plan, sections "cpu-linear/<label>"), used
  // instead of repacking where present and of this machine's packed size; null: repack all.
  const PlanFile* packed_in = nullptr;
  // Receives a view of every packed CPU weight of this load ("cpu-linear/<label>"), made or
  // reused; the views point into the model, which must outlive the writer's write(). Null: none.
  PlanWriter* packed_out = nullptr;
  // Filled by the load when non-null: packed weights of this load, and how many came from packed_in.
  struct PackedCounts {
    int64_t weights = 0, reused = 0;
  }* packed_counts = nullptr;
};

struct Family {
  std::string_view name;                        // "llama"
  std::vector<std::string_view> architectures;  // GGUF general.architecture / HF model_type values
  // Sets the family's flags in `c` (its generic hyper-parameters are already parsed) from GGUF
  // metadata or a config.json object; `arch` is one of `architectures`.
  Status (*configure_gguf)(std::string_view arch, const GgufFile& g, ModelConfig& c);
  Status (*configure_hf)(std::string_view arch, const nlohmann::json& j, ModelConfig& c);
  // The tensors a checkpoint of this config holds (required and optional).
  std::vector<TensorDecl> (*tensor_table)(const ModelConfig& c);
  // Validates the checkpoint against the table and prepares every weight.
  Result<std::unique_ptr<Model>> (*load)(const ModelConfig& c, WeightNaming naming, const TensorLookup& lookup,
                                         const ModelLoadParams& params);
};

// The family that runs `arch` (a GGUF architecture or an HF model_type), or nullptr.
const Family* find_family(std::string_view arch);
// The family of a parsed config (aborts if none: configs come from the parsers above).
const Family& family_of(const ModelConfig& config);

// Parameters the config's family declares (required tensors plus the optional ones the config's
// flags enable; an untied output counts): the parameter count a checkpoint will have.
int64_t declared_parameter_count(const ModelConfig& config);

// Parameters and weight bytes of a checkpoint of `config`, and what one token reads of them at
// batch 1: every weight once, of each stacked expert tensor the top-k experts' share (k / E of its
// bytes), of the token embedding one row (all of it when it is also the output projection).
// `bytes_of(decl)` gives the checkpoint's bytes of a declared tensor (all experts of a stacked
// one), or -1 when the checkpoint lacks it.
struct ParameterFootprint {
  int64_t total_parameters = 0;
  int64_t active_parameters = 0;  // parameters one token's forward pass multiplies by
  int64_t total_bytes = 0;
  int64_t bytes_per_token = 0;
};
ParameterFootprint parameter_footprint(const ModelConfig& config, const std::function<int64_t(const TensorDecl&)>& bytes_of);

// "llama, mistral, qwen2, qwen3": every architecture some family runs, for error messages.
std::string supported_architectures();

}  // namespace pagoda
