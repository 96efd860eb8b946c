// Golden vectors of ../shared/tokenizers/vocab-vectors (ids from the Hugging Face tokenizers
// library): every string of every vocabulary, encoded from several threads at once; round trips
// and the streaming detokenizer on the same strings.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <thread>

#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"

namespace pagoda::test {
namespace {

class VocabVectorsTest : public ::testing::TestWithParam<std::string> {};

TEST(VocabVectorsList, EveryVectorFileIsTested) {
  namespace fs = std::filesystem;
  ASSERT_TRUE(fs::is_directory(vocab_dir())) << vocab_dir();
  size_t found = 0;
  for (const auto& e : fs::directory_iterator(vocab_dir())) {
    const std::string f = e.path().filename().string();
    if (f.size() < 9 || f.substr(f.size() - 9) != ".gguf.inp") continue;
    const std::string name = f.substr(std::string("ggml-vocab-").size(), f.size() - 9 - std::string("ggml-vocab-").size());
    EXPECT_NE(std::find(vector_vocabs().begin(), vector_vocabs().end(), name), vector_vocabs().end())
        << name << " has vectors but is not in vector_vocabs()";
    ++found;
  }
  EXPECT_EQ(found, vector_vocabs().size());
}

TEST_P(VocabVectorsTest, AllStringsFromSeveralThreads) {
  const VocabVectors v = load_vectors(GetParam());
  ASSERT_GE(v.texts.size(), 40u);
  ASSERT_EQ(v.texts.size(), v.ids.size());
  auto tok = load_vocab(GetParam());
  ASSERT_TRUE(tok);
  EncodeOptions no_special;
  no_special.add_special = false;

  constexpr int kThreads = 6;
  constexpr int kRounds = 3;
  std::mutex mu;
  std::vector<std::string> failures;
  std::atomic<int> checked{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        for (size_t k = 0; k < v.texts.size(); ++k) {
          const size_t i = (k * 7 + static_cast<size_t>(t) * 13 + static_cast<size_t>(round)) % v.texts.size();
          const std::vector<int32_t> got = tok->encode(v.texts[i], no_special);
          ++checked;
          if (got != v.ids[i]) {
            std::lock_guard<std::mutex> lock(mu);
            failures.push_back("string " + std::to_string(i) + " " + show(v.texts[i]) + "\n  expected " +
                               ids_to_string(v.ids[i]) + "\n  got      " + ids_to_string(got));
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(checked.load(), kThreads * kRounds * static_cast<int>(v.texts.size()));
  EXPECT_TRUE(failures.empty()) << failures.size() << " mismatches, first:\n" << failures.front();
}

// decode(encode(text)) == text: byte-level BPE is lossless; the SentencePiece vocabularies here
// (Llama, Phi-3) have byte fallback and the decoder removes exactly the dummy prefix the encoder
// added, so they are lossless too; DeepSeek's user-defined character tokens decode to their text.
TEST_P(VocabVectorsTest, RoundTrip) {
  const VocabVectors v = load_vectors(GetParam());
  auto tok = load_vocab(GetParam());
  ASSERT_TRUE(tok);
  for (const std::string& text : v.texts) {
    EXPECT_EQ(tok->decode(tok->encode(text, {.add_special = false})), text) << show(text);
    // With BOS/EOS added, skipping special tokens gives the text back too.
    EXPECT_EQ(tok->decode(tok->encode(text), /*skip_special=*/true), text) << show(text);
  }
}

TEST_P(VocabVectorsTest, DecodesReferenceIds) {
  const VocabVectors v = load_vectors(GetParam());
  auto tok = load_vocab(GetParam());
  ASSERT_TRUE(tok);
  for (size_t i = 0; i < v.texts.size(); ++i) EXPECT_EQ(tok->decode(v.ids[i]), v.texts[i]) << show(v.texts[i]);
}

TEST_P(VocabVectorsTest, StreamingEqualsDecode) {
  const VocabVectors v = load_vectors(GetParam());
  auto tok = load_vocab(GetParam());
  ASSERT_TRUE(tok);
  for (bool skip : {true, false}) {
    for (const std::string& text : v.texts) {
      const std::vector<int32_t> ids = tok->encode(text);  // with BOS where the model adds it
      StreamingDetokenizer stream(tok, skip);
      std::string streamed;
      for (int32_t id : ids) {
        const std::string delta = stream.push(id);
        EXPECT_TRUE(unicode::is_valid_utf8(delta)) << show(text);
        streamed += delta;
      }
      streamed += stream.flush();
      EXPECT_EQ(streamed, tok->decode(ids, skip)) << show(text);
    }
  }
}

TEST_P(VocabVectorsTest, SpecialTokensAndKind) {
  auto tok = load_vocab(GetParam());
  ASSERT_TRUE(tok);
  const bool spm = GetParam() == "llama-spm" || GetParam() == "phi-3";
  EXPECT_EQ(tok->kind(), spm ? TokenizerKind::kSentencePiece : TokenizerKind::kByteLevelBpe);
  EXPECT_GE(tok->eos_id(), 0);
  EXPECT_TRUE(tok->is_special(tok->eos_id()));
  const auto stops = tok->stop_ids();
  EXPECT_NE(std::find(stops.begin(), stops.end(), tok->eos_id()), stops.end());
  if (tok->add_bos()) {
    const auto ids = tok->encode("Hello");
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], tok->bos_id());
  }
  for (int32_t id = 0; id < std::min<int64_t>(tok->vocab_size(), 2000); ++id) {
    const auto back = tok->token_id(tok->token_text(id));
    ASSERT_TRUE(back.has_value()) << id;
    EXPECT_EQ(tok->token_text(*back), tok->token_text(id));
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, VocabVectorsTest, ::testing::ValuesIn(vector_vocabs()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace pagoda::test
