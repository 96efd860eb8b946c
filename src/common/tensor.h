// Tensor: a dense, row-major (last dimension contiguous) n-d array of one dtype on one device.
//
// Shapes are written outermost first, as in PyTorch: a linear layer's weight is [out, in] and row
// o (in elements, contiguous) produces output o. Quantized dtypes store each row as
// in / block_size blocks, so the innermost dimension must be a multiple of the block size.
//
// Ownership: `storage_` keeps the bytes alive (an aligned host allocation, a device allocation,
// or a memory-mapped file). Copies of a Tensor share the storage (shallow, like torch.Tensor).
// A Tensor is not thread-safe to mutate; concurrent reads are fine.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/dtype.h"

namespace pagoda {

enum class Device { kCpu = 0, kCuda = 1 };

class Tensor {
 public:
  Tensor() = default;

  // Zero-initialised host tensor, 64-byte aligned.
  static Tensor zeros(DType dtype, std::vector<int64_t> shape);
  // Uninitialised host tensor, 64-byte aligned.
  static Tensor empty(DType dtype, std::vector<int64_t> shape);
  // A view over bytes owned by `owner` (which may be null if the caller guarantees lifetime).
  static Tensor view(DType dtype, std::vector<int64_t> shape, const void* data,
                     std::shared_ptr<const void> owner, Device device = Device::kCpu);

  bool defined() const { return data_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int64_t numel() const;
  int64_t rows() const;       // product of the outer dims (1 for a scalar; well defined when a dim is 0)
  int64_t row_bytes() const;                                              // bytes of one innermost row
  int64_t nbytes() const { return rows() * row_bytes(); }
  std::string shape_string() const;  // "[32, 576] q4_1"

  void* data() const { return data_; }
  template <class T>
  T* data_as() const { return static_cast<T*>(data_); }
  uint8_t* row_ptr(int64_t r) const { return static_cast<uint8_t*>(data_) + r * row_bytes(); }

  // Same bytes, another shape with the same number of elements.
  Tensor reshape(std::vector<int64_t> shape) const;
  // Rows [begin, end) of the outermost dimension (a view).
  Tensor slice_rows(int64_t begin, int64_t end) const;

 private:
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCpu;
  std::vector<int64_t> shape_;
  void* data_ = nullptr;
  std::shared_ptr<const void> storage_;
};

// 64-byte aligned host allocation owned by a shared_ptr.
std::shared_ptr<void> aligned_host_alloc(size_t bytes, bool zero);

}  // namespace pagoda
