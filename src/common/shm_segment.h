// POSIX shared-memory segments of one host, mapped read-write: the storage of the tensor-parallel
// channel (common/shm_broadcast.h) and communicator (runtime/shm_tensor_parallel_comm.h).
// Names are "/" and a name without "/". Thread-safe (no state).
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace pagoda {

struct ShmMapping {
  void* base = nullptr;
  size_t bytes = 0;
};

// An invalid-argument error unless `name` is "/" and a name without "/" (`what` names the user).
Status check_shm_name(const std::string& name, const char* what);
// Creates `name` (it must not exist) of `bytes` zero bytes and maps it; on failure nothing is left.
Result<ShmMapping> create_shm_segment(const std::string& name, size_t bytes);
// Maps an existing segment whole; `min_bytes`: smaller is a data-loss error ("not a <what>").
Result<ShmMapping> open_shm_segment(const std::string& name, size_t min_bytes, const char* what);

}  // namespace pagoda
