// How a model's weights are obtained (`--load-format`, vLLM's option of the same name):
//   auto   from the checkpoint at the path (GGUF file, Hugging Face directory).
//   dummy  random weights of the shape a Hugging Face config.json declares, generated in host
//          memory at load (model/random_weights.h); the path is the config.json or a directory
//          holding it, and no weight file is read. For benchmarks: the outputs are meaningless.
#pragma once

#include <string_view>

#include "common/status.h"

namespace pagoda {

enum class LoadFormat { kAuto, kDummy };

// "auto" | "dummy" (case-sensitive; "" is auto); an invalid-argument error lists them.
Result<LoadFormat> parse_load_format(std::string_view name);
std::string_view load_format_name(LoadFormat f);

}  // namespace pagoda
