// Subcommand registry for the `pagoda` executable. Each cmd_*.cc registers itself with a static
// CommandRegistration; main.cc builds the CLI11 app from the registry. Adding a subcommand is
// adding one file.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace pagoda::cli {

// Called once when the app is built: declares the subcommand's options on `sub` (binding them
// to state it owns) and returns the action to run if the subcommand is chosen. The action
// returns the process exit code.
using CommandSetup = std::function<std::function<int()>(CLI::App* sub)>;

struct CommandInfo {
  std::string name;
  std::string description;
  CommandSetup setup;
};

std::vector<CommandInfo>& command_registry();

// Sub-subcommands of `pagoda bench` (`bench serve`, `bench throughput`); `pagoda bench --model ...`
// without one runs the offline llama-bench style test.
std::vector<CommandInfo>& bench_subcommand_registry();
struct BenchSubcommandRegistration {
  BenchSubcommandRegistration(std::string name, std::string description, CommandSetup setup) {
    bench_subcommand_registry().push_back({std::move(name), std::move(description), std::move(setup)});
  }
};

// --device, --dtype and --no-cuda-graphs: the same for every subcommand that runs a model.
inline void add_device_options(CLI::App* app, std::string& device, std::string& dtype, bool& cuda_graphs) {
  app->add_option("--device", device,
                  "auto (the GPU when this build has CUDA and one is visible, else the CPU), cpu, cuda or cuda:N");
  app->add_option("--dtype", dtype, "CUDA compute dtype: auto (f32 for f32 weights, else bf16), f32, bf16");
  app->add_flag_callback("--no-cuda-graphs", [&cuda_graphs] { cuda_graphs = false; }, "CUDA: run decode steps eagerly");
}

struct CommandRegistration {
  CommandRegistration(std::string name, std::string description, CommandSetup setup) {
    command_registry().push_back({std::move(name), std::move(description), std::move(setup)});
  }
};

}  // namespace pagoda::cli
