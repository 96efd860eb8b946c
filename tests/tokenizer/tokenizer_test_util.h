// Helpers shared by the tokenizer tests: reference vectors of ../shared/tokenizers/vocab-vectors
// and the committed Hugging Face references of testdata/tokenizer.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_paths.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::test {

inline std::string read_file_or_empty(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::string vocab_dir() { return shared_dir() + "/tokenizers/vocab-vectors"; }

// The vocabularies of ../shared/tokenizers/vocab-vectors that come with .inp/.out vectors.
inline const std::vector<std::string>& vector_vocabs() {
  static const std::vector<std::string> names = {"gpt-2", "llama-spm", "phi-3", "starcoder", "refact", "deepseek-coder"};
  return names;
}

struct VocabVectors {
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> ids;
};

// NAME.gguf.inp: strings separated by "\n__ggml_vocab_test__\n" (the file ends with one);
// NAME.gguf.out: one line of ids per string.
inline VocabVectors load_vectors(const std::string& name) {
  VocabVectors v;
  const std::string base = vocab_dir() + "/ggml-vocab-" + name + ".gguf";
  const std::string inp = read_file_or_empty(base + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  size_t pos = 0;
  while (true) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) break;
    v.texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream out(read_file_or_empty(base + ".out"));
  std::string line;
  while (v.ids.size() < v.texts.size() && std::getline(out, line)) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    int64_t id;
    while (ls >> id) ids.push_back(static_cast<int32_t>(id));
    v.ids.push_back(std::move(ids));
  }
  return v;
}

inline std::shared_ptr<const Tokenizer> load_vocab(const std::string& name) {
  auto r = Tokenizer::load(vocab_dir() + "/ggml-vocab-" + name + ".gguf");
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : nullptr;
}

inline std::string hf_testdata() { return testdata_dir() + "/tokenizer"; }

inline std::vector<std::string> hf_corpus() {
  auto j = nlohmann::json::parse(read_file_or_empty(hf_testdata() + "/corpus.json"), nullptr, false);
  std::vector<std::string> out;
  if (j.is_array())
    for (const auto& s : j) out.push_back(s.get<std::string>());
  return out;
}

inline std::string ids_to_string(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s.push_back(' ');
    s += std::to_string(ids[i]);
  }
  return s;
}

// Printable form of a test string for failure messages.
inline std::string show(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20) out += "\\x" + std::to_string(c);
    else out.push_back(static_cast<char>(c));
  }
  return out + "\"";
}

}  // namespace pagoda::test
