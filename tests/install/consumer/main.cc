// Greedy continuation of a prompt through the installed library's offline API (offline/llm.h):
// prints the generated token ids on one line, as `pagoda generate --ids` does.
// Usage: pagoda_consumer MODEL PROMPT N
#include <cstdio>
#include <cstdlib>

#include "offline/llm.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: pagoda_consumer MODEL PROMPT N\n");
    return 2;
  }
  pagoda::EngineConfig config;
  config.model = argv[1];
  config.max_model_len = 256;
  auto llm = pagoda::offline::Llm::create(config);
  if (!llm.ok()) {
    std::fprintf(stderr, "%s\n", llm.status().to_string().c_str());
    return 1;
  }
  pagoda::offline::GenerationParams params;
  params.sampling.temperature = 0;
  params.stop.max_tokens = std::atoi(argv[3]);
  params.stop.ignore_eos = true;
  auto out = (*llm)->generate({pagoda::offline::Prompt::of_text(argv[2])}, {params});
  if (!out.ok()) {
    std::fprintf(stderr, "%s\n", out.status().to_string().c_str());
    return 1;
  }
  const auto& ids = out->at(0).outputs.at(0).token_ids;
  for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
  std::printf("\n");
  return 0;
}
