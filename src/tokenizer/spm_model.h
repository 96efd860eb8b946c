// SpmModel: SentencePiece's BPE with piece scores (Llama 1/2, Mistral, Phi-3, TinyLlama ...).
//
// The normalized text ("▁" for spaces) is split into UTF-8 characters (each byte of malformed
// UTF-8 alone); then, repeatedly, the adjacent pair whose concatenation is a vocabulary piece with
// the highest score is merged (leftmost on ties). Merge targets are NORMAL, USER_DEFINED and UNUSED
// pieces; UNUSED pieces are split back into the pieces they were made of at the end. A final
// symbol that is not a piece becomes its <0xNN> byte pieces (byte fallback) or <unk>. This is
// SentencePiece's bpe::Model::Encode order; a binary heap over a linked list keeps it O(n log n).
//
// With `inline_user_defined` (SentencePiece .model files), user-defined pieces are recognized in
// the normalized text (longest match) and never merged, as SentencePiece does. GGUF and HF
// vocabularies split them out of the raw text beforehand instead (added tokens).
//
// Chunking: when no piece holds "▁" right after another character (true of vocabularies trained
// with split_by_whitespace, e.g. Llama 2, Phi-3, Baichuan, TinyStories; checked at load), no merge
// can cross the start of a run of "▁" that follows another character, and the merges inside each
// chunk happen in the same relative order as on the whole text; so the text is cut there and
// each chunk (roughly a word with its leading spaces) is encoded alone. This keeps the heap small
// and lets a per-call cache reuse the ids of repeated chunks. Vocabularies without the property
// are encoded in one piece.
//
// Thread safety: immutable; encode() keeps its state in a per-call SpmScratch.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace pagoda {

struct SpmOptions {
  bool byte_fallback = true;
  int32_t unk_id = 0;
  bool inline_user_defined = false;
};

struct SpmScratch {
  struct Sym {
    uint32_t begin, len;
    int32_t prev, next;
    bool frozen;
  };
  std::vector<Sym> syms;
  struct Cand {
    float score;
    int32_t left, right;
    uint32_t size;
  };
  std::vector<Cand> heap;
  // Per-call chunk cache (Tokenizer turns it on for long texts): chunk -> ids in cache_ids.
  bool use_cache = false;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>> cache;
  std::vector<int32_t> cache_ids;
};

class SpmModel {
 public:
  SpmModel(const std::vector<std::string>& pieces, const std::vector<float>& scores, const std::vector<TokenType>& types,
           const SpmOptions& options);

  // Appends the ids of the normalized text to *out.
  void encode(std::string_view normalized, std::vector<int32_t>* out, SpmScratch* scratch) const;

 private:
  void encode_chunk(std::string_view text, std::vector<int32_t>* out, SpmScratch* scratch) const;
  int32_t piece_to_id(std::string_view piece) const;
  void emit(std::string_view piece, std::vector<int32_t>* out) const;
  size_t match_user_defined(std::string_view text) const;

  StringIdMap pieces_;    // merge targets: NORMAL, USER_DEFINED, UNUSED (and UNDEFINED)
  StringIdMap reserved_;  // CONTROL, UNKNOWN, BYTE: found by lookups, never merge targets
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  SpmOptions options_;
  std::array<int32_t, 256> byte_piece_;
  std::array<std::vector<std::string>, 256> user_defined_;  // by first byte, longest first
  bool has_unused_ = false;
  bool chunk_at_spaces_ = false;  // see "Chunking" above
};

}  // namespace pagoda
