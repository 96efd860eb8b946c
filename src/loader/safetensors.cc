#include "loader/safetensors.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

namespace pagoda {
namespace {

struct DTypeRow {
  std::string_view name;
  uint32_t bytes;
  std::optional<DType> dtype;  // set for the dtypes the engine accepts as weights
};

constexpr DTypeRow kDTypes[] = {
    {"F32", 4, DType::kF32},  {"F16", 2, DType::kF16},   {"BF16", 2, DType::kBF16},    {"F64", 8, std::nullopt},
    {"I64", 8, std::nullopt}, {"U64", 8, std::nullopt},  {"I32", 4, std::nullopt},     {"U32", 4, std::nullopt},
    {"I16", 2, std::nullopt}, {"U16", 2, std::nullopt},  {"I8", 1, std::nullopt},      {"U8", 1, std::nullopt},
    {"BOOL", 1, std::nullopt}, {"F8_E4M3", 1, std::nullopt}, {"F8_E5M2", 1, std::nullopt},
    {"F8_E8M0", 1, std::nullopt},
};

const DTypeRow* find_dtype(std::string_view name) {
  for (const auto& row : kDTypes)
    if (row.name == name) return &row;
  return nullptr;
}

// Reads a JSON number that must be a non-negative integer representable as int64.
std::optional<int64_t> as_count(const nlohmann::json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < 0) return std::nullopt;
    return i;
  }
  return std::nullopt;
}

std::string short_dump(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
  if (s.size() > 64) s = s.substr(0, 61) + "...";
  return s;
}

// Checks one tensor entry of the header and fills `info` (offsets still relative, unchecked
// against the data section size).
Status parse_entry(const std::string& name, const nlohmann::json& e, SafetensorsTensorInfo* info) {
  info->name = name;
  if (!e.is_object()) return data_loss("tensor '{}': header entry is not an object ({})", name, short_dump(e));
  auto dt = e.find("dtype");
  if (dt == e.end()) return data_loss("tensor '{}': missing string 'dtype'", name);
  if (!dt->is_string()) return data_loss("tensor '{}': 'dtype' has type {}, expected a string", name, dt->type_name());
  info->dtype_name = dt->get<std::string>();
  const DTypeRow* row = find_dtype(info->dtype_name);
  if (row == nullptr) return unimplemented("tensor '{}': unknown safetensors dtype '{}'", name, info->dtype_name);
  info->element_bytes = row->bytes;
  info->dtype = row->dtype;

  auto sh = e.find("shape");
  if (sh == e.end()) return data_loss("tensor '{}': missing array 'shape'", name);
  if (!sh->is_array()) return data_loss("tensor '{}': 'shape' has type {}, expected an array", name, sh->type_name());
  if (sh->size() > static_cast<size_t>(SafetensorsFile::kMaxDims))
    return data_loss("tensor '{}': {} dimensions (at most {} allowed)", name, sh->size(), SafetensorsFile::kMaxDims);
  int64_t numel = 1;
  for (const auto& d : *sh) {
    auto dim = as_count(d);
    if (!dim) return data_loss("tensor '{}': shape entry {} is not a non-negative integer", name, short_dump(d));
    if (*dim != 0 && numel > std::numeric_limits<int64_t>::max() / *dim)
      return data_loss("tensor '{}': shape {} element count overflows", name, short_dump(*sh));
    numel *= *dim;
    info->shape.push_back(*dim);
  }
  if (numel > std::numeric_limits<int64_t>::max() / row->bytes)
    return data_loss("tensor '{}': shape {} byte size overflows", name, short_dump(*sh));

  auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2)
    return data_loss("tensor '{}': 'data_offsets' must be an array [begin, end]", name);
  auto begin = as_count((*off)[0]);
  auto end = as_count((*off)[1]);
  if (!begin || !end) return data_loss("tensor '{}': data_offsets {} are not non-negative integers", name, short_dump(*off));
  if (*begin > *end) return data_loss("tensor '{}': data_offsets [{}, {}] have begin > end", name, *begin, *end);
  info->begin = static_cast<uint64_t>(*begin);
  info->end = static_cast<uint64_t>(*end);
  const uint64_t expected = static_cast<uint64_t>(numel) * row->bytes;
  if (info->end - info->begin != expected)
    return data_loss("tensor '{}': data_offsets [{}, {}] hold {} bytes, but {} {} needs {} bytes", name, info->begin,
                     info->end, info->end - info->begin, info->dtype_name, short_dump(*sh), expected);
  return {};
}

Status parse_header(const nlohmann::json& header, std::map<std::string, std::string>* metadata,
                    std::vector<SafetensorsTensorInfo>* tensors) {
  if (!header.is_object()) return data_loss("header is not a JSON object");
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return data_loss("'__metadata__' is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) return data_loss("'__metadata__' value of '{}' is not a string", m.key());
        (*metadata)[m.key()] = m->get<std::string>();
      }
      continue;
    }
    SafetensorsTensorInfo info;
    PAGODA_RETURN_IF_ERROR(parse_entry(it.key(), *it, &info));
    tensors->push_back(std::move(info));
  }
  return {};
}

}  // namespace

