// Fuzz target: the SentencePiece model reader (protobuf wire format) and the tokenizer built from
// whatever it accepts. Arbitrary bytes must give either a Status or a working tokenizer: encoding
// and decoding a fixed text then stay in bounds, ids stay inside the vocabulary and decoded text is
// valid UTF-8. Findings are crashes, sanitizer reports and violated invariants (abort).
// Good seeds: ../shared/tokenizers/llama2/tokenizer.model, ../shared/models/stories260K/tok512.model.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "tokenizer/sentencepiece_proto.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  auto proto = pagoda::parse_sentencepiece_model(bytes);
  if (proto.ok() && proto->pieces.empty()) std::abort();  // the reader promises at least one piece
  auto tok = pagoda::Tokenizer::from_sentencepiece_bytes(bytes);
  if (!tok.ok()) return 0;
  const pagoda::Tokenizer& t = **tok;
  static const char* const kTexts[] = {"Once upon a time, there was a llama \xF0\x9F\xA6\x99.",
                                       "  spaces  and\ttabs\n", "<s>special</s> <unk>", "\xFF\xC3(malformed",
                                       ""};
  for (const char* text : kTexts) {
    for (bool parse_special : {false, true}) {
      const auto ids = t.encode(text, {.add_special = true, .parse_special = parse_special});
      for (int32_t id : ids)
        if (id < 0 || id >= t.vocab_size()) std::abort();
      const std::string decoded = t.decode(ids);
      if (!pagoda::unicode::is_valid_utf8(decoded)) std::abort();
      pagoda::StreamingDetokenizer stream(*tok, false);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.push(id);
      streamed += stream.flush();
      if (streamed != decoded) std::abort();
    }
  }
  return 0;
}
