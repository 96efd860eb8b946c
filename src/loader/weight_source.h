// WeightSource: one lookup of named weight tensors over every checkpoint format we read, so the
// model code binds its declared tensor table to names without caring where they came from.
//
//   GGUF file                 names as in the file ("blk.0.attn_q.weight"); GGUF lists dims
//                             innermost first, a Tensor outermost first, so GGUF dims [K, N] become
//                             shape [N, K]. Quantized tensors keep their block dtype (q4_0, ...).
//                             Q/K rows of llama/mistral GGUFs are in the interleaved-pair RoPE
//                             layout (see ModelConfig::rope_layout); nothing is permuted here.
//   Hugging Face directory    names as in the safetensors ("model.layers.0.self_attn.q_proj.weight"),
//                             from model.safetensors or the shards of model.safetensors.index.json.
//   one .safetensors file     the same, without config.json.
//   random weights            Hugging Face names, generated at load for a config.json's shape
//                             (--load-format dummy: model/random_weights.h); no file behind them.
//
// Every Tensor is a view into the memory-mapped file(s) (random weights: their generated memory)
// and keeps its mapping alive, so tensors may outlive the WeightSource. Tensors whose dtype the
// engine cannot use (a safetensors I64 buffer, say) are listed by names() but not returned by
// find(); get() explains why.
//
// Thread-safety: immutable after construction; concurrent reads are fine.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"

namespace pagoda {

class GgufFile;
class HfModelDir;
class SafetensorsFile;

enum class WeightFormat { kGguf, kHfDir, kSafetensors, kRandom };
const char* weight_format_name(WeightFormat f);

class WeightSource {
 public:
  virtual ~WeightSource() = default;

  virtual WeightFormat format() const = 0;
  // The path it was loaded from (.gguf file, model directory or .safetensors file; random weights:
  // the config.json or its directory).
  virtual const std::string& path() const = 0;
  // The tensor, or nullptr if there is no usable tensor of that name.
  virtual const Tensor* find(const std::string& name) const = 0;
  // The tensor, or kNotFound ("tensor 'x' not found in GGUF file m.gguf") or kUnimplemented
  // ("unsupported dtype I64 for tensor 'x' in ...").
  virtual Result<const Tensor*> get(const std::string& name) const = 0;
  // Every tensor name in the source, sorted, including tensors with an unsupported dtype.
  virtual std::vector<std::string> names() const = 0;

  // The underlying containers, for metadata (the GGUF's keys, the HF directory's config.json);
  // nullptr when the source is of another format.
  virtual const GgufFile* gguf() const { return nullptr; }
  virtual const HfModelDir* hf_dir() const { return nullptr; }
  virtual const SafetensorsFile* safetensors() const { return nullptr; }

  // "GGUF file /path/m.gguf (48 tensors)"; "random weights for /path/dir (48 tensors)"
  std::string describe() const;
};

Result<std::unique_ptr<WeightSource>> make_weight_source(std::shared_ptr<const GgufFile> gguf);
Result<std::unique_ptr<WeightSource>> make_weight_source(std::shared_ptr<const HfModelDir> dir);
Result<std::unique_ptr<WeightSource>> make_weight_source(std::shared_ptr<const SafetensorsFile> file);

// A source of `tensors` made in memory (every one usable; no container), of `format` at `path`.
std::unique_ptr<WeightSource> make_weight_source(WeightFormat format, std::string path, std::map<std::string, Tensor> tensors);

// `base` with some of its tensors replaced (on-line quantization, a tensor-parallel rank's shards):
// `replaced` holds names `base` has; names(), the other tensors' lookups and the containers are
// base's. Keeps `base` alive.
std::unique_ptr<WeightSource> overlay_weight_source(std::shared_ptr<const WeightSource> base,
                                                    std::map<std::string, Tensor> replaced);

// Opens `path`: a directory is a Hugging Face model directory; a regular file is read as GGUF if
// it starts with the GGUF magic, else as safetensors if its name ends in ".safetensors".
Result<std::unique_ptr<WeightSource>> load_weight_source(const std::string& path);

}  // namespace pagoda
