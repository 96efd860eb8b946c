// What rank 0 of a tensor-parallel model tells a worker process before the first step
// (docs/decisions.md D78), as JSON on the ranks' channel (engine/tensor_parallel_group.h):
//   1. TensorParallelSetup, when the worker starts: the checkpoint and how to load it, the
//      device, and the communicator to join;
//   2. TensorParallelExecutorSetup, once rank 0 has planned memory: the KV cache and the
//      executor options every rank uses.
// Parsing checks every field's type and range: a malformed message is an invalid-argument error.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "model/load_format.h"
#include "model/online_quantization.h"
#include "runtime/cuda_executor.h"
#include "runtime/model_executor.h"

namespace pagoda {

struct TensorParallelSetup {
  int size = 2;
  std::string device = "cuda";  // "cuda" | "cpu"
  int device_index = 0;         // CUDA: rank r runs on device_index + r (with the staged communicator: on device_index)
  // "nccl" (CUDA, one GPU a rank), "staged" (CUDA through host memory: ranks may share a GPU;
  // tests), "shm" (CPU ranks).
  std::string comm = "nccl";
  std::string nccl_id;          // NcclUniqueId::hex() (nccl)
  std::string shm_comm;         // ShmTensorParallelComm's name (staged, shm)
  std::string model;
  LoadFormat load_format = LoadFormat::kAuto;
  WeightQuantization quantization = WeightQuantization::kNone;
  int64_t max_model_len = 0;
  int threads = 0;              // CPU ranks' threads (0: one per core)
};

struct TensorParallelExecutorSetup {
  KvCacheSpec kv;
  // CUDA ranks: the options of rank 0's executor (device and tensor_parallel are each rank's own).
  CudaExecutorOptions cuda;
};

std::string to_json(const TensorParallelSetup& s);
Result<TensorParallelSetup> parse_tensor_parallel_setup(std::string_view json);
std::string to_json(const TensorParallelExecutorSetup& s);
Result<TensorParallelExecutorSetup> parse_tensor_parallel_executor_setup(std::string_view json);

}  // namespace pagoda
