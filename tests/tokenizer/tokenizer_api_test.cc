// Tokenizer API behaviour that the reference vectors do not cover: special-token parsing,
// BOS/EOS, lookups, errors on bad files, arbitrary bytes (malformed UTF-8) and concurrent use.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "loader/gguf.h"
#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"

namespace pagoda::test {
namespace {

std::string temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("pagoda_tok_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

TEST(TokenizerApi, SpecialTokensAreParsedOnlyWhenAsked) {
  auto tok = load_vocab("gpt-2");
  ASSERT_TRUE(tok);
  const int32_t eot = *tok->token_id("<|endoftext|>");
  EXPECT_TRUE(tok->is_special(eot));
  const std::string text = "a<|endoftext|>b";
  const auto plain = tok->encode(text, {.add_special = false});
  const auto parsed = tok->encode(text, {.add_special = false, .parse_special = true});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0);
  EXPECT_EQ(std::count(parsed.begin(), parsed.end(), eot), 1);
  // The text around a special token is encoded as if the token were not there.
  std::vector<int32_t> pieces = tok->encode("a", {.add_special = false});
  pieces.push_back(eot);
  for (int32_t id : tok->encode("b", {.add_special = false})) pieces.push_back(id);
  EXPECT_EQ(parsed, pieces);
  EXPECT_EQ(tok->decode(parsed), text);
  EXPECT_EQ(tok->decode(parsed, /*skip_special=*/true), "ab");
}

TEST(TokenizerApi, UserDefinedTokensAreAlwaysMatched) {
  // deepseek-coder's user-defined character tokens are matched in plain text, as in HF.
  auto tok = load_vocab("deepseek-coder");
  ASSERT_TRUE(tok);
  const auto id = tok->token_id("\xC3\xBC");  // ü
  ASSERT_TRUE(id.has_value());
  EXPECT_FALSE(tok->is_special(*id));
  const auto ids = tok->encode("F\xC3\xBChrer", {.add_special = false});
  EXPECT_NE(std::find(ids.begin(), ids.end(), *id), ids.end());
}

TEST(TokenizerApi, BosEosAndStopIds) {
  auto spm = load_vocab("llama-spm");
  ASSERT_TRUE(spm);
  EXPECT_TRUE(spm->add_bos());
  EXPECT_FALSE(spm->add_eos());
  EXPECT_EQ(spm->bos_id(), *spm->token_id("<s>"));
  EXPECT_EQ(spm->eos_id(), *spm->token_id("</s>"));
  EXPECT_EQ(spm->encode("").size(), 1u);  // just BOS
  EXPECT_TRUE(spm->encode("", {.add_special = false}).empty());
  auto gpt2 = load_vocab("gpt-2");
  ASSERT_TRUE(gpt2);
  EXPECT_FALSE(gpt2->add_bos());
  EXPECT_EQ(gpt2->encode("hi"), gpt2->encode("hi", {.add_special = false}));
  auto phi3 = load_vocab("phi-3");
  ASSERT_TRUE(phi3);
  const auto stops = phi3->stop_ids();
  for (const char* t : {"<|endoftext|>", "<|end|>"})
    EXPECT_NE(std::find(stops.begin(), stops.end(), *phi3->token_id(t)), stops.end()) << t;
  EXPECT_EQ(phi3->eot_id(), *phi3->token_id("<|end|>"));
}

TEST(TokenizerApi, Phi3ChatTokensAbsorbFollowingWhitespace) {
  // Phi-3's chat tokens carry rstrip in its tokenizer.json: "<|user|>\nHi" == "<|user|>Hi".
  auto tok = load_vocab("phi-3");
  ASSERT_TRUE(tok);
  const EncodeOptions o{.add_special = false, .parse_special = true};
  EXPECT_EQ(tok->encode("<|user|>\nHi<|end|>\n", o), tok->encode("<|user|>Hi<|end|>", o));
  EXPECT_NE(tok->encode("<s>\nHi", o), tok->encode("<s>Hi", o));  // <s> does not strip
}

TEST(TokenizerApi, Lookups) {
  auto tok = load_vocab("llama-spm");
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->vocab_size(), 32000);
  EXPECT_EQ(tok->kind_name(), "sentencepiece-bpe");
  EXPECT_EQ(tok->token_text(-1), "");
  EXPECT_EQ(tok->token_text(32000), "");
  EXPECT_EQ(tok->token_bytes(*tok->token_id("<0x0A>")), "\n");
  EXPECT_EQ(tok->token_bytes(*tok->token_id("\xE2\x96\x81the")), " the");
  EXPECT_FALSE(tok->token_id("definitely not a token").has_value());
  EXPECT_EQ(tok->decode(std::vector<int32_t>{-5, 100000}), "");  // out-of-range ids are skipped
  EXPECT_NE(tok->describe().find("sentencepiece-bpe"), std::string::npos);
}

TEST(TokenizerApi, BadFilesAreErrors) {
  const std::string dir = temp_dir("bad");
  EXPECT_EQ(Tokenizer::load(dir + "/missing.gguf").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Tokenizer::load(dir).status().code(), StatusCode::kNotFound);  // empty directory
  write_file(dir + "/junk.gguf", std::string("GGUF\x03\x00\x00\x00garbage", 15));
  EXPECT_FALSE(Tokenizer::load(dir + "/junk.gguf").ok());
  write_file(dir + "/junk.model", "this is not a protobuf message at all");
  EXPECT_FALSE(Tokenizer::load(dir + "/junk.model").ok());
  // A GGUF without a tokenizer: the stories model's weights exist, so use a vocab-less header.
  const std::string hf = temp_dir("hf");
  write_file(hf + "/tokenizer.json", "{ not json");
  auto r = Tokenizer::load(hf);
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  write_file(hf + "/tokenizer.json", R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})");
  EXPECT_EQ(Tokenizer::load(hf).status().code(), StatusCode::kUnimplemented);
  write_file(hf + "/tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": "zero"}, "merges": []}})");
  EXPECT_EQ(Tokenizer::load(hf).status().code(), StatusCode::kDataLoss);
  write_file(hf + "/tokenizer.json",
             R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
                 "pre_tokenizer": {"type": "UnicodeScripts"}})");
  EXPECT_EQ(Tokenizer::load(hf).status().code(), StatusCode::kUnimplemented);
  write_file(hf + "/tokenizer.json",
             R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]},
                 "decoder": {"type": "ByteLevel"}})");
  auto ok = Tokenizer::load(hf);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ((*ok)->encode("ab"), std::vector<int32_t>{2});
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(hf);
}

