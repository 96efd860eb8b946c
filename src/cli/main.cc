// `pagoda` executable: dispatches to the registered subcommands (cmd_*.cc).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/options.h"
#include "common/startup_profile.h"

namespace pagoda::cli {
std::vector<CommandInfo>& command_registry() {
  static std::vector<CommandInfo> registry;
  return registry;
}
}  // namespace pagoda::cli

int main(int argc, char** argv) {
  pagoda::startup_profile::mark_process_start();
  using namespace pagoda::cli;
  CLI::App app{"Pagoda: an inference engine and server for large language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "pagoda 0.1.0");
  // Every option's default is shown in --help; subcommands inherit this from the app.
  app.option_defaults()->always_capture_default();
  std::vector<std::pair<CLI::App*, std::function<int()>>> actions;
  for (auto& cmd : command_registry()) {
    CLI::App* sub = app.add_subcommand(cmd.name, cmd.description);
    add_log_level_option(sub);
    actions.emplace_back(sub, cmd.setup(sub));
  }
  // llama.cpp's spelling -ngl (CLI11 names of one dash have one letter).
  std::vector<std::string> args(argv, argv + argc);
  std::vector<char*> arg_ptrs;
  for (std::string& a : args) {
    if (a == "-ngl") a = "--n-gpu-layers";
    arg_ptrs.push_back(a.data());
  }
  try {
    app.parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto& [sub, action] : actions)
    if (sub->parsed()) return action();
  return 2;
}
