// Safetensors file parser (the format of Hugging Face checkpoints).
//
// Layout: u64 little-endian header length N, then N bytes of UTF-8 JSON, then the data section.
// The JSON is an object: an optional "__metadata__" object of string -> string, and one entry per
// tensor: {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]} with offsets
// relative to the start of the data section. Shapes are outermost first (row-major), as ours.
//
// Safety contract (as GgufFile's): parse() never reads outside the given bytes and never throws.
// It checks that the header fits in the file, that every entry is well formed, that each
// tensor's byte range is in the data section with begin <= end and end - begin == numel * element
// size (without overflow), and that the ranges tile the data section exactly: no overlap, no gap,
// no trailing bytes. A bad file yields kDataLoss naming the tensor (or key) and what is wrong; an
// unknown dtype string yields kUnimplemented. Tensor data is never copied by the parser:
// tensor_bytes() points into the bytes, which the SafetensorsFile keeps alive through `owner`.
//
// DTypes: every dtype of the format is recognised (BOOL, U8, I8, I16, U16, I32, U32, I64, U64,
// F8_E4M3, F8_E5M2, F8_E8M0, F16, BF16, F32, F64); only F32, F16 and BF16 map to a Pagoda DType for
// weights. to_tensor() on another dtype reports "unsupported dtype I64 for tensor 'x'".
//
// Thread-safety: immutable after parse(); concurrent reads are fine.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/mapped_file.h"
#include "common/status.h"
#include "common/tensor.h"

namespace pagoda {

struct SafetensorsTensorInfo {
  std::string name;
  std::string dtype_name;        // as the file spells it: "F32", "BF16", "I64", ...
  uint32_t element_bytes = 0;    // bytes per element of dtype_name
  std::optional<DType> dtype;    // the Pagoda dtype when the engine can use it as a weight
  std::vector<int64_t> shape;    // outermost first; [] is a scalar
  uint64_t begin = 0;            // byte range [begin, end) relative to the data section
  uint64_t end = 0;
  int64_t num_elements() const;
  uint64_t nbytes() const { return end - begin; }
};

class SafetensorsFile : public std::enable_shared_from_this<SafetensorsFile> {
 public:
  // Largest header accepted (the reference implementation's limit).
  static constexpr uint64_t kMaxHeaderBytes = 100u << 20;
  static constexpr int kMaxDims = 8;

  // Maps and parses the file at `path`; errors are prefixed with the path.
  static Result<std::shared_ptr<SafetensorsFile>> open(const std::string& path);
  // Parses bytes kept alive by `owner` (tests and fuzzers pass an in-memory buffer).
  static Result<std::shared_ptr<SafetensorsFile>> parse(std::span<const uint8_t> bytes,
                                                        std::shared_ptr<const void> owner,
                                                        std::string display_name = "<memory>");

  const std::string& path() const { return path_; }
  // "__metadata__" (empty if absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // In data-section order (ascending begin).
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  const SafetensorsTensorInfo* find_tensor(const std::string& name) const;
  std::span<const uint8_t> tensor_bytes(const SafetensorsTensorInfo& info) const {
    return data_.subspan(info.begin, info.end - info.begin);
  }
  uint64_t data_offset() const { return data_offset_; }  // absolute file offset of the data section

  // A Tensor viewing the tensor's bytes; the view keeps this file (and its mapping) alive.
  // kUnimplemented "unsupported dtype I64 for tensor 'x' in <path> (supported: F32, F16, BF16)"
  // for dtypes the engine cannot use. If the bytes are not aligned to the element size (only a
  // hand-made file can do that: the reference writers align the data), they are copied to an
  // aligned buffer instead, so kernels never see a misaligned pointer.
  Result<Tensor> to_tensor(const SafetensorsTensorInfo& info) const;

 private:
  SafetensorsFile() = default;

  std::string path_;
  std::shared_ptr<const void> owner_;
  std::span<const uint8_t> data_;  // the data section
  uint64_t data_offset_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Bytes per element of a safetensors dtype name, or nullopt for a name the format does not have.
std::optional<uint32_t> safetensors_element_bytes(std::string_view dtype_name);

}  // namespace pagoda
