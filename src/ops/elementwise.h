// Small elementwise/row ops used between the big kernels.
#pragma once

#include <initializer_list>
#include <span>

#include "common/tensor.h"
#include "common/thread_pool.h"

namespace pagoda {

// y[t, :] += bias. y: [T, N] f32; bias: [N] f32.
void add_bias(Tensor& y, const Tensor& bias, ThreadPool& pool);

// y += x. Both [T, N] f32.
void add_inplace(Tensor& y, const Tensor& x, ThreadPool& pool);

// out[i, :] = x[rows[i], :]. x: [T, N] f32; out: [rows.size(), N] f32.
void gather_rows(const Tensor& x, std::span<const int32_t> rows, Tensor& out);

// Splits the columns of x [T, sum N_i] into the contiguous parts [T, N_i] (in order).
void split_columns(const Tensor& x, std::initializer_list<Tensor*> parts, ThreadPool& pool);

// Converts a float tensor (f32/f16/bf16) to a new f32 tensor of the same shape.
Tensor to_f32(const Tensor& t);

}  // namespace pagoda
