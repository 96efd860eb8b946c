// Rank 0's side of a tensor-parallel model on one host (docs/decisions.md D78): one worker process
// per other rank (`pagoda tp-worker`, engine/tensor_parallel_worker.h), the shared-memory channel
// that carries the setup and then every executor call to them (common/shm_broadcast.h,
// runtime/rank_command.h), and rank 0's communicators.
//
// Lifetime: start() spawns the workers, which begin loading their shards; device_comm() /
// host_comm() make rank 0's communicator (NCCL: returns once every worker has joined);
// start_executors() hands the workers the KV cache and executor options rank 0 planned;
// send() repeats each executor call; the destructor sends the shutdown and reaps the workers
// (SIGKILL after 10 s).
//
// A worker that exits while the group runs is fatal to rank 0: its collectives would wait for it
// forever (an NCCL all-reduce cannot be left), so a watchdog thread logs which rank died and how,
// and ends the process (exit status 70). A worker notices rank 0's death itself and exits.
//
// Thread-safety: one thread (the engine core's) calls the methods.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/shm_broadcast.h"
#include "common/status.h"
#include "engine/tensor_parallel_setup.h"
#include "runtime/device_comm.h"
#include "runtime/rank_command.h"
#include "runtime/tensor_parallel_comm.h"

namespace pagoda {

class TensorParallelGroup {
 public:
  // `setup.comm` and the shared-memory names are filled in here. `executable`: the pagoda binary
  // whose tp-worker subcommand runs a worker (empty: this process's executable when it is pagoda,
  // else $PAGODA_BINARY).
  static Result<std::unique_ptr<TensorParallelGroup>> start(TensorParallelSetup setup, std::string executable = {});
  ~TensorParallelGroup();
  TensorParallelGroup(const TensorParallelGroup&) = delete;
  TensorParallelGroup& operator=(const TensorParallelGroup&) = delete;

  const TensorParallelSetup& setup() const { return setup_; }
  // Rank 0's communicators (made on the first call; owned by the group). device_comm: CUDA ranks;
  // host_comm: CPU ranks.
  Result<DeviceComm*> device_comm();
  Result<TensorParallelComm*> host_comm();
  Status start_executors(const TensorParallelExecutorSetup& s);
  // Every worker runs `c` next (encoded: runtime/rank_command.h). A worker that cannot take it
  // within a minute aborts the process.
  void send(const RankCommand& c);
  void send_encoded(std::span<const uint8_t> command);

 private:
  TensorParallelGroup() = default;
  Status send_bytes(const std::string& what, std::span<const uint8_t> bytes);
  void watch();

  TensorParallelSetup setup_;
  std::unique_ptr<ShmBroadcast> channel_;
  std::unique_ptr<TensorParallelComm> host_comm_;  // staged and shm: the shared-memory communicator's rank 0
  std::unique_ptr<DeviceComm> device_comm_;
  std::vector<pid_t> workers_;  // rank r at r - 1
  std::atomic<bool> stopping_{false};
  std::thread watchdog_;
};

}  // namespace pagoda
