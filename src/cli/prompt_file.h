#pragma once

#include <string>
#include <vector>

namespace pagoda::cli {

// The prompts of a --prompt-file: text blocks separated by lines holding only "---"; blank blocks
// are dropped. A file that cannot be opened gives no prompts (callers report "no prompts in F").
std::vector<std::string> read_prompt_file(const std::string& path);

}  // namespace pagoda::cli
