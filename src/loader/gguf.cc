#include "loader/gguf.h"

#include <cstring>
#include <limits>

namespace pagoda {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxArrayDepth = 4;
constexpr int kMaxDims = 4;
constexpr uint64_t kMaxNameLength = 1u << 16;

// Bounds-checked little-endian reader over the file bytes.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return b_.size() - pos_; }

  template <class T>
  Status read(T* out, const char* what) {
    if (remaining() < sizeof(T)) return data_loss("truncated file: {} at byte offset {} needs {} bytes, {} remain", what, pos_, sizeof(T), remaining());
    std::memcpy(out, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return {};
  }

  Status read_string(std::string* out, const char* what, uint64_t max_len = std::numeric_limits<uint64_t>::max()) {
    uint64_t len = 0;
    PAGODA_RETURN_IF_ERROR(read(&len, what));
    if (len > remaining()) return data_loss("{} at byte offset {}: string length {} exceeds the {} bytes left in the file", what, pos_ - 8, len, remaining());
    if (len > max_len) return data_loss("{} at byte offset {}: string length {} exceeds the limit {}", what, pos_ - 8, len, max_len);
    out->assign(reinterpret_cast<const char*>(b_.data() + pos_), len);
    pos_ += len;
    return {};
  }

 private:
  std::span<const uint8_t> b_;
  uint64_t pos_ = 0;
};

// Smallest encoded size of one element of type t (used to bound array counts before allocating).
uint64_t min_encoded_size(GgufType t) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUint16: case GgufType::kInt16: return 2;
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    case GgufType::kUint64: case GgufType::kInt64: case GgufType::kFloat64: return 8;
    case GgufType::kString: return 8;
    case GgufType::kArray: return 12;
  }
  return 1;
}

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

template <class T>
Status read_int(Reader& r, int64_t* out, const char* what) {
  T v{};
  PAGODA_RETURN_IF_ERROR(r.read(&v, what));
  *out = static_cast<int64_t>(v);
  return {};
}

Status read_scalar(Reader& r, GgufType t, GgufValue* out, const std::string& key) {
  out->type = t;
  const char* what = "metadata value";
  int64_t i = 0;
  switch (t) {
    case GgufType::kUint8: PAGODA_RETURN_IF_ERROR(read_int<uint8_t>(r, &i, what)); out->v = i; return {};
    case GgufType::kInt8: PAGODA_RETURN_IF_ERROR(read_int<int8_t>(r, &i, what)); out->v = i; return {};
    case GgufType::kUint16: PAGODA_RETURN_IF_ERROR(read_int<uint16_t>(r, &i, what)); out->v = i; return {};
    case GgufType::kInt16: PAGODA_RETURN_IF_ERROR(read_int<int16_t>(r, &i, what)); out->v = i; return {};
    case GgufType::kUint32: PAGODA_RETURN_IF_ERROR(read_int<uint32_t>(r, &i, what)); out->v = i; return {};
    case GgufType::kInt32: PAGODA_RETURN_IF_ERROR(read_int<int32_t>(r, &i, what)); out->v = i; return {};
    case GgufType::kInt64: PAGODA_RETURN_IF_ERROR(read_int<int64_t>(r, &i, what)); out->v = i; return {};
    case GgufType::kUint64: {
      uint64_t u = 0;
      PAGODA_RETURN_IF_ERROR(r.read(&u, what));
      out->v = u;
      return {};
    }
    case GgufType::kFloat32: {
      float f = 0;
      PAGODA_RETURN_IF_ERROR(r.read(&f, what));
      out->v = static_cast<double>(f);
      return {};
    }
    case GgufType::kFloat64: {
      double f = 0;
      PAGODA_RETURN_IF_ERROR(r.read(&f, what));
      out->v = f;
      return {};
    }
    case GgufType::kBool: {
      uint8_t b = 0;
      PAGODA_RETURN_IF_ERROR(r.read(&b, what));
      if (b > 1) return data_loss("metadata '{}': bool value {} is neither 0 nor 1", key, b);
      out->v = b != 0;
      return {};
    }
    case GgufType::kString: {
      std::string s;
      PAGODA_RETURN_IF_ERROR(r.read_string(&s, "metadata string value"));
      out->v = std::move(s);
      return {};
    }
    case GgufType::kArray: break;
  }
  return data_loss("metadata '{}': unexpected type {}", key, static_cast<uint32_t>(t));
}

