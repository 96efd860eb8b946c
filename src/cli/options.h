// Shared command-line checks of the `pagoda` subcommands: the --device choice (auto resolved and
// said at start-up), --max-model-len against the model's context, --log-level. Each check prints
// one clear "pagoda CMD: ..." error on stderr and returns false when the input is refused.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda::cli {

// "auto" becomes "cuda:0" when this build has the CUDA backend and a device is visible, else
// "cpu" (also when `model`, if given, is of a family the CUDA backend does not run); the choice
// and its reason are logged. Explicit devices are checked (parse_device) and kept.
bool resolve_device_option(std::string& device, std::string_view cmd, const std::string& model = {});

// Refuses a --max-model-len beyond the model's trained context (max_position_embeddings; read
// from the GGUF header or config.json without loading weights). There is no RoPE-scaling flag
// that would extend the context, so nothing allows it. 0 (the model's) always passes.
bool check_max_model_len(std::string_view cmd, const std::string& model, int64_t max_model_len);

// --log-level debug|info|warn|error on `app` (default info); sets the process-wide level
// (common/log.h) as soon as it is parsed.
void add_log_level_option(CLI::App* app);

// Range validators of the numeric options; CLI11 prints "--opt: Value X not in range [A - B]".
inline CLI::Range port_range() { return CLI::Range(0, 65535); }

}  // namespace pagoda::cli