TEST(TokenizerApi, GgufWithoutTokenizerIsAnError) {
  // A minimal GGUF v3 with no tensors and no metadata.
  std::string bytes("GGUF", 4);
  const uint32_t version = 3;
  const uint64_t zero = 0;
  bytes.append(reinterpret_cast<const char*>(&version), 4);
  bytes.append(reinterpret_cast<const char*>(&zero), 8);
  bytes.append(reinterpret_cast<const char*>(&zero), 8);
  auto owner = std::make_shared<std::string>(bytes);
  auto g = GgufFile::parse({reinterpret_cast<const uint8_t*>(owner->data()), owner->size()}, owner);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto t = Tokenizer::from_gguf(**g);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
}

// Random bytes, malformed UTF-8 included: no crash, ids in range, and, for vocabularies with a
// token for every byte (GPT-2's byte-level alphabet; Llama's <0xNN> pieces), the bytes survive:
// decode(encode(x)) is x made valid (each malformed sequence -> U+FFFD). StarCoder and
// DeepSeek have no tokens for bytes that valid UTF-8 never contains (they become <unk> or are
// dropped, as in HF), so for them only safety is checked.
TEST(TokenizerApi, ArbitraryBytesRoundTrip) {
  std::mt19937 rng(3);
  for (const std::string name : {"gpt-2", "llama-spm", "starcoder", "deepseek-coder"}) {
    const bool lossless = name == "gpt-2" || name == "llama-spm";
    auto tok = load_vocab(name);
    ASSERT_TRUE(tok);
    for (int iter = 0; iter < 400; ++iter) {
      std::string s;
      const size_t n = rng() % 64;
      for (size_t k = 0; k < n; ++k) s.push_back(static_cast<char>(rng() % 3 ? rng() % 256 : "a \n\xC3\xA9"[rng() % 5]));
      const auto ids = tok->encode(s, {.add_special = false, .parse_special = true});
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok->vocab_size());
      const std::string back = tok->decode(ids);
      EXPECT_TRUE(unicode::is_valid_utf8(back));
      if (lossless) {
        EXPECT_EQ(back, unicode::to_valid_utf8(s)) << name << " " << iter;
      }
    }
  }
}

TEST(TokenizerApi, LongInputs) {
  for (const std::string name : {"gpt-2", "llama-spm"}) {
    auto tok = load_vocab(name);
    ASSERT_TRUE(tok);
    std::string text;
    for (int i = 0; i < 2000; ++i) text += "The quick brown fox 🦙 jumps over 13 lazy dogs.\n";
    text += std::string(50000, ' ') + std::string(50000, 'a') + std::string(20000, '\n');
    const auto ids = tok->encode(text, {.add_special = false});
    EXPECT_EQ(tok->decode(ids), text) << name;
  }
}

TEST(TokenizerApi, ConcurrentEncodeDecode) {
  auto tok = load_vocab("gpt-2");
  ASSERT_TRUE(tok);
  std::mt19937 rng(17);
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) {
    std::string s;
    const size_t n = 1 + rng() % 3000;  // some long enough to use the per-call word cache
    for (size_t k = 0; k < n; ++k) s += std::vector<std::string>{"a", "b", "c d", " ", "e", "12", ",", ".", "!", "\n", "\xC3\xA9", "\xF0\x9F\xA6\x99"}[rng() % 12];
    texts.push_back(s);
  }
  std::vector<std::vector<int32_t>> expected;
  for (const auto& t : texts) expected.push_back(tok->encode(t));
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < texts.size(); ++i) {
        const size_t k = (i + static_cast<size_t>(t) * 31) % texts.size();
        const auto ids = tok->encode(texts[k]);
        if (ids != expected[k] || tok->decode(ids) != texts[k]) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace pagoda::test
