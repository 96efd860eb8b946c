// `pagoda tp-worker`: a worker rank of a tensor-parallel model, started by rank 0
// (engine/tensor_parallel_group.h); not for direct use, so hidden from the help.
#include <memory>
#include <string>

#include "cli/command.h"
#include "engine/tensor_parallel_worker.h"

namespace pagoda::cli {
namespace {

struct TpWorkerArgs {
  std::string channel;
  int rank = 0;
};

const CommandRegistration kRegistration(
    "tp-worker", "A worker rank of a tensor-parallel model (started by rank 0)", [](CLI::App* sub) -> std::function<int()> {
      auto args = std::make_shared<TpWorkerArgs>();
      sub->group("");  // hidden
      sub->add_option("--channel", args->channel, "Rank 0's shared-memory channel")->required();
      sub->add_option("--rank", args->rank, "This worker's rank (1 ..)")->required()->check(CLI::Range(1, 63));
      return [args]() { return run_tensor_parallel_worker(args->channel, args->rank); };
    });

}  // namespace
}  // namespace pagoda::cli
