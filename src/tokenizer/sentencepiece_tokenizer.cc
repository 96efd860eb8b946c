// Tokenizer::from_sentencepiece_model: a SentencePiece .model file, encoded as the SentencePiece
// library does (SentencePieceProcessor::Encode): its normalizer (dummy prefix, extra-space removal,
// "▁" escaping, U+FFFD for malformed bytes), BPE by piece score, user-defined pieces kept whole,
// byte fallback. Only BPE models with an identity normalization rule are supported (Llama 2,
// TinyLlama, Mistral, stories260K); Unigram models and precompiled character maps are refused.
//
// add_special adds BOS (the trainer's bos_id) as Llama-family runtimes do; SentencePiece itself
// adds nothing unless asked (add_bos=True).
#include <fstream>
#include <iterator>

#include "tokenizer/sentencepiece_proto.h"
#include "tokenizer/tokenizer_data.h"

namespace pagoda {

Result<std::shared_ptr<const Tokenizer>> Tokenizer::from_sentencepiece_bytes(std::span<const uint8_t> bytes) {
  PAGODA_ASSIGN_OR_RETURN(SentencePieceModelProto m, parse_sentencepiece_model(bytes));
  if (m.model_type != 2)
    return unimplemented("SentencePiece model type {} is not supported (only BPE = 2)", m.model_type);
  if (m.treat_whitespace_as_suffix) return unimplemented("SentencePiece treat_whitespace_as_suffix is not supported");
  if (!m.precompiled_charsmap.empty())
    return unimplemented("SentencePiece normalization rule '{}' (a precompiled character map) is not supported",
                         m.normalizer_name);

  auto d = std::make_unique<TokenizerData>();
  d->source = "sentencepiece";
  d->kind = TokenizerKind::kSentencePiece;
  const size_t n = m.pieces.size();
  std::vector<float> scores(n);
  d->token_text.resize(n);
  d->token_type.resize(n);
  for (size_t i = 0; i < n; ++i) {
    d->token_text[i] = std::move(m.pieces[i].piece);
    d->token_type[i] = static_cast<TokenType>(m.pieces[i].type);
    scores[i] = m.pieces[i].score;
  }
  d->unk_id = m.unk_id;
  d->bos_id = m.bos_id;
  d->eos_id = m.eos_id;
  d->pad_id = m.pad_id;
  d->add_bos = true;
  d->add_eos = false;
  for (size_t i = 0; i < n; ++i) {
    const TokenType t = d->token_type[i];
    if (t == TokenType::kControl || t == TokenType::kUnknown)
      d->added.add(AddedToken{d->token_text[i], static_cast<int32_t>(i), true, false, false});
  }
  SpmNormalizerOptions no;
  no.add_dummy_prefix = m.add_dummy_prefix;
  no.remove_extra_whitespaces = m.remove_extra_whitespaces;
  no.escape_whitespaces = m.escape_whitespaces;
  no.replace_malformed = true;
  d->normalizer = make_spm_normalizer(no);
  SpmOptions so;
  so.byte_fallback = m.byte_fallback;
  so.unk_id = m.unk_id >= 0 && static_cast<size_t>(m.unk_id) < n ? m.unk_id : -1;
  so.inline_user_defined = true;
  d->spm = std::make_unique<SpmModel>(d->token_text, scores, d->token_type, so);
  if (m.escape_whitespaces) d->decoder.per_token.push_back({DecodeStep::Kind::kReplace, std::string(kSpmSpace), " "});
  if (m.byte_fallback) d->decoder.per_token.push_back({DecodeStep::Kind::kByteFallback, "", ""});
  d->decoder.strip_leading_spaces = m.add_dummy_prefix ? 1 : 0;
  return make_tokenizer(std::move(d));
}

Result<std::shared_ptr<const Tokenizer>> Tokenizer::from_sentencepiece_model(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return io_error("cannot open SentencePiece model {}", path);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto r = from_sentencepiece_bytes(bytes);
  if (!r.ok()) return Status(r.status().code(), path + ": " + r.status().message());
  return r;
}

}  // namespace pagoda