Status read_array(Reader& r, GgufArray* arr, const std::string& key, int depth) {
  if (depth > kMaxArrayDepth) return data_loss("metadata '{}': arrays nested deeper than {}", key, kMaxArrayDepth);
  uint32_t raw_type = 0;
  uint64_t count = 0;
  PAGODA_RETURN_IF_ERROR(r.read(&raw_type, "array element type"));
  if (!valid_type(raw_type)) return data_loss("metadata '{}' at byte offset {}: unknown array element type {}", key, r.pos() - 4, raw_type);
  PAGODA_RETURN_IF_ERROR(r.read(&count, "array length"));
  const GgufType et = static_cast<GgufType>(raw_type);
  if (count > r.remaining() / min_encoded_size(et))
    return data_loss("metadata '{}' at byte offset {}: array of {} {} elements cannot fit in the {} bytes left", key, r.pos() - 8, count, gguf_type_name(et), r.remaining());
  arr->elem_type = et;
  GgufValue tmp;
  switch (et) {
    case GgufType::kString:
      arr->strings.resize(count);
      for (uint64_t i = 0; i < count; ++i) PAGODA_RETURN_IF_ERROR(r.read_string(&arr->strings[i], "array string element"));
      return {};
    case GgufType::kArray:
      arr->arrays.resize(count);
      for (uint64_t i = 0; i < count; ++i) PAGODA_RETURN_IF_ERROR(read_array(r, &arr->arrays[i], key, depth + 1));
      return {};
    case GgufType::kFloat32:
    case GgufType::kFloat64:
      arr->floats.reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        PAGODA_RETURN_IF_ERROR(read_scalar(r, et, &tmp, key));
        arr->floats.push_back(std::get<double>(tmp.v));
      }
      return {};
    case GgufType::kUint64:
      arr->uints.reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        PAGODA_RETURN_IF_ERROR(read_scalar(r, et, &tmp, key));
        arr->uints.push_back(std::get<uint64_t>(tmp.v));
      }
      return {};
    case GgufType::kBool:
      arr->ints.reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        PAGODA_RETURN_IF_ERROR(read_scalar(r, et, &tmp, key));
        arr->ints.push_back(std::get<bool>(tmp.v) ? 1 : 0);
      }
      return {};
    default:
      arr->ints.reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        PAGODA_RETURN_IF_ERROR(read_scalar(r, et, &tmp, key));
        arr->ints.push_back(std::get<int64_t>(tmp.v));
      }
      return {};
  }
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kUint8: return "uint8";
    case GgufType::kInt8: return "int8";
    case GgufType::kUint16: return "uint16";
    case GgufType::kInt16: return "int16";
    case GgufType::kUint32: return "uint32";
    case GgufType::kInt32: return "int32";
    case GgufType::kFloat32: return "float32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kUint64: return "uint64";
    case GgufType::kInt64: return "int64";
    case GgufType::kFloat64: return "float64";
  }
  return "?";
}

