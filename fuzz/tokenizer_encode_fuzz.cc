// Fuzz target: Tokenizer::encode / decode / StreamingDetokenizer on arbitrary bytes (malformed
// UTF-8 included) with real vocabularies: GPT-2 (byte-level BPE) and Llama's SentencePiece BPE from
// ../shared/tokenizers/vocab-vectors, and stories260K's 512-piece GGUF.
//
// Input: byte 0 picks the vocabulary (bits 0-1) and the options (bit 2 parse_special, bit 3
// add_special); the rest is the text. Invariants checked (abort on violation):
//   * ids are inside the vocabulary;
//   * decode() returns valid UTF-8, and the streaming detokenizer returns exactly the same text;
//   * lossless vocabularies give the input back: decode(encode(x)) == x made valid UTF-8
//     (GPT-2 always; Llama when the text holds no literal U+2581, which SentencePiece reads as a
//     space, and no special-token text when parse_special is on).
// The vocabularies are loaded once and only read afterwards (no state between inputs). They are
// found in PAGODA_SHARED_DIR, else in ../shared next to the repository.
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

std::string shared_dir() {
  if (const char* env = std::getenv("PAGODA_SHARED_DIR"); env && *env) return env;
  std::string here = __FILE__;  // .../<repo>/fuzz/tokenizer_encode_fuzz.cc
  for (int up = 0; up < 2; ++up) here = here.substr(0, here.find_last_of('/'));
  return here + "/../shared";
}

struct Vocabs {
  std::shared_ptr<const pagoda::Tokenizer> tok[3];
  Vocabs() {
    const std::string dir = shared_dir();
    const std::string paths[3] = {dir + "/tokenizers/vocab-vectors/ggml-vocab-gpt-2.gguf",
                                  dir + "/tokenizers/vocab-vectors/ggml-vocab-llama-spm.gguf",
                                  dir + "/models/stories260K/stories260K.gguf"};
    for (int i = 0; i < 3; ++i) {
      auto r = pagoda::Tokenizer::load(paths[i]);
      if (!r.ok()) {
        std::fprintf(stderr, "tokenizer_encode_fuzz: %s\n", r.status().to_string().c_str());
        std::abort();
      }
      tok[i] = *r;
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Vocabs vocabs;
  if (size == 0) return 0;
  const uint8_t sel = data[0];
  const int which = (sel & 3) == 3 ? 0 : sel & 3;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const pagoda::Tokenizer& t = *vocabs.tok[which];
  const pagoda::EncodeOptions opts{.add_special = (sel & 8) != 0, .parse_special = (sel & 4) != 0};

  const std::vector<int32_t> ids = t.encode(text, opts);
  for (int32_t id : ids)
    if (id < 0 || id >= t.vocab_size()) std::abort();
  const std::string decoded = t.decode(ids, /*skip_special=*/true);
  if (!pagoda::unicode::is_valid_utf8(decoded)) std::abort();

  pagoda::StreamingDetokenizer stream(vocabs.tok[which], /*skip_special=*/true);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string delta = stream.push(id);
    if (!pagoda::unicode::is_valid_utf8(delta)) std::abort();
    streamed += delta;
  }
  streamed += stream.flush();
  if (streamed != decoded) std::abort();

  const bool gpt2 = which == 0;
  const bool llama = which == 1 && text.find("\xE2\x96\x81") == std::string_view::npos;
  if ((gpt2 || llama) && !opts.parse_special && decoded != pagoda::unicode::to_valid_utf8(text)) std::abort();
  return 0;
}
