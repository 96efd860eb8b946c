#include "engine/tensor_parallel_group.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "common/check.h"
#include "common/env_config.h"
#include "common/log.h"
#include "runtime/cuda_comm.h"
#include "runtime/cuda_executor.h"
#include "runtime/shm_tensor_parallel_comm.h"

extern char** environ;

namespace pagoda {
namespace {

std::string unique_name(const char* what) {
  static std::atomic<int> counter{0};
  return fmt::format("/pagoda-{}-{}-{}", what, ::getpid(), counter.fetch_add(1));
}

Result<std::string> worker_executable(std::string exe) {
  if (exe.empty()) {
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec && self.filename().string().rfind("pagoda", 0) == 0 && self.filename() != "pagoda-gateway") exe = self.string();
  }
  if (exe.empty())
    if (auto env = tensor_parallel_binary_env()) exe = *env;
  if (exe.empty())
    return invalid_argument("tensor parallelism runs its other ranks as `pagoda tp-worker` processes: this process is not "
                            "the pagoda binary, so set PAGODA_BINARY to it");
  if (::access(exe.c_str(), X_OK) != 0) return invalid_argument("the pagoda binary '{}' for the worker ranks is not executable", exe);
  return exe;
}

std::string exit_description(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

}  // namespace

Result<std::unique_ptr<TensorParallelGroup>> TensorParallelGroup::start(TensorParallelSetup setup, std::string executable) {
  if (setup.size < 2 || setup.size > 64) return invalid_argument("tensor-parallel size {} (2..64)", setup.size);
  PAGODA_ASSIGN_OR_RETURN(const std::string exe, worker_executable(std::move(executable)));
  auto g = std::unique_ptr<TensorParallelGroup>(new TensorParallelGroup());
  if (setup.device == "cpu") {
    setup.comm = "shm";
  } else if (setup.comm == "nccl") {
    const int devices = cuda_device_count();
    if (setup.device_index + setup.size > devices)
      return invalid_argument("tensor parallelism over {} GPUs from cuda:{} needs {} CUDA devices; {} are visible "
                              "(PAGODA_TP_COMM=staged runs the ranks on one GPU through host memory, for tests)",
                              setup.size, setup.device_index, setup.device_index + setup.size, devices);
    PAGODA_ASSIGN_OR_RETURN(const NcclUniqueId id, nccl_unique_id());
    setup.nccl_id = id.hex();
    ::setenv("NCCL_NVLS_ENABLE", "0", 0);  // NVLink multicast stays off (the device notes); the workers inherit it
  }
  if (setup.comm == "staged" || setup.comm == "shm") {
    setup.shm_comm = unique_name("tpcomm");
    PAGODA_ASSIGN_OR_RETURN(g->host_comm_, ShmTensorParallelComm::create(setup.shm_comm, setup.size));
  }
  ShmBroadcast::Options o;
  o.readers = setup.size - 1;
  o.slots = 8;
  o.slot_bytes = int64_t{1} << 20;
  o.timeout = std::chrono::seconds(60);
  const std::string channel = unique_name("tpch");
  PAGODA_ASSIGN_OR_RETURN(ShmBroadcast ch, ShmBroadcast::create(channel, o));
  g->channel_ = std::make_unique<ShmBroadcast>(std::move(ch));
  g->setup_ = setup;
  for (int r = 1; r < setup.size; ++r) {
    const std::string rank = std::to_string(r);
    std::vector<std::string> args = {exe, "tp-worker", "--channel", channel, "--rank", rank};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (const int e = ::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ); e != 0)
      return io_error("cannot start tensor-parallel rank {} ({}): {}", r, exe, std::strerror(e));
    g->workers_.push_back(pid);
  }
  log_info("tensor-parallel", "{} ranks ({} communicator): workers {} started", setup.size, setup.comm,
           fmt::join(g->workers_, ", "));
  const std::string json = to_json(setup);
  PAGODA_RETURN_IF_ERROR(g->send_bytes("the setup", std::span(reinterpret_cast<const uint8_t*>(json.data()), json.size())));
  g->watchdog_ = std::thread([p = g.get()] { p->watch(); });
  return g;
}

TensorParallelGroup::~TensorParallelGroup() {
  stopping_ = true;
  if (channel_ != nullptr) {
    RankCommand bye;
    bye.op = RankOp::kShutdown;
    const std::vector<uint8_t> b = encode_rank_command(bye);
    (void)channel_->send(b);
  }
  if (watchdog_.joinable()) watchdog_.join();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (pid_t pid : workers_) {
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  device_comm_.reset();  // before the host communicator it may stage through
}

void TensorParallelGroup::watch() {
  while (!stopping_) {
    for (size_t i = 0; i < workers_.size() && !stopping_; ++i) {
      int status = 0;
      if (::waitpid(workers_[i], &status, WNOHANG) != workers_[i] || stopping_) continue;
      log_error("tensor-parallel", "rank {} (pid {}) {}: rank 0 cannot run the model without it and exits", i + 1,
                workers_[i], exit_description(status));
      std::_Exit(70);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

Status TensorParallelGroup::send_bytes(const std::string& what, std::span<const uint8_t> bytes) {
  Status s = channel_->send(bytes);
  if (!s.ok()) return Status(s.code(), fmt::format("sending {} to the tensor-parallel workers: {}", what, s.message()));
  return {};
}

Result<DeviceComm*> TensorParallelGroup::device_comm() {
  if (device_comm_ != nullptr) return device_comm_.get();
  if (setup_.comm == "nccl") {
    PAGODA_ASSIGN_OR_RETURN(const NcclUniqueId id, NcclUniqueId::from_hex(setup_.nccl_id));
    PAGODA_ASSIGN_OR_RETURN(device_comm_, make_nccl_comm(id, 0, setup_.size, setup_.device_index));
  } else if (setup_.comm == "staged") {
    PAGODA_ASSIGN_OR_RETURN(device_comm_, make_staged_comm(*host_comm_, setup_.device_index));
  } else {
    return invalid_argument("the {} communicator has no device side", setup_.comm);
  }
  return device_comm_.get();
}

Result<TensorParallelComm*> TensorParallelGroup::host_comm() {
  if (setup_.comm != "shm") return invalid_argument("the {} communicator is not a host one", setup_.comm);
  return host_comm_.get();
}

Status TensorParallelGroup::start_executors(const TensorParallelExecutorSetup& s) {
  const std::string json = to_json(s);
  return send_bytes("the executor setup", std::span(reinterpret_cast<const uint8_t*>(json.data()), json.size()));
}

void TensorParallelGroup::send(const RankCommand& c) { send_encoded(encode_rank_command(c)); }

void TensorParallelGroup::send_encoded(std::span<const uint8_t> command) {
  const Status s = channel_->send(command);
  PAGODA_CHECK(s.ok(), "tensor parallelism: {}", s.message());
}

}  // namespace pagoda
