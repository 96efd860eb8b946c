#include "common/tensor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace pagoda {

std::shared_ptr<void> aligned_host_alloc(size_t bytes, bool zero) {
  // Large zeroed buffers (the KV cache) come straight from the kernel: zero and committed page by
  // page on first touch, so an idle cache costs no resident memory.
  if (zero && bytes >= (size_t{1} << 20)) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return std::shared_ptr<void>(p, [bytes](void* q) { ::munmap(q, bytes); });
  }
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (p == nullptr) throw std::bad_alloc();
  if (zero) std::memset(p, 0, rounded);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

namespace {
int64_t product(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}
int64_t bytes_for(DType dtype, const std::vector<int64_t>& shape) {
  if (shape.empty()) return row_bytes(dtype, 1);
  const int64_t inner = shape.back();
  PAGODA_CHECK(inner % dtype_traits(dtype).block_size == 0, "innermost dim {} not a multiple of {} block size",
               inner, dtype_name(dtype));
  return product(shape) / inner * row_bytes(dtype, inner);
}
}  // namespace

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype_ = dtype;
  auto mem = aligned_host_alloc(static_cast<size_t>(bytes_for(dtype, shape)), true);
  t.data_ = mem.get();
  t.storage_ = std::move(mem);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::empty(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype_ = dtype;
  auto mem = aligned_host_alloc(static_cast<size_t>(bytes_for(dtype, shape)), false);
  t.data_ = mem.get();
  t.storage_ = std::move(mem);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::view(DType dtype, std::vector<int64_t> shape, const void* data, std::shared_ptr<const void> owner,
                    Device device) {
  Tensor t;
  t.dtype_ = dtype;
  t.device_ = device;
  t.shape_ = std::move(shape);
  t.data_ = const_cast<void*>(data);
  t.storage_ = std::move(owner);
  return t;
}

int64_t Tensor::numel() const { return product(shape_); }

int64_t Tensor::rows() const {
  int64_t r = 1;
  for (int i = 0; i + 1 < ndim(); ++i) r *= shape_[i];
  return r;
}

int64_t Tensor::row_bytes() const { return shape_.empty() ? pagoda::row_bytes(dtype_, 1) : pagoda::row_bytes(dtype_, shape_.back()); }

std::string Tensor::shape_string() const { return fmt::format("[{}] {}", fmt::join(shape_, ", "), dtype_name(dtype_)); }

Tensor Tensor::reshape(std::vector<int64_t> shape) const {
  PAGODA_CHECK(product(shape) == numel(), "reshape {} -> [{}]", shape_string(), fmt::join(shape, ", "));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  PAGODA_CHECK(ndim() >= 1 && begin >= 0 && begin <= end && end <= dim(0), "slice_rows({}, {}) of {}", begin, end,
               shape_string());
  Tensor t = *this;
  t.shape_[0] = end - begin;
  const int64_t outer_bytes = shape_[0] == 0 ? 0 : nbytes() / shape_[0];
  t.data_ = static_cast<uint8_t*>(data_) + begin * outer_bytes;
  return t;
}

}  // namespace pagoda
