// TokenizerData: everything a loader (GGUF, Hugging Face, SentencePiece) produces, handed to
// make_tokenizer(), which validates it, derives the lookup tables and wraps it in a Tokenizer.
// Internal to src/tokenizer/.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/spm_model.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace pagoda {

// One per-token step of a decoder (HF decoders before Fuse, applied to every token's text).
struct DecodeStep {
  enum class Kind {
    kReplace,       // `from` -> `to` (HF Replace with a String pattern)
    kByteFallback,  // <0xNN> (BYTE-type tokens) -> the byte
    kByteLevel,     // byte-level characters -> bytes (not for added / special tokens: their text is literal)
    kMetaspace,     // `from` (the replacement, "▁") -> ' '
    kStrip,         // drop up to `start` leading / `stop` trailing `from` characters of each token
  };
  Kind kind;
  std::string from, to;
  int start = 0, stop = 0;
};

struct DecoderSpec {
  std::vector<DecodeStep> per_token;
  int strip_leading_spaces = 0;        // HF Strip(' ', n, 0) after Fuse
  bool metaspace_first_token = false;  // HF Metaspace decoder: the first token loses every "▁"
  std::string metaspace_replacement = std::string(kSpmSpace);
};

struct TokenizerData {
  TokenizerKind kind = TokenizerKind::kByteLevelBpe;
  std::string source;  // "gguf", "hf", "sentencepiece": for describe()

  // Vocabulary, indexed by id.
  std::vector<std::string> token_text;
  std::vector<TokenType> token_type;

  // Encoding pipeline.
  AddedTokenMatcher added;
  std::unique_ptr<Normalizer> normalizer;  // may be null
  PreTokenizer pre_tokenizer;              // may be empty
  std::unique_ptr<BpeModel> bpe;           // exactly one of bpe / spm
  std::unique_ptr<SpmModel> spm;

  DecoderSpec decoder;

  int32_t bos_id = -1, eos_id = -1, eot_id = -1, eom_id = -1, unk_id = -1, pad_id = -1;
  // Fill-in-the-middle markers the file names (GGUF tokenizer.ggml.fim_{pre,suf,mid}_token_id);
  // -1: not named.
  int32_t fim_prefix_id = -1, fim_suffix_id = -1, fim_middle_id = -1;
  bool add_bos = false, add_eos = false;

  // Filled by make_tokenizer() (text_to_id by the loader if it already built one).
  StringIdMap text_to_id;
  std::vector<std::string> token_bytes;        // per-token decoder output
  std::vector<std::string> token_bytes_first;  // same for the first token (metaspace rule only)
  std::vector<int32_t> stop_ids;
};

}  // namespace pagoda
