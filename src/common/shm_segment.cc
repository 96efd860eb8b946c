#include "common/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pagoda {

Status check_shm_name(const std::string& name, const char* what) {
  if (name.size() < 2 || name[0] != '/' || name.find('/', 1) != std::string::npos)
    return invalid_argument("{} name '{}' must be '/' and a name without '/'", what, name);
  return {};
}

Result<ShmMapping> create_shm_segment(const std::string& name, size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return io_error("cannot create shared memory '{}': {}", name, std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int e = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    return io_error("cannot size shared memory '{}' to {} bytes: {}", name, bytes, std::strerror(e));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    return io_error("cannot map shared memory '{}': {}", name, std::strerror(e));
  }
  return ShmMapping{p, bytes};
}

Result<ShmMapping> open_shm_segment(const std::string& name, size_t min_bytes, const char* what) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return io_error("cannot open shared memory '{}': {}", name, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(min_bytes)) {
    ::close(fd);
    return data_loss("shared memory '{}' is not a {} (size {})", name, what, static_cast<int64_t>(st.st_size));
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) return io_error("cannot map shared memory '{}': {}", name, std::strerror(e));
  return ShmMapping{p, bytes};
}

}  // namespace pagoda
