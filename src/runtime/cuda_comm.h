// The DeviceComm implementations of the CUDA backend (runtime/device_comm.h): NCCL, loaded at run
// time (libnccl.so.2, so builds and machines without it run everything else), and the host-staged
// communicator. Built with PAGODA_CUDA; without it (backend/cuda/stub/) every factory reports that
// the build has no CUDA.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "runtime/device_comm.h"
#include "runtime/tensor_parallel_comm.h"

namespace pagoda {

// The id rank 0 makes and every rank passes to make_nccl_comm (ncclUniqueId: 128 opaque bytes),
// written as 256 lowercase hex digits where it crosses a process boundary.
struct NcclUniqueId {
  std::array<uint8_t, 128> bytes{};
  std::string hex() const;
  static Result<NcclUniqueId> from_hex(std::string_view hex);
};

// NCCL's version ("2.27.7"), or the reason it cannot be loaded.
Result<std::string> nccl_version();
Result<NcclUniqueId> nccl_unique_id();
// Rank `rank` of a communicator of `size` ranks on CUDA device `device` (made current); returns
// when every rank has joined (NCCL's own timeout applies to a rank that never comes).
Result<std::unique_ptr<DeviceComm>> make_nccl_comm(const NcclUniqueId& id, int rank, int size, int device);

// The collectives through host memory: each call synchronises `stream`, copies the device data to
// pinned host memory, runs `host`'s collective (its rank and size) and copies the result back.
// Several ranks may share one GPU. `host` outlives the communicator.
Result<std::unique_ptr<DeviceComm>> make_staged_comm(TensorParallelComm& host, int device);

}  // namespace pagoda
