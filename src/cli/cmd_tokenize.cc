// `pagoda tokenize --model PATH [--no-bos] [--parse-special] (--text TEXT | --file FILE)`
//
// Prints the token ids on one line, separated by single spaces, then a newline. PATH is a .gguf
// file (vocab-only files too), a Hugging Face directory (or its tokenizer.json) or a SentencePiece
// .model file. --no-bos adds neither BOS nor EOS (the form of the reference vectors). --file reads
// the text byte for byte (newlines, trailing spaces, no added newline). Errors: a message on
// stderr and exit code 1.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "cli/command.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {
namespace {

struct TokenizeArgs {
  std::string model;
  std::string text;
  std::string file;
  bool no_bos = false;
  bool parse_special = false;
};

int run_tokenize(const TokenizeArgs& a) {
  std::string text = a.text;
  if (!a.file.empty()) {
    std::ifstream f(a.file, std::ios::binary);
    if (!f) {
      std::fprintf(stderr, "error: cannot open --file %s\n", a.file.c_str());
      return 1;
    }
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  auto tok = Tokenizer::load(a.model);
  if (!tok.ok()) {
    std::fprintf(stderr, "error: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  EncodeOptions opts;
  opts.add_special = !a.no_bos;
  opts.parse_special = a.parse_special;
  const std::vector<int32_t> ids = (*tok)->encode(text, opts);
  std::string line;
  line.reserve(ids.size() * 6 + 1);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line.push_back(' ');
    line += std::to_string(ids[i]);
  }
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

const CommandRegistration kRegistration(
    "tokenize", "Print the token ids of a text", [](CLI::App* sub) -> std::function<int()> {
      auto args = std::make_shared<TokenizeArgs>();
      sub->add_option("--model", args->model, "A .gguf file, a Hugging Face directory or a SentencePiece .model")->required();
      auto* text = sub->add_option("--text", args->text, "The text to tokenize");
      auto* file = sub->add_option("--file", args->file, "A file whose bytes are the text to tokenize");
      text->excludes(file);
      file->excludes(text);
      sub->add_flag("--no-bos", args->no_bos, "Add no BOS/EOS tokens");
      sub->add_flag("--parse-special", args->parse_special, "Recognize special tokens written in the text");
      return [args, text, file]() {
        if (text->count() == 0 && file->count() == 0) {
          std::fprintf(stderr, "error: one of --text or --file is required\n");
          return 1;
        }
        return run_tokenize(*args);
      };
    });

}  // namespace
}  // namespace pagoda::cli
