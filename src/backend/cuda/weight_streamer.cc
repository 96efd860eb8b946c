#include "backend/cuda/weight_streamer.h"

#include <algorithm>
#include <chrono>
#include <fmt/format.h>

#include "backend/cuda/cuda_sizing.h"

namespace pagoda::cuda {

WeightStreamer::~WeightStreamer() {
  if (copy_stream_ != nullptr) cudaStreamSynchronize(copy_stream_);
  for (cudaEvent_t e : {start_, copied_[0], copied_[1], freed_[0], freed_[1]})
    if (e != nullptr) cudaEventDestroy(e);
  if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
  if (host_ != nullptr) cudaFreeHost(host_);
}

Status WeightStreamer::init(const WeightOffloadPlan& plan, const std::vector<int64_t>& layer_bytes) {
  plan_ = plan;
  ordinal_.assign(plan.streamed.size(), -1);
  int64_t offset = 0;
  for (size_t l = 0; l < plan.streamed.size(); ++l) {
    if (!plan.streamed[l]) continue;
    ordinal_[l] = static_cast<int64_t>(order_.size());
    order_.push_back(static_cast<int64_t>(l));
    host_offset_.push_back(offset);
    bytes_.push_back(layer_bytes.at(l));
    offset += align_up(layer_bytes.at(l), 4096);
  }
  if (order_.empty()) return {};
  const cudaError_t err = cudaHostAlloc(&host_, static_cast<size_t>(offset), cudaHostAllocDefault);
  if (err != cudaSuccess) {
    host_ = nullptr;
    cudaGetLastError();
    order_.clear();
    return resource_exhausted("weight offload: cannot pin {:.2f} GB of host memory for {} ({}): offload less "
                              "(--cpu-offload-gb) or free host memory",
                              offset / 1e9, plan.summary(), cudaGetErrorString(err));
  }
  for (int64_t s = 0; s < plan.slots; ++s) slots_[s].reset(static_cast<size_t>(plan.slot_bytes));
  CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  for (cudaEvent_t* e : {&start_, &copied_[0], &copied_[1], &freed_[0], &freed_[1]})
    CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  return {};
}

uint8_t* WeightStreamer::slot_for(int64_t layer) const {
  const int64_t o = ordinal_.at(static_cast<size_t>(layer));
  PAGODA_CUDA_REQUIRE(o >= 0, "slot_for: the layer is resident");
  return slots_[o % 2].as<uint8_t>();
}

uint8_t* WeightStreamer::host_for(int64_t layer) const {
  const int64_t o = ordinal_.at(static_cast<size_t>(layer));
  PAGODA_CUDA_REQUIRE(o >= 0, "host_for: the layer is resident");
  return static_cast<uint8_t*>(host_) + host_offset_[static_cast<size_t>(o)];
}

void WeightStreamer::store_layer(int64_t layer, const void* device, cudaStream_t s) {
  const int64_t o = ordinal_.at(static_cast<size_t>(layer));
  CUDA_CHECK(cudaMemcpyAsync(host_for(layer), device, static_cast<size_t>(bytes_[static_cast<size_t>(o)]),
                             cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
}

double WeightStreamer::measure_bandwidth() {
  if (!active()) return 0;
  const size_t o = static_cast<size_t>(std::max_element(bytes_.begin(), bytes_.end()) - bytes_.begin());
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  const int reps = 3;
  CUDA_CHECK(cudaMemcpyAsync(slots_[0].get(), static_cast<uint8_t*>(host_) + host_offset_[o], static_cast<size_t>(bytes_[o]),
                             cudaMemcpyHostToDevice, copy_stream_));  // warm-up
  CUDA_CHECK(cudaEventRecord(a, copy_stream_));
  for (int r = 0; r < reps; ++r)
    CUDA_CHECK(cudaMemcpyAsync(slots_[0].get(), static_cast<uint8_t*>(host_) + host_offset_[o],
                               static_cast<size_t>(bytes_[o]), cudaMemcpyHostToDevice, copy_stream_));
  CUDA_CHECK(cudaEventRecord(b, copy_stream_));
  CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  bandwidth_ = ms > 0 ? reps * static_cast<double>(bytes_[o]) / (ms * 1e-3) : 0;
  return bandwidth_;
}

void WeightStreamer::copy(int64_t o, cudaEvent_t ready) {
  const size_t i = static_cast<size_t>(o);
  CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, ready, 0));
  CUDA_CHECK(cudaMemcpyAsync(slots_[o % 2].get(), static_cast<uint8_t*>(host_) + host_offset_[i],
                             static_cast<size_t>(bytes_[i]), cudaMemcpyHostToDevice, copy_stream_));
  CUDA_CHECK(cudaEventRecord(copied_[o % 2], copy_stream_));
}

void WeightStreamer::begin_forward(cudaStream_t compute) {
  if (!active()) return;
  // The slots are free once the compute stream's work so far (the previous pass) is done.
  CUDA_CHECK(cudaEventRecord(start_, compute));
  for (int64_t o = 0; o < std::min<int64_t>(2, static_cast<int64_t>(order_.size())); ++o) copy(o, start_);
}

void WeightStreamer::begin_layer(int64_t layer, cudaStream_t compute) {
  if (!streamed(layer)) return;
  CUDA_CHECK(cudaStreamWaitEvent(compute, copied_[ordinal_[static_cast<size_t>(layer)] % 2], 0));
}

void WeightStreamer::end_layer(int64_t layer, cudaStream_t compute) {
  if (!streamed(layer)) return;
  const int64_t o = ordinal_[static_cast<size_t>(layer)];
  if (o + 2 >= static_cast<int64_t>(order_.size())) return;  // no later layer uses this slot in this pass
  CUDA_CHECK(cudaEventRecord(freed_[o % 2], compute));
  copy(o + 2, freed_[o % 2]);
}

std::string WeightStreamer::describe() const {
  if (!active()) return "off";
  const double passes = bandwidth_ > 0 ? bandwidth_ / static_cast<double>(plan_.streamed_bytes) : 0;
  return fmt::format("{}; host -> device {:.1f} GB/s measured: at most {:.2f} forward passes/s, {:.2f} ms a {:.1f} MiB layer",
                     plan_.summary(), bandwidth_ / 1e9, passes,
                     bandwidth_ > 0 ? plan_.slot_bytes / bandwidth_ * 1e3 : 0.0, plan_.slot_bytes / 1048576.0);
}

}  // namespace pagoda::cuda
