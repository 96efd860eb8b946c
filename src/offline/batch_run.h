// A batch of requests submitted to the Engine together and read back as one stream of outputs:
// what offline generation (offline/llm.h, the Python package's pagoda.LLM) runs on. Every request
// is submitted before the first output is read, so the engine's scheduler batches them (continuous
// batching: the same engine, scheduler and KV cache as the server); nothing here steps the model.
//
// Thread-safety: one consumer thread calls next_for(); cancel() may be called from any thread.
// The engine thread only marks streams ready (RequestStream::set_notify) and never blocks on this.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"

namespace pagoda::offline {

// One output of one request of the batch, as the engine queued it (text and tokens are deltas).
struct BatchOutput {
  size_t request_index = 0;  // position of the request in the submitted vector
  RequestOutput output;
};

class BatchRun {
 public:
  // Submits every request (each must carry a unique request_id, or none for the engine's own).
  // When the engine refuses one, the ones already submitted are cancelled and its error is
  // returned with the request's position ("request 3: ..."), code unchanged.
  static Result<std::unique_ptr<BatchRun>> submit(Engine& engine, std::vector<GenerateRequest> requests);
  // Cancels the requests that have not finished (their KV blocks are freed at the engine's next step).
  ~BatchRun();
  BatchRun(const BatchRun&) = delete;
  BatchRun& operator=(const BatchRun&) = delete;

  // The next output of any request, in the order the engine produced them per request (requests
  // interleave). Waits at most `timeout`; nullopt on timeout or once done().
  std::optional<BatchOutput> next_for(std::chrono::milliseconds timeout);
  // Every sample of every request has finished and its outputs were read.
  bool done() const;
  // Cancels every unfinished request; their final outputs (finish_reason "abort") still arrive.
  void cancel();

  size_t size() const { return request_ids_.size(); }
  const std::string& request_id(size_t i) const { return request_ids_[i]; }

 private:
  struct Ready;  // streams with queued outputs, shared with the engine thread's notify callbacks
  BatchRun(Engine& engine, std::shared_ptr<Ready> ready);

  Engine& engine_;
  std::shared_ptr<Ready> ready_;
  std::vector<std::shared_ptr<RequestStream>> streams_;
  std::vector<std::string> request_ids_;
  std::vector<int32_t> unfinished_samples_;  // per request
  int64_t remaining_samples_ = 0;
  std::vector<BatchOutput> pending_;         // drained from ready streams, not yet returned
  size_t pending_pos_ = 0;
};

}  // namespace pagoda::offline
