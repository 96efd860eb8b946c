// `pagoda gateway`: the load-balancing gateway in front of `pagoda serve` workers (src/gateway,
// docs/gateway.md). The same code as the engine-free `pagoda-gateway` executable.
#include "cli/command.h"
#include "gateway/gateway_cli.h"

namespace pagoda::cli {
namespace {

CommandRegistration reg("gateway", "Load-balancing gateway in front of `pagoda serve` workers (OpenAI API, SSE)",
                        [](CLI::App* sub) -> std::function<int()> {
                          auto cli = std::make_shared<gateway::GatewayCli>();
                          gateway::add_gateway_options(sub, *cli);
                          return [cli] { return gateway::run_gateway(*cli); };
                        });

}  // namespace
}  // namespace pagoda::cli
