// Built when PAGODA_CUDA is off: every CUDA entry point reports that this build has no CUDA.
#include "runtime/cuda_comm.h"
#include "runtime/cuda_executor.h"

namespace pagoda {
namespace {
constexpr const char* kNoCuda = "this build has no CUDA backend (configure with -DPAGODA_CUDA=ON)";
}

bool cuda_available(std::string* why) {
  if (why) *why = kNoCuda;
  return false;
}
int cuda_device_count() { return 0; }
Result<CudaMemoryInfo> cuda_memory_info(int) { return unimplemented("{}", kNoCuda); }
Result<CudaMemoryTerms> cuda_memory_terms(const Model&, const CudaExecutorOptions&) {
  return unimplemented("{}", kNoCuda);
}
Result<CudaLayerWeightBytes> cuda_layer_weight_bytes(const Model&, const CudaExecutorOptions&) {
  return unimplemented("{}", kNoCuda);
}
Result<std::unique_ptr<ModelExecutor>> make_cuda_executor(const Model&, const KvCacheSpec&, const CudaExecutorOptions&) {
  return unimplemented("{}", kNoCuda);
}
Result<std::string> nccl_version() { return unimplemented("{}", kNoCuda); }
Result<NcclUniqueId> nccl_unique_id() { return unimplemented("{}", kNoCuda); }
Result<std::unique_ptr<DeviceComm>> make_nccl_comm(const NcclUniqueId&, int, int, int) { return unimplemented("{}", kNoCuda); }
Result<std::unique_ptr<DeviceComm>> make_staged_comm(TensorParallelComm&, int) { return unimplemented("{}", kNoCuda); }
Result<CudaCeilings> cuda_measure_ceilings(int, int64_t, int64_t, bool) { return unimplemented("{}", kNoCuda); }

}  // namespace pagoda
