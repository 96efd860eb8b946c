// SentencePiece model files: the protobuf reader on real models (Llama 2's tokenizer.model and
// stories260K's tok512.model) and on corrupt input, and agreement between the .model file and
// the GGUF conversion of the same vocabulary. Exact ids against the sentencepiece library are
// checked by spm_reference_test.py.
#include <gtest/gtest.h>

#include <random>

#include "loader/gguf.h"
#include "tokenizer/sentencepiece_proto.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer_test_util.h"

namespace pagoda::test {
namespace {

std::vector<uint8_t> file_bytes(const std::string& path) {
  const std::string s = read_file_or_empty(path);
  return std::vector<uint8_t>(s.begin(), s.end());
}

std::string llama2_model() { return shared_dir() + "/tokenizers/llama2/tokenizer.model"; }
std::string tok512_model() { return shared_dir() + "/models/stories260K/tok512.model"; }

TEST(SentencePieceProto, ReadsRealModels) {
  for (const std::string& path : {llama2_model(), tok512_model()}) {
    auto m = parse_sentencepiece_model(file_bytes(path));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(m->model_type, 2) << path;  // BPE
    EXPECT_EQ(static_cast<int64_t>(m->pieces.size()), m->vocab_size) << path;
    EXPECT_TRUE(m->byte_fallback) << path;
    EXPECT_EQ(m->unk_id, 0);
    EXPECT_EQ(m->bos_id, 1);
    EXPECT_EQ(m->eos_id, 2);
    EXPECT_EQ(m->pieces[0].type, 2);  // UNKNOWN
    EXPECT_EQ(m->pieces[1].type, 3);  // CONTROL
    EXPECT_EQ(m->pieces[3].piece, "<0x00>");
    EXPECT_EQ(m->pieces[3].type, 6);  // BYTE
    EXPECT_EQ(m->normalizer_name, "identity");
    EXPECT_TRUE(m->add_dummy_prefix);
  }
  // Llama 2 keeps extra whitespace; tok512 (llama2.c's trainer defaults) removes it.
  EXPECT_FALSE(parse_sentencepiece_model(file_bytes(llama2_model()))->remove_extra_whitespaces);
  EXPECT_TRUE(parse_sentencepiece_model(file_bytes(tok512_model()))->remove_extra_whitespaces);
}

TEST(SentencePieceProto, CorruptInputIsAnErrorNotACrash) {
  const std::vector<uint8_t> good = file_bytes(tok512_model());
  ASSERT_GT(good.size(), 1000u);
  // Every truncation: either a shorter valid message (cut between fields) or kDataLoss.
  for (size_t n = 0; n < good.size(); ++n) {
    auto m = parse_sentencepiece_model(std::span<const uint8_t>(good.data(), n));
    if (!m.ok()) {
      EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
      EXPECT_NE(m.status().message().find("SentencePiece model"), std::string::npos);
    }
  }
  // Random byte flips, then the tokenizer built from whatever still parses must encode safely.
  std::mt19937 rng(5);
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> bad = good;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < flips; ++k) bad[rng() % bad.size()] = static_cast<uint8_t>(rng());
    auto tok = Tokenizer::from_sentencepiece_bytes(bad);
    if (tok.ok()) {
      const auto ids = (*tok)->encode("Once upon a time, 🦙 \xFF!");
      for (int32_t id : ids) ASSERT_LT(id, (*tok)->vocab_size());
      (void)(*tok)->decode(ids);
    }
  }
  // Specific damage, each with a message naming what broke.
  struct Case {
    std::vector<uint8_t> bytes;
    const char* what;
  };
  const std::vector<Case> cases = {
      {{}, "no pieces"},
      {{0x0A, 0x05, 0x0A}, "runs past the end"},                                  // pieces: length 5, 1 byte left
      {{0x0A, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, "varint"},  // 11-byte varint
      {{0x08, 0x01}, "wire type"},                                               // pieces as a varint
      {{0x23}, "unsupported wire type"},                                         // field 4 as a group
      {{0x0A, 0x02, 0x15, 0x00}, "truncated fixed32"},                            // score cut short
      {{0x0A, 0x04, 0x0A, 0x00, 0x18, 0x09}, "piece type 9"},
      {{0x0A, 0x02, 0x18, 0x01}, "empty"},                                       // a piece without text
  };
  for (const Case& c : cases) {
    auto m = parse_sentencepiece_model(c.bytes);
    ASSERT_FALSE(m.ok()) << c.what;
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss) << c.what;
    EXPECT_NE(m.status().message().find(c.what), std::string::npos) << m.status().message();
  }
}

TEST(SentencePieceProto, UnsupportedModelsAreRefused) {
  // A Unigram model: one piece, trainer_spec.model_type = 1.
  const std::vector<uint8_t> unigram = {0x0A, 0x03, 0x0A, 0x01, 'a', 0x12, 0x02, 0x18, 0x01};
  auto t = Tokenizer::from_sentencepiece_bytes(unigram);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
  EXPECT_FALSE(Tokenizer::from_sentencepiece_model("/nonexistent/tokenizer.model").ok());
}

TEST(SentencePiece, ReadmeExample) {
  // ../shared/tokenizers/README.md: "Once upon a time" encodes as BOS(1) 9038 2501 263 931.
  auto tok = Tokenizer::load(llama2_model());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->encode("Once upon a time"), (std::vector<int32_t>{1, 9038, 2501, 263, 931}));
  EXPECT_EQ((*tok)->decode((*tok)->encode("Once upon a time"), true), "Once upon a time");
}

TEST(SentencePiece, GgufAndModelFileAgree) {
  // stories260K.gguf was converted from tok512.model: same pieces, scores and types, and the
  // same ids wherever SentencePiece's extra-space removal (in the .model only) plays no part.
  auto proto = parse_sentencepiece_model(file_bytes(tok512_model()));
  ASSERT_TRUE(proto.ok());
  auto gguf = GgufFile::open(stories260k_gguf());
  ASSERT_TRUE(gguf.ok()) << gguf.status().to_string();
  const GgufArray* tokens = (*gguf)->get_array("tokenizer.ggml.tokens");
  const GgufArray* scores = (*gguf)->get_array("tokenizer.ggml.scores");
  const GgufArray* types = (*gguf)->get_array("tokenizer.ggml.token_type");
  ASSERT_TRUE(tokens && scores && types);
  ASSERT_EQ(tokens->strings.size(), proto->pieces.size());
  for (size_t i = 0; i < proto->pieces.size(); ++i) {
    EXPECT_EQ(tokens->strings[i], proto->pieces[i].piece);
    EXPECT_FLOAT_EQ(static_cast<float>(scores->floats[i]), proto->pieces[i].score);
    EXPECT_EQ(types->ints[i], proto->pieces[i].type);
  }
  auto from_model = Tokenizer::load(tok512_model());
  auto from_gguf = Tokenizer::from_gguf(**gguf);
  ASSERT_TRUE(from_model.ok() && from_gguf.ok());
  for (const std::string& text : hf_corpus()) {
    if (text.find("  ") != std::string::npos || (!text.empty() && (text.front() == ' ' || text.back() == ' '))) continue;
    EXPECT_EQ((*from_model)->encode(text), (*from_gguf)->encode(text)) << show(text);
  }
}

}  // namespace
}  // namespace pagoda::test
