#include "cli/prompt_file.h"

#include <fstream>

namespace pagoda::cli {

std::vector<std::string> read_prompt_file(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> prompts;
  if (!in) return prompts;
  std::string line, cur;
  auto flush = [&] {
    if (cur.find_first_not_of(" \n\t") != std::string::npos) prompts.push_back(cur);
    cur.clear();
  };
  while (std::getline(in, line)) {
    if (line == "---") flush();
    else cur += line + "\n";
  }
  flush();
  return prompts;
}

}  // namespace pagoda::cli
