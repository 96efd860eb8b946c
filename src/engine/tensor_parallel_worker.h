// A worker rank of a tensor-parallel model (docs/decisions.md D78): the process rank 0 spawns as
// `pagoda tp-worker --channel NAME --rank R` (engine/tensor_parallel_group.h). It reads the setup
// from the channel, loads its shards (model/model_loader.h with the rank), joins the
// communicator, builds its executor from rank 0's executor setup, then repeats rank 0's executor
// calls (runtime/rank_command.h) until the shutdown. It holds no scheduler, KV manager or
// tokenizer: rank 0's engine decides every step.
//
// While it waits for the next call it polls the channel (a yield loop for 200 ms after a call,
// then 100 us sleeps) and checks every 100 ms that rank 0, its parent, is alive: when rank 0 is
// gone it exits (status 3) instead of waiting forever.
//
// Returns the process exit status: 0 after the shutdown, 1 on a setup error (logged), 3 when rank
// 0 died.
#pragma once

#include <string>

namespace pagoda {

int run_tensor_parallel_worker(const std::string& channel, int rank);

}  // namespace pagoda
