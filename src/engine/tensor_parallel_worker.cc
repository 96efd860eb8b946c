#include "engine/tensor_parallel_worker.h"

#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/log.h"
#include "common/process_alive.h"
#include "common/shm_broadcast.h"
#include "common/thread_pool.h"
#include "engine/tensor_parallel_setup.h"
#include "model/model_loader.h"
#include "runtime/cuda_comm.h"
#include "runtime/cuda_executor.h"
#include "runtime/rank_command.h"
#include "runtime/shm_tensor_parallel_comm.h"

namespace pagoda {
namespace {

constexpr int kParentGone = 3;

// The next message, waiting as long as rank 0 lives; nullopt when it died.
std::optional<Result<std::vector<uint8_t>>> next_message(ShmBroadcast& ch, pid_t parent) {
  const auto start = std::chrono::steady_clock::now();
  auto last_check = start;
  while (!ch.message_ready()) {
    const auto now = std::chrono::steady_clock::now();
    if (now - start < std::chrono::milliseconds(200)) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (now - last_check >= std::chrono::milliseconds(100)) {
      last_check = now;
      if (::getppid() != parent || !process_alive(parent)) return std::nullopt;
    }
  }
  return ch.receive();
}

std::string text_of(const std::vector<uint8_t>& m) { return std::string(m.begin(), m.end()); }

// Everything a worker owns, destroyed executor first.
struct Worker {
  std::unique_ptr<ThreadPool> pool;
  LoadedModel model;
  std::unique_ptr<TensorParallelComm> host_comm;
  std::unique_ptr<DeviceComm> device_comm;
  TensorParallelRank cpu_rank;
  std::unique_ptr<ModelExecutor> executor;
  ~Worker() { executor.reset(); }
};

Status set_up(Worker& w, ShmBroadcast& ch, pid_t parent, int rank, bool& parent_gone) {
  auto m1 = next_message(ch, parent);
  if (!m1) return parent_gone = true, Status();
  PAGODA_ASSIGN_OR_RETURN(std::vector<uint8_t> setup_bytes, std::move(*m1));
  PAGODA_ASSIGN_OR_RETURN(const TensorParallelSetup setup, parse_tensor_parallel_setup(text_of(setup_bytes)));
  if (rank < 1 || rank >= setup.size) return invalid_argument("rank {} of {} ranks", rank, setup.size);
  const bool cuda = setup.device == "cuda";
  const int device = setup.comm == "nccl" ? setup.device_index + rank : setup.device_index;
  ModelLoadOptions lo;
  lo.max_model_len = setup.max_model_len;
  lo.cpu_kernels = !cuda;
  lo.quantization = setup.quantization;
  lo.load_format = setup.load_format;
  lo.tensor_parallel_size = setup.size;
  lo.tensor_parallel_rank = rank;
  PAGODA_ASSIGN_OR_RETURN(w.model, load_model(setup.model, lo));
  if (setup.comm == "staged" || setup.comm == "shm") {
    PAGODA_ASSIGN_OR_RETURN(w.host_comm, ShmTensorParallelComm::open(setup.shm_comm, rank));
  }
  if (setup.comm == "nccl") {
    PAGODA_ASSIGN_OR_RETURN(const NcclUniqueId id, NcclUniqueId::from_hex(setup.nccl_id));
    PAGODA_ASSIGN_OR_RETURN(w.device_comm, make_nccl_comm(id, rank, setup.size, device));
  } else if (setup.comm == "staged") {
    PAGODA_ASSIGN_OR_RETURN(w.device_comm, make_staged_comm(*w.host_comm, device));
  }
  auto m2 = next_message(ch, parent);
  if (!m2) return parent_gone = true, Status();
  PAGODA_ASSIGN_OR_RETURN(std::vector<uint8_t> ex_bytes, std::move(*m2));
  PAGODA_ASSIGN_OR_RETURN(TensorParallelExecutorSetup es, parse_tensor_parallel_executor_setup(text_of(ex_bytes)));
  const TensorParallelPart& part = w.model.tensor_parallel;
  if (cuda) {
    es.cuda.device = device;
    es.cuda.tensor_parallel = {w.device_comm.get(), part.vocab_begin, part.vocab_rows_per_rank, w.model.config.vocab_size};
    PAGODA_ASSIGN_OR_RETURN(w.executor, make_cuda_executor(*w.model.model, es.kv, es.cuda));
  } else {
    w.pool = std::make_unique<ThreadPool>(setup.threads);
    w.cpu_rank = {w.host_comm.get(), part.vocab_begin, w.model.config.vocab_size};
    w.executor = make_cpu_executor(*w.model.model, es.kv, *w.pool, {}, &w.cpu_rank);
  }
  log_info("tensor-parallel", "rank {} of {} ready: {}", rank, setup.size, w.executor->describe());
  return {};
}

}  // namespace

int run_tensor_parallel_worker(const std::string& channel, int rank) {
  const pid_t parent = ::getppid();
  auto ch = ShmBroadcast::open(channel, rank - 1, std::chrono::seconds(60));
  if (!ch.ok()) {
    log_error("tensor-parallel", "rank {}: {}", rank, ch.status().to_string());
    return 1;
  }
  Worker w;
  bool parent_gone = false;
  if (Status s = set_up(w, *ch, parent, rank, parent_gone); !s.ok()) {
    log_error("tensor-parallel", "rank {}: {}", rank, s.to_string());
    return 1;
  }
  if (parent_gone) return kParentGone;
  for (;;) {
    auto m = next_message(*ch, parent);
    if (!m) {
      log_error("tensor-parallel", "rank {}: rank 0 (pid {}) is gone; exiting", rank, parent);
      return kParentGone;
    }
    if (!m->ok()) {
      log_error("tensor-parallel", "rank {}: {}", rank, m->status().to_string());
      return 1;
    }
    auto c = decode_rank_command(**m);
    if (!c.ok()) {
      log_error("tensor-parallel", "rank {}: {}", rank, c.status().to_string());
      return 1;
    }
    switch (c->op) {
      case RankOp::kForward: w.executor->forward_discard(c->batch); break;
      case RankOp::kSwapOut: w.executor->swap_out(c->copies); break;
      case RankOp::kSwapIn: w.executor->swap_in(c->copies); break;
      case RankOp::kSetGraphs: w.executor->set_graphs_enabled(c->flag); break;
      case RankOp::kShutdown: return 0;
    }
  }
}

}  // namespace pagoda
