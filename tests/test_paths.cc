#include "test_paths.h"

#include <cstdlib>
#include <filesystem>

namespace pagoda::test {
namespace {
std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}
}  // namespace

std::string shared_dir() { return env_or("PAGODA_SHARED_DIR", PAGODA_SHARED_DIR); }
std::string testdata_dir() { return env_or("PAGODA_TESTDATA_DIR", PAGODA_TESTDATA_DIR); }
std::string models_dir() { return env_or("PAGODA_MODELS_DIR", PAGODA_MODELS_DIR); }
std::string pagoda_binary() { return env_or("PAGODA_BINARY", PAGODA_BINARY); }
std::string smollm2_path() {
  std::string p = models_dir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  return std::filesystem::exists(p) ? p : "";
}
std::string stories260k_gguf() { return shared_dir() + "/models/stories260K/stories260K.gguf"; }

}  // namespace pagoda::test
