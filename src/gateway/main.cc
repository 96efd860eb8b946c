// `pagoda-gateway`: the gateway alone, linked without the engine (pagoda_common + Boost.Beast).
#include <CLI/CLI.hpp>

#include "common/log.h"
#include "gateway/gateway_cli.h"

int main(int argc, char** argv) {
  CLI::App app{"pagoda-gateway: a load-balancing gateway in front of `pagoda serve` workers (docs/gateway.md)"};
  app.option_defaults()->always_capture_default();
  pagoda::gateway::GatewayCli cli;
  pagoda::gateway::add_gateway_options(&app, cli);
  std::string level = "info";
  app.add_option("--log-level", level, "debug, info, warn or error");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto parsed = pagoda::parse_log_level(level);
  if (!parsed) {
    fprintf(stderr, "error: --log-level '%s' is not one of debug, info, warn, error\n", level.c_str());
    return 2;
  }
  pagoda::set_log_level(*parsed);
  return pagoda::gateway::run_gateway(cli);
}