std::optional<int64_t> GgufValue::as_int() const {
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  if (auto* u = std::get_if<uint64_t>(&v)) {
    if (*u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return static_cast<int64_t>(*u);
    return std::nullopt;
  }
  if (auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
  return std::nullopt;
}
std::optional<double> GgufValue::as_float() const {
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  return std::nullopt;
}
std::optional<bool> GgufValue::as_bool() const {
  if (auto* b = std::get_if<bool>(&v)) return *b;
  if (auto* i = std::get_if<int64_t>(&v)) return *i != 0;
  return std::nullopt;
}
const std::string* GgufValue::as_string() const { return std::get_if<std::string>(&v); }
const GgufArray* GgufValue::as_array() const {
  auto* p = std::get_if<std::shared_ptr<GgufArray>>(&v);
  return p ? p->get() : nullptr;
}

size_t GgufArray::size() const {
  switch (elem_type) {
    case GgufType::kString: return strings.size();
    case GgufType::kArray: return arrays.size();
    case GgufType::kFloat32: case GgufType::kFloat64: return floats.size();
    case GgufType::kUint64: return uints.size();
    default: return ints.size();
  }
}

int64_t GgufTensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

Result<std::shared_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  PAGODA_ASSIGN_OR_RETURN(auto mapped, MappedFile::open(path));
  auto bytes = mapped->bytes();
  auto result = parse(bytes, mapped, path);
  if (!result.ok()) return Status(result.status().code(), fmt::format("{}: {}", path, result.status().message()));
  return result;
}

Result<std::shared_ptr<GgufFile>> GgufFile::parse(std::span<const uint8_t> bytes, std::shared_ptr<const void> owner,
                                                  std::string display_name) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->path_ = std::move(display_name);
  f->owner_ = std::move(owner);
  f->bytes_ = bytes;
  Reader r(bytes);

  uint32_t magic = 0;
  PAGODA_RETURN_IF_ERROR(r.read(&magic, "magic"));
  if (magic != kMagic) return data_loss("not a GGUF file (magic 0x{:08x}, expected 0x{:08x} \"GGUF\")", magic, kMagic);
  PAGODA_RETURN_IF_ERROR(r.read(&f->version_, "version"));
  if (f->version_ == 1) return unimplemented("GGUF version 1 is not supported (32-bit counts); re-convert the model to GGUF v3");
  if (f->version_ != 2 && f->version_ != 3) return data_loss("unknown GGUF version {} (supported: 2, 3)", f->version_);

  uint64_t n_tensors = 0, n_kv = 0;
  PAGODA_RETURN_IF_ERROR(r.read(&n_tensors, "tensor count"));
  PAGODA_RETURN_IF_ERROR(r.read(&n_kv, "metadata count"));
  // Each key/value takes at least 8 (key length) + 4 (type) + 1 bytes; each tensor info at least 8+4+4*1... bytes.
  if (n_kv > r.remaining() / 13) return data_loss("metadata count {} cannot fit in a {}-byte file", n_kv, bytes.size());
  if (n_tensors > r.remaining() / 24) return data_loss("tensor count {} cannot fit in a {}-byte file", n_tensors, bytes.size());

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    const uint64_t key_pos = r.pos();
    PAGODA_RETURN_IF_ERROR(r.read_string(&key, "metadata key", kMaxNameLength));
    uint32_t raw_type = 0;
    PAGODA_RETURN_IF_ERROR(r.read(&raw_type, "metadata type"));
    if (!valid_type(raw_type)) return data_loss("metadata '{}' at byte offset {}: unknown value type {}", key, key_pos, raw_type);
    GgufValue value;
    value.type = static_cast<GgufType>(raw_type);
    if (value.type == GgufType::kArray) {
      auto arr = std::make_shared<GgufArray>();
      PAGODA_RETURN_IF_ERROR(read_array(r, arr.get(), key, 1));
      value.v = std::move(arr);
    } else {
      PAGODA_RETURN_IF_ERROR(read_scalar(r, value.type, &value, key));
    }
    if (!f->metadata_.emplace(key, std::move(value)).second)
      return data_loss("metadata key '{}' appears twice (second at byte offset {})", key, key_pos);
  }

  if (const GgufValue* a = f->find("general.alignment")) {
    auto al = a->as_int();
    if (!al || *al <= 0 || (*al & (*al - 1)) != 0 || *al > (1 << 20))
      return data_loss("general.alignment must be a power of two (got {})", al ? std::to_string(*al) : std::string(gguf_type_name(a->type)));
    f->alignment_ = static_cast<uint64_t>(*al);
  }

  f->tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    const uint64_t info_pos = r.pos();
    PAGODA_RETURN_IF_ERROR(r.read_string(&t.name, "tensor name", kMaxNameLength));
    uint32_t n_dims = 0;
    PAGODA_RETURN_IF_ERROR(r.read(&n_dims, "tensor n_dims"));
    if (n_dims == 0 || n_dims > kMaxDims) return data_loss("tensor '{}' at byte offset {}: {} dimensions (1..{} allowed)", t.name, info_pos, n_dims, kMaxDims);
    int64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      int64_t dim = 0;
      PAGODA_RETURN_IF_ERROR(r.read(&dim, "tensor dimension"));
      if (dim <= 0) return data_loss("tensor '{}': dimension {} is {}", t.name, d, dim);
      if (elements > std::numeric_limits<int64_t>::max() / dim) return data_loss("tensor '{}': element count overflows", t.name);
      elements *= dim;
      t.dims.push_back(dim);
    }
    uint32_t raw_dtype = 0;
    PAGODA_RETURN_IF_ERROR(r.read(&raw_dtype, "tensor type"));
    auto traits = dtype_traits_of(raw_dtype);
    if (!traits) return unimplemented("tensor '{}': unknown ggml type id {}", t.name, raw_dtype);
    t.dtype = traits->dtype;
    PAGODA_RETURN_IF_ERROR(r.read(&t.offset, "tensor offset"));
    if (t.dims[0] % traits->block_size != 0)
      return data_loss("tensor '{}': innermost dimension {} is not a multiple of the {} block size {}", t.name, t.dims[0], traits->name, traits->block_size);
    const int64_t blocks = elements / traits->block_size;
    if (blocks > std::numeric_limits<int64_t>::max() / traits->block_bytes) return data_loss("tensor '{}': byte size overflows", t.name);
    t.nbytes = static_cast<uint64_t>(blocks * traits->block_bytes);
    if (t.offset % f->alignment_ != 0) return data_loss("tensor '{}': data offset {} is not aligned to {}", t.name, t.offset, f->alignment_);
    if (!f->tensor_index_.emplace(t.name, f->tensors_.size()).second) return data_loss("tensor '{}' appears twice", t.name);
    f->tensors_.push_back(std::move(t));
  }

  const uint64_t header_end = r.pos();
  f->data_offset_ = (header_end + f->alignment_ - 1) / f->alignment_ * f->alignment_;
  if (f->data_offset_ > bytes.size() && !f->tensors_.empty())
    return data_loss("truncated file: data section would start at byte {}, file has {}", f->data_offset_, bytes.size());
  const uint64_t data_size = f->data_offset_ <= bytes.size() ? bytes.size() - f->data_offset_ : 0;
  for (const auto& t : f->tensors_) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      return data_loss("truncated file: tensor '{}' ({} bytes at data offset {}, file offset {}) extends past the end of the {}-byte file", t.name, t.nbytes, t.offset, f->data_offset_ + t.offset, bytes.size());
  }
  f->data_ = bytes.data() + std::min<uint64_t>(f->data_offset_, bytes.size());
  return f;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}
std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  return v ? v->as_int() : std::nullopt;
}
std::optional<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  return v ? v->as_float() : std::nullopt;
}
std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  return v ? v->as_bool() : std::nullopt;
}
std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v || !v->as_string()) return std::nullopt;
  return *v->as_string();
}
const GgufArray* GgufFile::get_array(const std::string& key) const {
  const GgufValue* v = find(key);
  return v ? v->as_array() : nullptr;
}
const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace pagoda
