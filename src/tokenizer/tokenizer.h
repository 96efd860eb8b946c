// Tokenizer: text <-> token ids for every supported model family.
//
// Kinds:
//   kSentencePiece  SentencePiece-style BPE: "▁" for spaces, <0xNN> byte fallback. Score-based
//                   merges for GGUF "llama" vocabularies and SentencePiece .model files (Llama 1/2,
//                   TinyLlama, Mistral, Phi-3, stories260K); rank-based merges for HF tokenizer.json
//                   files of the same family.
//   kByteLevelBpe   Byte-level BPE with merge ranks and a pre-tokenizer regex (GPT-2, Llama 3,
//                   Qwen2/2.5/3, SmolLM, StarCoder, Refact, DeepSeek, Falcon, GPT-NeoX ...).
//
// Sources: GGUF metadata (tokenizer.ggml.*; vocab-only files too), a Hugging Face directory
// (tokenizer.json, or vocab.json + merges.txt, each with an optional tokenizer_config.json), or a
// SentencePiece .model file. load() picks by looking at the path.
//
// Encoding: the raw text is first split on added tokens (special tokens only with parse_special);
// each plain-text segment is normalized, pre-tokenized and run through the model; BOS/EOS are added
// per the model's settings when add_special is set. Any byte string is accepted, malformed UTF-8
// included: byte-level BPE encodes it losslessly through byte tokens, SentencePiece-style through
// <0xNN> pieces (SentencePiece .model files, like SentencePiece, replace each malformed byte with
// U+FFFD first).
//
// Decoding: each token contributes bytes (byte-level: the inverse byte map; SentencePiece: "▁" ->
// ' ', <0xNN> -> the byte; added and special tokens: their literal text); the leading space that
// the encoder's dummy prefix added is removed as HF's decoders do (Strip after Fuse, or Metaspace's
// first-token rule); the bytes are then made valid UTF-8, each maximal malformed subsequence
// becoming U+FFFD (as String::from_utf8_lossy). With these rules decode(encode(text)) == text
// for any valid UTF-8 text on byte-level BPE vocabularies (unless their ByteLevel pre-tokenizer
// adds a prefix space), and on SentencePiece-style vocabularies with byte fallback and no
// normalization beyond the space handling (Llama 1/2, Mistral, Phi-3, TinyLlama), except that a
// literal "▁" in the text decodes as a space; not on stories260K's tok512.model, which removes
// extra spaces. Details and the differences from HF / llama.cpp: docs/tokenizer.md.
//
// Thread safety: a Tokenizer is immutable after load; every method may be called from any number
// of threads at once (per-call state only). Share it as std::shared_ptr<const Tokenizer>.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace pagoda {

class GgufFile;
struct TokenizerData;

enum class TokenizerKind { kSentencePiece, kByteLevelBpe };

struct EncodeOptions {
  bool add_special = true;     // add BOS / EOS as the model's settings say
  bool parse_special = false;  // recognize special (control) tokens written in the text
};

class Tokenizer {
 public:
  // Builds the tokenizer from a GGUF file's tokenizer.ggml.* metadata.
  static Result<std::shared_ptr<const Tokenizer>> from_gguf(const GgufFile& gguf);
  // A Hugging Face directory: tokenizer.json, else vocab.json + merges.txt; tokenizer_config.json
  // (optional) supplies BOS/EOS and add_bos_token / add_eos_token.
  static Result<std::shared_ptr<const Tokenizer>> from_hf_dir(const std::string& dir);
  // The contents of a tokenizer.json (and optionally tokenizer_config.json) file.
  static Result<std::shared_ptr<const Tokenizer>> from_hf_json(std::string_view tokenizer_json,
                                                               std::string_view tokenizer_config_json = {});
  // A SentencePiece model file (ModelProto), BPE models only.
  static Result<std::shared_ptr<const Tokenizer>> from_sentencepiece_model(const std::string& path);
  static Result<std::shared_ptr<const Tokenizer>> from_sentencepiece_bytes(std::span<const uint8_t> bytes);
  // A .gguf file, a Hugging Face directory (or its tokenizer.json), or a SentencePiece .model file.
  static Result<std::shared_ptr<const Tokenizer>> load(const std::string& model_path);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Appends to *out instead of returning a new vector.
  void encode_append(std::string_view text, const EncodeOptions& options, std::vector<int32_t>* out) const;

  // The text of `ids` (valid UTF-8). Ids outside [0, vocab_size) are skipped; with skip_special,
  // special tokens (control / unknown types) are skipped too.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The vocabulary entry as stored (byte-level text like "Ġthe", "▁the", "<0x0A>"); empty for an
  // out-of-range id.
  std::string_view token_text(int32_t id) const;
  // The bytes the token contributes to decoded text when it is not the first token (may be
  // partial UTF-8); empty for an out-of-range id.
  std::string token_bytes(int32_t id) const;
  std::optional<int32_t> token_id(std::string_view token_text) const;

  int32_t bos_id() const;  // -1 if none
  int32_t eos_id() const;  // -1 if none
  int32_t eot_id() const;  // end of turn (<|eot_id|>, <|im_end|> ...), -1 if none
  int32_t eom_id() const;  // end of message (<|eom_id|>), -1 if none
  int32_t unk_id() const;  // -1 if none
  int32_t pad_id() const;  // -1 if none
  // Fill-in-the-middle markers as the model file names them (GGUF fim_pre / fim_suf / fim_mid
  // token ids, or llama.cpp's older prefix / suffix / middle keys); -1 where not named.
  int32_t fim_prefix_id() const;
  int32_t fim_suffix_id() const;
  int32_t fim_middle_id() const;
  // Tokens that end generation: EOS, EOT, EOM and other end-of-generation control tokens of the
  // vocabulary, sorted, without duplicates.
  std::vector<int32_t> stop_ids() const;
  bool add_bos() const;
  bool add_eos() const;

  int64_t vocab_size() const;
  TokenizerKind kind() const;
  // "sentencepiece-bpe" or "byte-level-bpe".
  std::string kind_name() const;
  // A one-line description of the pipeline (normalizer, pre-tokenizer, model), for logs.
  std::string describe() const;
  // Control and unknown-type tokens (what skip_special drops).
  bool is_special(int32_t id) const;

 private:
  friend class StreamingDetokenizer;
  explicit Tokenizer(std::unique_ptr<TokenizerData> data);
  friend Result<std::shared_ptr<const Tokenizer>> make_tokenizer(std::unique_ptr<TokenizerData> data);

  // Appends the bytes token `id` contributes; `first`: it is the first token the decoder sees.
  void append_token_bytes(int32_t id, bool first, std::string* out) const;
  // How many leading ' ' of the decoded output the decoder strips (HF Strip after Fuse).
  int strip_leading_spaces() const;

  std::unique_ptr<TokenizerData> d_;
};

// Builds the Tokenizer from loader output (validates ids, derives lookup tables). Internal.
Result<std::shared_ptr<const Tokenizer>> make_tokenizer(std::unique_ptr<TokenizerData> data);

}  // namespace pagoda
