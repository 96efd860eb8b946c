// A persisted engine plan: named sections of bytes that start-up computed (repacked weights, the
// autotuned GEMM algorithms), written to a cache directory so a later start with the same model
// file, the same build and the same device reuses them instead of computing them again.
//
// A plan file is trusted only when every check passes: the magic and format version, the file
// size recorded in the header, the key (model identity, build id, device: plan_key()) equal to
// the caller's, the header checksum, and every section's offset, size and XXH3-64 checksum. Any
// failure is a non-ok Status naming it (kNotFound: no file; kInvalidArgument: a plan for another
// key or format version, i.e. stale; kDataLoss: truncated or corrupt), and the caller rebuilds.
//
// File layout (little-endian):
//   "PGDPLAN\n" | u32 version | u32 sections | u64 file size | u64 key bytes | key
//   | per section: u32 name bytes | name | u64 offset | u64 size | u64 xxh3 | u64 xxh3 of all before
//   | section data, each at a 4096-byte aligned offset (a mapped section is page-aligned).
// Writing goes to a temporary file in the same directory, renamed over the old one when complete,
// so a reader sees the old plan, the new one, or none; never half of one.
// Thread-safety: PlanFile is immutable after open (sections may be read from any thread).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/mapped_file.h"
#include "common/status.h"

namespace pagoda {

inline constexpr uint32_t kPlanFormatVersion = 1;

class PlanFile {
 public:
  // Maps `path` and checks it against `key` (above).
  static Result<std::unique_ptr<PlanFile>> open(const std::string& path, const std::string& key);

  bool has(const std::string& name) const { return sections_.count(name) != 0; }
  // The bytes of a section (empty span if absent); valid while this PlanFile or `mapping()` lives.
  std::span<const uint8_t> section(const std::string& name) const;
  const std::shared_ptr<MappedFile>& mapping() const { return file_; }
  std::vector<std::string> names() const;

 private:
  std::shared_ptr<MappedFile> file_;
  std::map<std::string, std::span<const uint8_t>> sections_;
};

// Sections to write; each holds bytes it owns or points at bytes the caller keeps alive until
// write() returns.
class PlanWriter {
 public:
  void add(const std::string& name, std::string bytes);
  void add_view(const std::string& name, const void* data, size_t size);
  // Writes atomically (temporary file, then rename); creates the directory if needed.
  Status write(const std::string& path, const std::string& key) const;

 private:
  struct Section {
    std::string name;
    std::string owned;
    const uint8_t* data = nullptr;
    size_t size = 0;
  };
  std::vector<Section> sections_;
};

// The identity of a model on disk: its absolute path, size and modification time, and a hash of
// its first MiB (the GGUF header and metadata); for a directory, of each regular file in it. A
// rewritten file changes it.
Result<std::string> model_identity(const std::string& path);
// The identity of the running build: the size and modification time of the binary or shared
// library that holds this code (a rebuilt binary has another).
std::string build_identity();
// model identity | build identity | device (the caller's words: "cpu avx512-vnni <model name>").
Result<std::string> plan_key(const std::string& model_path, const std::string& device);
// <dir>/<16 hex digits of a hash of the absolute model path, `kind` and the binary's path>.plan:
// one file per model, kind ("cpu", "cuda") and binary, so a rebuilt binary or a rewritten model
// replaces its stale plan rather than leaving it beside the new one (and two binaries sharing
// the cache do not overwrite each other's).
std::string plan_file_path(const std::string& dir, const std::string& model_path, const std::string& kind);

}  // namespace pagoda
