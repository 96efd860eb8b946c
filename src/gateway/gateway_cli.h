// The command line of the gateway, shared by `pagoda gateway` (cli/cmd_gateway.cc) and the
// engine-free `pagoda-gateway` executable (gateway/main.cc). Flags override the --config file.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gateway/config.h"

namespace pagoda::gateway {

struct GatewayCli {
  std::string config_file;
  std::vector<std::string> workers, api_keys;
  std::string global_limit;
  bool check_only = false;  // --check-config: validate, print a summary, exit
  GatewayConfig flags;  // values of the flags given
  std::vector<std::function<void(GatewayConfig&)>> apply;  // copies each given flag into a config
};

// Declares the options on `app`, bound to `cli` (which must outlive parsing and run()).
void add_gateway_options(CLI::App* app, GatewayCli& cli);
// Builds the configuration (file, then flags), starts the gateway and serves until SIGTERM/SIGINT
// (then drains: stops accepting, lets requests in flight finish for drain_timeout_s). Exit code.
int run_gateway(GatewayCli& cli);

}  // namespace pagoda::gateway
