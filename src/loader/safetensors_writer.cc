#include "loader/safetensors_writer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "loader/safetensors.h"

namespace pagoda {

Status write_safetensors(const std::string& path, std::vector<SafetensorsEntry> entries,
                         const std::map<std::string, std::string>& metadata) {
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json md = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) md[k] = v;
    header["__metadata__"] = md;
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const SafetensorsEntry& e = entries[i];
    if (i > 0 && entries[i - 1].name == e.name) return invalid_argument("{}: tensor '{}' is listed twice", path, e.name);
    const uint32_t eb = safetensors_element_bytes(e.dtype_name).value_or(0);
    if (eb == 0) return invalid_argument("{}: tensor '{}' has an unknown dtype '{}'", path, e.name, e.dtype_name);
    uint64_t numel = 1;
    for (int64_t d : e.shape) {
      if (d < 0) return invalid_argument("{}: tensor '{}' has a negative dimension", path, e.name);
      numel *= static_cast<uint64_t>(d);
    }
    if (numel * eb != e.nbytes)
      return invalid_argument("{}: tensor '{}' declares {} bytes for {} elements of {}", path, e.name, e.nbytes, numel, e.dtype_name);
    header[e.name] = {{"dtype", e.dtype_name}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.nbytes}}};
    offset += e.nbytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return io_error("cannot create '{}'", tmp);
  auto fail = [&](Status st) {
    std::fclose(f);
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    return st;
  };
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * i));
  if (std::fwrite(len, 1, 8, f) != 8 || std::fwrite(h.data(), 1, h.size(), f) != h.size())
    return fail(io_error("cannot write '{}'", tmp));
  for (const SafetensorsEntry& e : entries) {
    auto bytes = e.produce();
    if (!bytes.ok()) return fail(bytes.status());
    if (bytes->size() != e.nbytes)
      return fail(make_status(StatusCode::kInternal, "{}: tensor '{}' produced {} bytes, {} declared", path, e.name, bytes->size(), e.nbytes));
    if (!bytes->empty() && std::fwrite(bytes->data(), 1, bytes->size(), f) != bytes->size())
      return fail(io_error("cannot write '{}' (disk full?)", tmp));
  }
  if (std::fclose(f) != 0) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    return io_error("cannot write '{}'", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return io_error("cannot rename '{}' to '{}': {}", tmp, path, ec.message());
  return Status();
}

}  // namespace pagoda
