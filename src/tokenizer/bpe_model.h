// BpeModel: rank-based BPE (GPT-2 / Hugging Face `BPE` model).
//
// A piece becomes initial symbols (one per byte for byte-level BPE; one per UTF-8 character
// otherwise, with <0xNN> byte fallback or <unk> for characters outside the vocabulary), then the
// adjacent pair with the lowest merge rank is merged repeatedly, leftmost first on ties, until no
// pair has a merge. Same order as HF's Word::merge_all and llama.cpp.
//
// Two merge loops, same result: a quadratic scan with cached pair ranks for short pieces (the
// vast majority: words), and a binary heap over a linked list for long ones (O(n log n)).
//
// Thread safety: immutable after build(); encode() is const and keeps its state in a per-call
// BpeScratch, so any number of threads may encode at once.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "tokenizer/pair_map.h"
#include "tokenizer/vocab.h"

namespace pagoda {

struct BpeOptions {
  bool byte_level = true;      // initial symbols are bytes; else UTF-8 characters
  bool byte_fallback = false;  // (character level) unknown characters become <0xNN> tokens
  bool ignore_merges = false;  // a piece that is itself in the vocabulary is emitted whole
  bool fuse_unk = false;       // consecutive unknown characters give one unk token
  int32_t unk_id = -1;         // -1: unknown characters are dropped (HF without unk_token)
};

struct BpeMerge {
  int32_t left;
  int32_t right;
  int32_t merged;
};

struct BpeScratch {
  std::vector<int32_t> ids;
  std::vector<PairMap::Value> pairs;
  struct Sym {
    int32_t id, prev, next;
  };
  std::vector<Sym> syms;
  struct Cand {
    int32_t rank, left, left_id, right_id, merged;
  };
  std::vector<Cand> heap;
};

class BpeModel {
 public:
  // model_vocab: the model-space string of each token id that the model may produce or look up
  // (raw bytes for byte-level BPE, the vocabulary text otherwise); merges in rank order.
  BpeModel(StringIdMap model_vocab, const std::vector<BpeMerge>& merges, const BpeOptions& options);

  // Appends the ids of `piece` to *out.
  void encode(std::string_view piece, std::vector<int32_t>* out, BpeScratch* scratch) const;

  const BpeOptions& options() const { return options_; }
  size_t num_merges() const { return pairs_.size(); }

 private:
  void initial_symbols(std::string_view piece, std::vector<int32_t>* ids) const;
  void merge_short(BpeScratch* s) const;
  void merge_long(BpeScratch* s) const;

  StringIdMap vocab_;
  PairMap pairs_;
  BpeOptions options_;
  std::array<int32_t, 256> byte_token_;     // byte-level: the token of each single byte
  std::array<int32_t, 256> byte_fallback_;  // character level: the <0xNN> tokens
};

}  // namespace pagoda
