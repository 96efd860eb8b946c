#include "common/plan_file.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace pagoda {
namespace {

constexpr char kMagic[8] = {'P', 'G', 'D', 'P', 'L', 'A', 'N', '\n'};
constexpr uint64_t kAlign = 4096;
constexpr const char* kBuildTag = "pagoda 0.1.0";

uint64_t align_up(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Bounds-checked little-endian reader over the mapped bytes.
struct Reader {
  const uint8_t* p;
  uint64_t size, pos = 0;
  bool ok = true;
  template <class T>
  T get() {
    T v{};
    if (!ok || size - pos < sizeof(T) || pos > size) {
      ok = false;
      return v;
    }
    std::memcpy(&v, p + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string bytes(uint64_t n) {
    if (!ok || pos > size || size - pos < n) {
      ok = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(p + pos), static_cast<size_t>(n));
    pos += n;
    return s;
  }
};

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

Status write_all(int fd, const void* data, size_t n, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error("cannot write '{}': {}", path, std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<PlanFile>> PlanFile::open(const std::string& path, const std::string& key) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return not_found("no plan file '{}'", path);
  PAGODA_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  const uint64_t size = file->size();
  Reader r{file->data(), size};
  if (size < sizeof(kMagic) || std::memcmp(file->data(), kMagic, sizeof(kMagic)) != 0)
    return data_loss("plan '{}': not a plan file (bad magic)", path);
  r.pos = sizeof(kMagic);
  const uint32_t version = r.get<uint32_t>();
  const uint32_t count = r.get<uint32_t>();
  const uint64_t recorded_size = r.get<uint64_t>();
  if (!r.ok) return data_loss("plan '{}': truncated header", path);
  if (version != kPlanFormatVersion)
    return invalid_argument("plan '{}': format version {}, this build reads {} (stale)", path, version, kPlanFormatVersion);
  if (recorded_size != size)
    return data_loss("plan '{}': {} bytes, the header says {} (truncated or appended to)", path, size, recorded_size);
  const uint64_t key_len = r.get<uint64_t>();
  if (!r.ok || key_len > size) return data_loss("plan '{}': corrupt key length", path);
  const std::string file_key = r.bytes(key_len);
  if (!r.ok) return data_loss("plan '{}': truncated key", path);
  struct Entry {
    std::string name;
    uint64_t offset, bytes, hash;
  };
  std::vector<Entry> entries;
  if (count > 1u << 20) return data_loss("plan '{}': corrupt section count {}", path, count);
  for (uint32_t i = 0; i < count && r.ok; ++i) {
    Entry e;
    const uint32_t name_len = r.get<uint32_t>();
    if (name_len > 4096) return data_loss("plan '{}': corrupt section name length", path);
    e.name = r.bytes(name_len);
    e.offset = r.get<uint64_t>();
    e.bytes = r.get<uint64_t>();
    e.hash = r.get<uint64_t>();
    entries.push_back(std::move(e));
  }
  const uint64_t header_end = r.pos;
  const uint64_t header_hash = r.get<uint64_t>();
  if (!r.ok) return data_loss("plan '{}': truncated section index", path);
  if (XXH3_64bits(file->data(), static_cast<size_t>(header_end)) != header_hash)
    return data_loss("plan '{}': header checksum mismatch (corrupt)", path);
  // The key is compared after the checksum: a corrupt key is reported as corruption.
  if (file_key != key) return invalid_argument("plan '{}' is for another model, build or device (stale)", path);
  auto plan = std::unique_ptr<PlanFile>(new PlanFile());
  for (const Entry& e : entries)
    if (e.offset < r.pos || e.offset > size || size - e.offset < e.bytes)
      return data_loss("plan '{}': section '{}' lies outside the file", path, e.name);
  // The section checksums read every byte (and map every page): the sections are shared out
  // over the cores.
  std::vector<char> bad(entries.size(), 0);
  std::atomic<size_t> next{0};
  auto check = [&] {
    for (size_t i = next++; i < entries.size(); i = next++)
      bad[i] = XXH3_64bits(file->data() + entries[i].offset, static_cast<size_t>(entries[i].bytes)) != entries[i].hash;
  };
  const size_t threads = std::min<size_t>(entries.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(check);
  check();
  for (auto& t : pool) t.join();
  for (size_t i = 0; i < entries.size(); ++i) {
    if (bad[i]) return data_loss("plan '{}': section '{}' checksum mismatch (corrupt)", path, entries[i].name);
    plan->sections_[entries[i].name] =
        std::span<const uint8_t>(file->data() + entries[i].offset, static_cast<size_t>(entries[i].bytes));
  }
  plan->file_ = std::move(file);
  return plan;
}

std::span<const uint8_t> PlanFile::section(const std::string& name) const {
  auto it = sections_.find(name);
  return it == sections_.end() ? std::span<const uint8_t>() : it->second;
}

std::vector<std::string> PlanFile::names() const {
  std::vector<std::string> out;
  for (const auto& [n, s] : sections_) out.push_back(n);
  return out;
}

void PlanWriter::add(const std::string& name, std::string bytes) {
  Section s;
  s.name = name;
  s.owned = std::move(bytes);
  sections_.push_back(std::move(s));
}

void PlanWriter::add_view(const std::string& name, const void* data, size_t size) {
  Section s;
  s.name = name;
  s.data = static_cast<const uint8_t*>(data);
  s.size = size;
  sections_.push_back(std::move(s));
}

Status PlanWriter::write(const std::string& path, const std::string& key) const {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::path(path).parent_path();
  if (!dir.empty()) fs::create_directories(dir, ec);
  if (ec) return io_error("cannot create the plan directory '{}': {}", dir.string(), ec.message());
  auto data_of = [](const Section& s) {
    return s.data != nullptr ? std::span<const uint8_t>(s.data, s.size)
                             : std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.owned.data()), s.owned.size());
  };
  // The header's size: fixed fields, key, index entries, header checksum.
  uint64_t header = sizeof(kMagic) + 4 + 4 + 8 + 8 + key.size() + 8;
  for (const Section& s : sections_) header += 4 + s.name.size() + 8 * 3;
  std::vector<uint64_t> offsets;
  uint64_t end = align_up(header);
  for (const Section& s : sections_) {
    offsets.push_back(end);
    end = align_up(end + data_of(s).size());
  }
  std::string h;
  h.append(kMagic, sizeof(kMagic));
  put<uint32_t>(h, kPlanFormatVersion);
  put<uint32_t>(h, static_cast<uint32_t>(sections_.size()));
  put<uint64_t>(h, end);
  put<uint64_t>(h, key.size());
  h += key;
  for (size_t i = 0; i < sections_.size(); ++i) {
    const auto d = data_of(sections_[i]);
    put<uint32_t>(h, static_cast<uint32_t>(sections_[i].name.size()));
    h += sections_[i].name;
    put<uint64_t>(h, offsets[i]);
    put<uint64_t>(h, d.size());
    put<uint64_t>(h, XXH3_64bits(d.data(), d.size()));
  }
  put<uint64_t>(h, XXH3_64bits(h.data(), h.size()));
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot create '{}': {}", tmp, std::strerror(errno));
  Status st = write_all(fd, h.data(), h.size(), tmp);
  uint64_t pos = h.size();
  const std::string zeros(kAlign, '\0');
  for (size_t i = 0; i < sections_.size() && st.ok(); ++i) {
    st = write_all(fd, zeros.data(), static_cast<size_t>(offsets[i] - pos), tmp);
    const auto d = data_of(sections_[i]);
    if (st.ok()) st = write_all(fd, d.data(), d.size(), tmp);
    pos = offsets[i] + d.size();
  }
  if (st.ok()) st = write_all(fd, zeros.data(), static_cast<size_t>(end - pos), tmp);
  if (::close(fd) != 0 && st.ok()) st = io_error("cannot write '{}': {}", tmp, std::strerror(errno));
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = io_error("cannot rename '{}': {}", tmp, std::strerror(errno));
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

Result<std::string> model_identity(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path abs = fs::absolute(path, ec);
  std::vector<fs::path> files;
  if (fs::is_directory(abs, ec)) {
    for (const auto& e : fs::directory_iterator(abs, ec))
      if (e.is_regular_file(ec)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(abs);
  }
  std::string id = abs.string();
  for (const fs::path& f : files) {
    struct stat st{};
    if (::stat(f.c_str(), &st) != 0) return io_error("cannot stat '{}': {}", f.string(), std::strerror(errno));
    uint64_t head_hash = 0;
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_error("cannot open '{}': {}", f.string(), std::strerror(errno));
    std::string head(size_t{1} << 20, '\0');
    const ssize_t n = ::pread(fd, head.data(), head.size(), 0);
    ::close(fd);
    if (n < 0) return io_error("cannot read '{}': {}", f.string(), std::strerror(errno));
    head_hash = XXH3_64bits(head.data(), static_cast<size_t>(n));
    id += fmt::format(" {}:{}:{}.{:09}:{:016x}", f.filename().string(), static_cast<int64_t>(st.st_size),
                      static_cast<int64_t>(st.st_mtim.tv_sec), static_cast<int64_t>(st.st_mtim.tv_nsec), head_hash);
  }
  return id;
}

namespace {
// The binary or shared library that holds this code, resolved; empty if unknown.
std::string build_path() {
  Dl_info info{};
  std::string where;
  if (::dladdr(reinterpret_cast<const void*>(&build_path), &info) != 0 && info.dli_fname != nullptr)
    where = info.dli_fname;
  std::error_code ec;
  const std::string resolved = std::filesystem::canonical(where.empty() ? "/proc/self/exe" : where, ec).string();
  return ec ? std::string() : resolved;
}
}  // namespace

std::string build_identity() {
  const std::string resolved = build_path();
  struct stat st{};
  if (resolved.empty() || ::stat(resolved.c_str(), &st) != 0) return fmt::format("build {} (unknown)", kBuildTag);
  return fmt::format("build {} {}:{}:{}.{:09}", kBuildTag, resolved, static_cast<int64_t>(st.st_size),
                     static_cast<int64_t>(st.st_mtim.tv_sec), static_cast<int64_t>(st.st_mtim.tv_nsec));
}

Result<std::string> plan_key(const std::string& model_path, const std::string& device) {
  PAGODA_ASSIGN_OR_RETURN(std::string model, model_identity(model_path));
  return fmt::format("model {} | {} | device {}", model, build_identity(), device);
}

std::string plan_file_path(const std::string& dir, const std::string& model_path, const std::string& kind) {
  std::error_code ec;
  const std::string abs = std::filesystem::absolute(model_path, ec).string() + "|" + kind + "|" + build_path();
  return fmt::format("{}/{:016x}.plan", dir, XXH3_64bits(abs.data(), abs.size()));
}

}  // namespace pagoda
