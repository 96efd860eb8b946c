// Weight offload on the device (runtime/weight_offload_plan.h chooses the layers): each streamed
// layer's matmul weights live in one pinned host region and run from one of two device slots,
// streamed layer o from slot o % 2. A forward pass copies streamed layer o into its slot on the
// streamer's copy stream as soon as the slot is free (the compute of streamed layer o - 2 is
// done), and the compute stream waits for that copy before the layer's first op. The copies and
// waits are stream operations (events), so a CUDA graph captured around a forward pass replays
// them: decode graphs stream too.
// Call order per forward pass, all on the compute stream's thread: begin_forward, then
// begin_layer(l) / end_layer(l) around every layer. Not thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "common/status.h"
#include "runtime/weight_offload_plan.h"

namespace pagoda::cuda {

class WeightStreamer {
 public:
  WeightStreamer() = default;
  ~WeightStreamer();
  WeightStreamer(const WeightStreamer&) = delete;
  WeightStreamer& operator=(const WeightStreamer&) = delete;

  // Pins plan.streamed_bytes of host memory (an error, not an abort, when the host cannot) and
  // allocates the slots. layer_bytes [L]: each layer's weight bytes (the streamed ones' regions).
  Status init(const WeightOffloadPlan& plan, const std::vector<int64_t>& layer_bytes);
  bool active() const { return !order_.empty(); }
  bool streamed(int64_t layer) const { return active() && ordinal_[static_cast<size_t>(layer)] >= 0; }
  // The device address streamed layer `layer`'s weights run from (its slot), and its host region.
  uint8_t* slot_for(int64_t layer) const;
  uint8_t* host_for(int64_t layer) const;
  // Device memory of a streamed layer's size where the upload assembles each layer (slot 0).
  uint8_t* staging() const { return slots_[0].as<uint8_t>(); }
  // Copies the host region of `layer` from `device` (its weights as uploaded there) and waits.
  void store_layer(int64_t layer, const void* device, cudaStream_t s);
  // Times copies of the largest streamed layer host -> device (pinned), in bytes/s; kept for
  // describe() and the bound.
  double measure_bandwidth();
  double bandwidth() const { return bandwidth_; }
  const WeightOffloadPlan& plan() const { return plan_; }

  void begin_forward(cudaStream_t compute);
  void begin_layer(int64_t layer, cudaStream_t compute);
  void end_layer(int64_t layer, cudaStream_t compute);

  // "offload: 12 of 32 layers (5.23 GB) ... host -> device 52.1 GB/s measured: <= 9.96 passes/s".
  std::string describe() const;

 private:
  // Streamed layer o's copy into its slot, after the compute stream's `ready` point.
  void copy(int64_t o, cudaEvent_t ready);

  WeightOffloadPlan plan_;
  std::vector<int64_t> order_;            // the streamed layers, ascending
  std::vector<int64_t> ordinal_;          // [L]: index into order_, -1: resident
  std::vector<int64_t> host_offset_, bytes_;  // by ordinal
  void* host_ = nullptr;                  // pinned, plan_.streamed_bytes
  DeviceBuffer slots_[2];
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t start_ = nullptr;           // the compute stream at begin_forward
  cudaEvent_t copied_[2]{}, freed_[2]{};  // by slot
  double bandwidth_ = 0;
};

}  // namespace pagoda::cuda
