// The collectives of a tensor-parallel forward pass on a GPU (docs/decisions.md D78): what the CUDA
// executor's layer ops call where the CPU's call runtime/tensor_parallel_comm.h. One object per
// rank; every rank issues the same calls in the same order on its executor's stream.
//
// Implementations (runtime/cuda_comm.h): NCCL (one process per GPU, the product path; its calls
// are captured into CUDA graphs), and a host-staged one over a TensorParallelComm (the stream
// synchronised, the data through host memory: several ranks on one GPU, which NCCL refuses; the
// tests' path; not capturable).
//
// Pointers are device pointers; `stream` is the caller's cudaStream_t. Errors (a peer that died,
// an NCCL failure) abort with the library's message: a rank cannot continue a step alone.
//
// Thread-safety: each rank's object is used by one thread.
#pragma once

#include <cstdint>

namespace pagoda {

class DeviceComm {
 public:
  virtual ~DeviceComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Whether the calls may be recorded into a CUDA graph (the executor captures decode steps only
  // when they may).
  virtual bool capturable() const = 0;
  // In place: data[0, n) f32 becomes the sum over the ranks. Every rank gets the same bits.
  virtual void all_reduce_sum(float* data, int64_t n, void* stream) = 0;
  // recv [size * n] f32: rank r's send[0, n) at recv + r * n, on every rank.
  virtual void all_gather(const float* send, float* recv, int64_t n, void* stream) = 0;
};

}  // namespace pagoda
