// GGUF file parser (versions 2 and 3).
//
// Layout: magic "GGUF", u32 version, u64 tensor count, u64 metadata count, metadata key/values,
// tensor infos (name, n_dims, dims[n_dims] with dims[0] innermost, ggml type, offset), padding to
// `general.alignment` (default 32), then tensor data. All integers little-endian.
//
// Safety contract: parse() never reads outside the mapped bytes. Every length, count and offset is
// checked against what remains; a bad file yields kDataLoss / kUnimplemented naming the key or
// tensor and the byte offset where parsing stopped. Tensor data is not copied: tensor_data()
// points into the mapping, which the GgufFile keeps alive.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "common/dtype.h"
#include "common/mapped_file.h"
#include "common/status.h"

namespace pagoda {

enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char* gguf_type_name(GgufType t);

struct GgufArray;

// One metadata value. Integers are widened to int64 (or uint64 for kUint64), floats to double.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  std::variant<int64_t, uint64_t, double, bool, std::string, std::shared_ptr<GgufArray>> v;

  std::optional<int64_t> as_int() const;  // any integer type that fits int64 (and bool)
  std::optional<double> as_float() const;  // any numeric type
  std::optional<bool> as_bool() const;
  const std::string* as_string() const;
  const GgufArray* as_array() const;
};

struct GgufArray {
  GgufType elem_type = GgufType::kUint8;
  // Exactly one of these holds the elements, by elem_type.
  std::vector<int64_t> ints;          // integer types and bool
  std::vector<uint64_t> uints;        // kUint64
  std::vector<double> floats;         // kFloat32, kFloat64
  std::vector<std::string> strings;   // kString
  std::vector<GgufArray> arrays;      // kArray (nested)
  size_t size() const;
};

struct GgufTensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> dims;  // GGUF order: dims[0] is the innermost (contiguous) dimension
  uint64_t offset = 0;        // relative to the start of the data section
  uint64_t nbytes = 0;
  int64_t num_elements() const;
};

class GgufFile {
 public:
  // Maps and parses the file at `path`.
  static Result<std::shared_ptr<GgufFile>> open(const std::string& path);
  // Parses bytes kept alive by `owner` (tests and fuzzers pass an in-memory buffer).
  static Result<std::shared_ptr<GgufFile>> parse(std::span<const uint8_t> bytes, std::shared_ptr<const void> owner,
                                                 std::string display_name = "<memory>");

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& path() const { return path_; }

  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;
  // Typed lookups: nullopt if absent; kInvalidArgument-free (a wrong type also yields nullopt and
  // is reported by the caller that knows which key it needed).
  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  const GgufArray* get_array(const std::string& key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  const uint8_t* tensor_data(const GgufTensorInfo& info) const { return data_ + info.offset; }
  uint64_t data_offset() const { return data_offset_; }  // absolute file offset of the data section
  std::span<const uint8_t> file_bytes() const { return bytes_; }

 private:
  GgufFile() = default;

  std::string path_;
  std::shared_ptr<const void> owner_;
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  const uint8_t* data_ = nullptr;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace pagoda
