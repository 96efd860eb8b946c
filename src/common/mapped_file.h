// Read-only memory map of a whole file. Move-only; unmaps on destruction.
// Model weights are used straight from the mapping (never copied) unless a kernel needs a
// repacked layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"

namespace pagoda {

class MappedFile {
 public:
  static Result<std::shared_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size) : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Tells the kernel the pages wholly inside [p, p + n) of a file mapping are not needed now
// (madvise MADV_DONTNEED): they leave the resident set and are read from the file again if
// touched. For mapped weights whose kernels read a repacked copy.
void release_mapped_pages(const void* p, size_t n);

}  // namespace pagoda