std::optional<uint32_t> safetensors_element_bytes(std::string_view dtype_name) {
  const DTypeRow* row = find_dtype(dtype_name);
  if (row == nullptr) return std::nullopt;
  return row->bytes;
}

int64_t SafetensorsTensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<std::shared_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  PAGODA_ASSIGN_OR_RETURN(auto mapped, MappedFile::open(path));
  auto bytes = mapped->bytes();
  auto result = parse(bytes, mapped, path);
  if (!result.ok()) return Status(result.status().code(), fmt::format("{}: {}", path, result.status().message()));
  return result;
}

Result<std::shared_ptr<SafetensorsFile>> SafetensorsFile::parse(std::span<const uint8_t> bytes,
                                                                std::shared_ptr<const void> owner,
                                                                std::string display_name) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = std::move(display_name);
  f->owner_ = std::move(owner);

  if (bytes.size() < 8)
    return data_loss("truncated file: {} bytes, a safetensors file starts with an 8-byte header length", bytes.size());
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > bytes.size() - 8)
    return data_loss("header length {} exceeds the {} bytes after the length field", header_len, bytes.size() - 8);
  if (header_len > kMaxHeaderBytes)
    return data_loss("header length {} exceeds the limit of {} bytes", header_len, kMaxHeaderBytes);
  if (header_len < 2) return data_loss("header length {} is too short for a JSON object", header_len);
  f->data_offset_ = 8 + header_len;
  f->data_ = bytes.subspan(f->data_offset_);

  // Parse without exceptions; the callback spots duplicate top-level keys (which nlohmann would
  // silently collapse to the last one).
  const char* first = reinterpret_cast<const char*>(bytes.data() + 8);
  const char* last = first + header_len;
  std::set<std::string> seen;
  std::string duplicate;
  auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && parsed.is_string() && duplicate.empty()) {
      if (!seen.insert(parsed.get_ref<const std::string&>()).second) duplicate = parsed.get<std::string>();
    }
    return true;
  };
  Status status;
  try {
    nlohmann::json header = nlohmann::json::parse(first, last, callback, /*allow_exceptions=*/false);
    if (header.is_discarded()) return data_loss("header ({} bytes at offset 8) is not valid JSON", header_len);
    if (!duplicate.empty()) return data_loss("header names '{}' twice", duplicate);
    status = parse_header(header, &f->metadata_, &f->tensors_);
  } catch (const std::exception& e) {  // defensive: the checks above should leave nothing to throw
    return data_loss("header: {}", e.what());
  }
  PAGODA_RETURN_IF_ERROR(status);

  // The byte ranges must tile the data section: sorted by (begin, end), each begins where the
  // previous one ended, the first at 0 and the last at the end of the file.
  std::sort(f->tensors_.begin(), f->tensors_.end(), [](const SafetensorsTensorInfo& a, const SafetensorsTensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  const uint64_t data_size = f->data_.size();
  uint64_t covered = 0;
  const SafetensorsTensorInfo* prev = nullptr;
  for (const auto& t : f->tensors_) {
    if (t.end > data_size)
      return data_loss("truncated file: tensor '{}' data_offsets [{}, {}] extend past the {}-byte data section (file offset {})",
                       t.name, t.begin, t.end, data_size, f->data_offset_ + t.end);
    if (t.begin < covered)
      return data_loss("tensor '{}' data_offsets [{}, {}] overlap tensor '{}' [{}, {}]", t.name, t.begin, t.end,
                       prev->name, prev->begin, prev->end);
    if (t.begin > covered)
      return data_loss("data bytes [{}, {}) before tensor '{}' belong to no tensor", covered, t.begin, t.name);
    covered = t.end;
    prev = &t;
  }
  if (covered != data_size)
    return data_loss("data bytes [{}, {}) at the end of the file belong to no tensor", covered, data_size);

  for (size_t i = 0; i < f->tensors_.size(); ++i) f->tensor_index_.emplace(f->tensors_[i].name, i);
  return f;
}

const SafetensorsTensorInfo* SafetensorsFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<Tensor> SafetensorsFile::to_tensor(const SafetensorsTensorInfo& info) const {
  if (!info.dtype)
    return unimplemented("unsupported dtype {} for tensor '{}' in {} (supported: F32, F16, BF16)", info.dtype_name,
                         info.name, path_);
  auto bytes = tensor_bytes(info);
  const uint8_t* ptr = bytes.data();
  std::shared_ptr<const void> keep = shared_from_this();
  if (reinterpret_cast<uintptr_t>(ptr) % info.element_bytes != 0) {
    auto copy = aligned_host_alloc(bytes.size(), false);
    if (!bytes.empty()) std::memcpy(copy.get(), bytes.data(), bytes.size());
    ptr = static_cast<const uint8_t*>(copy.get());
    keep = std::move(copy);
  }
  return Tensor::view(*info.dtype, info.shape, ptr, std::move(keep));
}

}  // namespace pagoda
