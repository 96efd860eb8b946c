// `pagoda detokenize --model PATH --ids "1 2 3" [--skip-special]`
//
// Prints the decoded text exactly, with no newline added (so the output can be compared byte for
// byte with the original text). Ids are decimal integers separated by spaces or commas; an id
// outside the vocabulary is an error. Errors: a message on stderr and exit code 1.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/command.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {
namespace {

struct DetokenizeArgs {
  std::string model;
  std::string ids;
  bool skip_special = false;
};

bool parse_ids(const std::string& s, std::vector<int32_t>* out, std::string* error) {
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == ' ' || s[i] == ',' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
      ++i;
      continue;
    }
    size_t j = i;
    if (s[j] == '-' || s[j] == '+') ++j;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    const std::string tok = s.substr(i, j - i);
    const bool sep_ok = j == s.size() || s[j] == ' ' || s[j] == ',' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r';
    if (tok.empty() || tok == "-" || tok == "+" || !sep_ok) {
      *error = "--ids: '" + s.substr(i, std::min<size_t>(s.size() - i, 20)) + "' is not an integer";
      return false;
    }
    errno = 0;
    const long long v = std::strtoll(tok.c_str(), nullptr, 10);
    if (errno == ERANGE || v < INT32_MIN || v > INT32_MAX) {
      *error = "--ids: " + tok + " is out of range";
      return false;
    }
    out->push_back(static_cast<int32_t>(v));
    i = j;
  }
  return true;
}

int run_detokenize(const DetokenizeArgs& a) {
  std::vector<int32_t> ids;
  std::string error;
  if (!parse_ids(a.ids, &ids, &error)) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return 1;
  }
  auto tok = Tokenizer::load(a.model);
  if (!tok.ok()) {
    std::fprintf(stderr, "error: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  for (int32_t id : ids) {
    if (id < 0 || id >= (*tok)->vocab_size()) {
      std::fprintf(stderr, "error: --ids: token id %d is outside the vocabulary [0, %lld)\n", id,
                   static_cast<long long>((*tok)->vocab_size()));
      return 1;
    }
  }
  const std::string text = (*tok)->decode(ids, a.skip_special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

const CommandRegistration kRegistration(
    "detokenize", "Print the text of token ids", [](CLI::App* sub) -> std::function<int()> {
      auto args = std::make_shared<DetokenizeArgs>();
      sub->add_option("--model", args->model, "A .gguf file, a Hugging Face directory or a SentencePiece .model")->required();
      sub->add_option("--ids", args->ids, "Token ids, e.g. \"1 2 3\"")->required();
      sub->add_flag("--skip-special", args->skip_special, "Leave out special tokens");
      return [args]() { return run_detokenize(*args); };
    });

}  // namespace
}  // namespace pagoda::cli
