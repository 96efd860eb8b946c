// StreamingDetokenizer beyond the per-vocabulary checks of vocab_vectors_test and
// hf_reference_test: characters split across byte-fallback tokens, random id sequences (which
// produce malformed UTF-8, BOS/EOS in the middle, ids out of range), reset, and the Metaspace
// first-token rule.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"

namespace pagoda::test {
namespace {

std::string stream_all(const std::shared_ptr<const Tokenizer>& tok, const std::vector<int32_t>& ids, bool skip,
                       std::vector<std::string>* deltas = nullptr) {
  StreamingDetokenizer s(tok, skip);
  std::string out;
  for (int32_t id : ids) {
    std::string d = s.push(id);
    EXPECT_TRUE(unicode::is_valid_utf8(d));
    if (deltas) deltas->push_back(d);
    out += d;
  }
  std::string tail = s.flush();
  EXPECT_TRUE(unicode::is_valid_utf8(tail));
  if (deltas) deltas->push_back(tail);
  return out + tail;
}

TEST(Streaming, CharacterSplitAcrossByteTokens) {
  // Vector 18 of llama-spm, " this is 🦙.cpp": the llama is four byte-fallback tokens.
  const VocabVectors v = load_vectors("llama-spm");
  auto tok = load_vocab("llama-spm");
  ASSERT_TRUE(tok);
  size_t tested = 0;
  for (size_t i = 0; i < v.texts.size(); ++i) {
    std::vector<std::string> deltas;
    EXPECT_EQ(stream_all(tok, v.ids[i], true, &deltas), v.texts[i]);
    // A delta is never a piece of a character: whenever a byte token starts a multi-byte
    // character, its delta is empty until the last byte arrives.
    for (size_t k = 0; k < v.ids[i].size(); ++k) {
      const std::string b = tok->token_bytes(v.ids[i][k]);
      if (b.size() == 1 && (static_cast<uint8_t>(b[0]) & 0xC0) == 0xC0) {
        EXPECT_EQ(deltas[k], "") << "string " << i << " token " << k;
        ++tested;
      }
    }
  }
  EXPECT_GT(tested, 20u);
}

TEST(Streaming, RandomIdsEqualDecode) {
  std::mt19937 rng(21);
  for (const std::string name : {"llama-spm", "gpt-2", "phi-3", "deepseek-coder"}) {
    auto tok = load_vocab(name);
    ASSERT_TRUE(tok);
    for (int iter = 0; iter < 500; ++iter) {
      std::vector<int32_t> ids;
      const size_t n = rng() % 40;
      for (size_t k = 0; k < n; ++k) {
        // Mostly low ids (bytes, byte-fallback pieces, specials), some anywhere, a few invalid.
        const uint32_t r = rng() % 10;
        if (r < 5) ids.push_back(static_cast<int32_t>(rng() % 300));
        else if (r < 9) ids.push_back(static_cast<int32_t>(rng() % tok->vocab_size()));
        else ids.push_back(static_cast<int32_t>(tok->vocab_size() + rng() % 5) * (rng() % 2 ? 1 : -1));
      }
      for (bool skip : {true, false}) EXPECT_EQ(stream_all(tok, ids, skip), tok->decode(ids, skip)) << name;
    }
  }
}

TEST(Streaming, ResetStartsOver) {
  auto tok = load_vocab("llama-spm");
  ASSERT_TRUE(tok);
  const auto ids = tok->encode("Hello world");
  StreamingDetokenizer s(tok);
  std::string first;
  for (int32_t id : ids) first += s.push(id);
  first += s.flush();
  s.reset();
  std::string second;
  for (int32_t id : ids) second += s.push(id);
  second += s.flush();
  EXPECT_EQ(first, "Hello world");
  EXPECT_EQ(second, first);  // the dummy-prefix space is stripped again after reset
}

TEST(Streaming, MetaspaceFirstTokenRule) {
  // tok512-metaspace decodes with HF's Metaspace decoder: the first token loses its "▁".
  auto tok = Tokenizer::load(hf_testdata() + "/tok512-metaspace");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  for (const std::string& text : hf_corpus()) {
    const auto ids = (*tok)->encode(text, {.add_special = false});
    EXPECT_EQ(stream_all(*tok, ids, false), (*tok)->decode(ids)) << show(text);
    // Starting mid-stream (a different first token) changes nothing but the first token.
    if (ids.size() > 1) {
      const std::vector<int32_t> tail(ids.begin() + 1, ids.end());
      EXPECT_EQ(stream_all(*tok, tail, false), (*tok)->decode(tail)) << show(text);
    }
  }
}

}  // namespace
}  // namespace pagoda::test
