// NCCL communicators (runtime/cuda_comm.h), libnccl.so.2 loaded at run time through its C ABI
// (nccl.h, stable since 2.0; the unique id is 128 opaque bytes passed by value).
#include <dlfcn.h>

#include <cstring>
#include <mutex>
#include <type_traits>

#include "backend/cuda/cuda_common.h"
#include "common/check.h"
#include "runtime/cuda_comm.h"

namespace pagoda {
namespace {

struct NcclId {
  char internal[128];
};
static_assert(sizeof(NcclId) == sizeof(NcclUniqueId::bytes));
using NcclComm = void*;       // ncclComm_t
using NcclResult = int;       // ncclResult_t: 0 ncclSuccess
constexpr int kNcclFloat32 = 7;  // ncclFloat32
constexpr int kNcclSum = 0;      // ncclSum

struct NcclApi {
  void* lib = nullptr;
  std::string why;  // non-empty: not loadable
  NcclResult (*get_version)(int*) = nullptr;
  NcclResult (*get_unique_id)(NcclId*) = nullptr;
  NcclResult (*comm_init_rank)(NcclComm*, int, NcclId, int) = nullptr;
  NcclResult (*comm_destroy)(NcclComm) = nullptr;
  NcclResult (*all_reduce)(const void*, void*, size_t, int, int, NcclComm, cudaStream_t) = nullptr;
  NcclResult (*all_gather)(const void*, void*, size_t, int, NcclComm, cudaStream_t) = nullptr;
  const char* (*error_string)(NcclResult) = nullptr;
  const char* (*last_error)(NcclComm) = nullptr;  // optional (2.13+)

  std::string error(NcclResult r, NcclComm comm = nullptr) const {
    std::string s = error_string != nullptr ? error_string(r) : "error";
    if (comm != nullptr && last_error != nullptr) {
      const char* last = last_error(comm);
      if (last != nullptr && *last != '\0') s += std::string(": ") + last;
    }
    return s + " (" + std::to_string(r) + ")";
  }
};

const NcclApi& nccl() {
  static NcclApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    for (const char* name : {"libnccl.so.2", "libnccl.so"})
      if ((api.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    if (api.lib == nullptr) {
      api.why = std::string("NCCL (libnccl.so.2) cannot be loaded: ") + dlerror();
      return;
    }
    auto sym = [](const char* name, auto& fn, bool required = true) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(api.lib, name));
      if (fn == nullptr && required && api.why.empty()) api.why = std::string("NCCL lacks ") + name;
    };
    sym("ncclGetVersion", api.get_version);
    sym("ncclGetUniqueId", api.get_unique_id);
    sym("ncclCommInitRank", api.comm_init_rank);
    sym("ncclCommDestroy", api.comm_destroy);
    sym("ncclAllReduce", api.all_reduce);
    sym("ncclAllGather", api.all_gather);
    sym("ncclGetErrorString", api.error_string);
    sym("ncclGetLastError", api.last_error, false);
  });
  return api;
}

class NcclDeviceComm final : public DeviceComm {
 public:
  NcclDeviceComm(NcclComm comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  ~NcclDeviceComm() override { nccl().comm_destroy(comm_); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool capturable() const override { return true; }

  void all_reduce_sum(float* data, int64_t n, void* stream) override {
    if (n <= 0) return;
    const NcclApi& api = nccl();
    const NcclResult r = api.all_reduce(data, data, static_cast<size_t>(n), kNcclFloat32, kNcclSum, comm_,
                                        static_cast<cudaStream_t>(stream));
    PAGODA_CHECK(r == 0, "ncclAllReduce of {} floats on rank {} of {}: {}", n, rank_, size_, api.error(r, comm_));
  }

  void all_gather(const float* send, float* recv, int64_t n, void* stream) override {
    if (n <= 0) return;
    const NcclApi& api = nccl();
    const NcclResult r =
        api.all_gather(send, recv, static_cast<size_t>(n), kNcclFloat32, comm_, static_cast<cudaStream_t>(stream));
    PAGODA_CHECK(r == 0, "ncclAllGather of {} floats on rank {} of {}: {}", n, rank_, size_, api.error(r, comm_));
  }

 private:
  NcclComm comm_;
  int rank_, size_;
};

}  // namespace

Result<std::string> nccl_version() {
  const NcclApi& api = nccl();
  if (!api.why.empty()) return unimplemented("{}", api.why);
  int v = 0;
  if (const NcclResult r = api.get_version(&v); r != 0) return make_status(StatusCode::kInternal, "ncclGetVersion: {}", api.error(r));
  // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since 2.9 (major * 1000 + ... before).
  const int major = v >= 10000 ? v / 10000 : v / 1000, minor = v >= 10000 ? v / 100 % 100 : v / 100 % 10;
  return fmt::format("{}.{}.{}", major, minor, v % 100);
}

Result<NcclUniqueId> nccl_unique_id() {
  const NcclApi& api = nccl();
  if (!api.why.empty()) return unimplemented("{}", api.why);
  NcclId id{};
  if (const NcclResult r = api.get_unique_id(&id); r != 0) return make_status(StatusCode::kInternal, "ncclGetUniqueId: {}", api.error(r));
  NcclUniqueId out;
  std::memcpy(out.bytes.data(), id.internal, out.bytes.size());
  return out;
}

Result<std::unique_ptr<DeviceComm>> make_nccl_comm(const NcclUniqueId& id, int rank, int size, int device) {
  const NcclApi& api = nccl();
  if (!api.why.empty()) return unimplemented("{}", api.why);
  if (size < 1 || rank < 0 || rank >= size) return invalid_argument("NCCL rank {} of {}", rank, size);
  if (cudaSetDevice(device) != cudaSuccess) return invalid_argument("CUDA device {} for NCCL rank {} cannot be made current", device, rank);
  NcclId nid{};
  std::memcpy(nid.internal, id.bytes.data(), id.bytes.size());
  NcclComm comm = nullptr;
  if (const NcclResult r = api.comm_init_rank(&comm, size, nid, rank); r != 0)
    return make_status(StatusCode::kInternal, "ncclCommInitRank (rank {} of {} on device {}): {}", rank, size, device, api.error(r));
  return std::unique_ptr<DeviceComm>(std::make_unique<NcclDeviceComm>(comm, rank, size));
}

}  // namespace pagoda
