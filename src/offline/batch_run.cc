#include "offline/batch_run.h"

#include <condition_variable>
#include <deque>
#include <mutex>

namespace pagoda::offline {

// Indices of the streams that queued outputs since the consumer last drained them. A stream is
// listed once however many outputs it queued (flagged[i]); the consumer clears the flag before
// draining, so an output queued during the drain lists the stream again (at worst an empty drain).
struct BatchRun::Ready {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<size_t> queue;
  std::vector<bool> flagged;

  void mark(size_t i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (flagged[i]) return;
      flagged[i] = true;
      queue.push_back(i);
    }
    cv.notify_one();
  }
};

BatchRun::BatchRun(Engine& engine, std::shared_ptr<Ready> ready) : engine_(engine), ready_(std::move(ready)) {}

Result<std::unique_ptr<BatchRun>> BatchRun::submit(Engine& engine, std::vector<GenerateRequest> requests) {
  auto ready = std::make_shared<Ready>();
  ready->flagged.assign(requests.size(), false);
  std::unique_ptr<BatchRun> run(new BatchRun(engine, ready));
  run->streams_.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const int32_t n = requests[i].n;
    auto stream = engine.submit(std::move(requests[i]));
    if (!stream.ok()) {
      run->cancel();
      return make_status(stream.status().code(), "request {}: {}", i, stream.status().message());
    }
    run->streams_.push_back(*stream);
    run->request_ids_.push_back((*stream)->id());
    run->unfinished_samples_.push_back(n);
    run->remaining_samples_ += n;
    // The callback holds the shared Ready, not the run: the engine may still call it after the
    // run is gone (a cancelled request's final output).
    (*stream)->set_notify([ready, i] { ready->mark(i); });
  }
  return run;
}

BatchRun::~BatchRun() {
  cancel();
  for (auto& s : streams_) s->set_notify(nullptr);
}

bool BatchRun::done() const { return remaining_samples_ == 0 && pending_pos_ == pending_.size(); }

void BatchRun::cancel() {
  for (size_t i = 0; i < streams_.size(); ++i)
    if (unfinished_samples_[i] > 0) engine_.cancel(request_ids_[i]);
}

std::optional<BatchOutput> BatchRun::next_for(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (pending_pos_ == pending_.size()) {
    pending_.clear();
    pending_pos_ = 0;
    if (remaining_samples_ == 0) return std::nullopt;
    std::deque<size_t> marked;
    {
      std::unique_lock<std::mutex> lock(ready_->mu);
      if (!ready_->cv.wait_until(lock, deadline, [&] { return !ready_->queue.empty(); })) return std::nullopt;
      marked.swap(ready_->queue);
      for (size_t i : marked) ready_->flagged[i] = false;
    }
    for (size_t i : marked) {
      while (auto out = streams_[i]->try_next()) {
        if (out->finished) {
          --unfinished_samples_[i];
          --remaining_samples_;
        }
        pending_.push_back({i, std::move(*out)});
      }
    }
  }
  return std::move(pending_[pending_pos_++]);
}

}  // namespace pagoda::offline
