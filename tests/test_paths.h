// Paths the tests read: ../shared (models, tokenizer vectors), testdata/ (committed references),
// models/ (fetched by scripts/fetch_models.sh) and the pagoda binary. Overridable by environment
// variables of the same names (PAGODA_SHARED_DIR, ...), so a test binary can run from anywhere.
#pragma once

#include <string>

namespace pagoda::test {

std::string shared_dir();
std::string testdata_dir();
std::string models_dir();
std::string pagoda_binary();
// models/SmolLM2-135M-Instruct.Q4_1.gguf, or "" if it has not been fetched.
std::string smollm2_path();
std::string stories260k_gguf();

}  // namespace pagoda::test
