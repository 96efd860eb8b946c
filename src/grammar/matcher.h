// Token-level constrained decoding: a grammar bound to a vocabulary (CompiledGrammar, shared by
// every request that uses the same constraint) and the per-request position in it
// (GrammarMatcher).
//
// Masks: the allowed tokens of a state are found by walking the vocabulary trie with the state
// (the states reached are interned and their byte transitions memoized within one walk),
// pruning every subtree whose first byte no stack can take; stop ids are allowed exactly in
// accepting states. Masks are cached per CompiledGrammar keyed by the (canonical) state: the
// state fully determines the allowed set, so a hit is exact, and grammars revisit few distinct
// states (inside a JSON string, after each digit of a number ...), so steady-state decoding costs
// a hash lookup and a copy per step.
//
// Thread-safety: CompiledGrammar is safe to share (its cache is guarded by a mutex); a
// GrammarMatcher belongs to one request and is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/pda.h"
#include "grammar/token_vocabulary.h"

namespace pagoda::grammar {

class CompiledGrammar {
 public:
  CompiledGrammar(Grammar g, std::shared_ptr<const TokenVocabulary> vocab);
  const Grammar& grammar() const { return grammar_; }
  const Pda& pda() const { return pda_; }
  const TokenVocabulary& vocab() const { return *vocab_; }
  const StackSet& initial() const { return initial_; }

  // The packed allowed-token mask of `state` (vocab().mask_words() words).
  void fill_mask(const StackSet& state, std::span<uint32_t> mask) const;
  // The same without the cache (the reference for tests and benchmarks of the walk).
  void compute_mask(const StackSet& state, std::span<uint32_t> mask) const;

  struct CacheStats {
    int64_t hits = 0, misses = 0, entries = 0;
  };
  CacheStats cache_stats() const;

 private:
  struct KeyHash {
    size_t operator()(const std::vector<uint32_t>& k) const;
  };

  Grammar grammar_;
  Pda pda_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  StackSet initial_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::vector<uint32_t>, std::vector<uint32_t>, KeyHash> cache_;
  mutable CacheStats stats_;
};

// Masks cached per grammar at most this many states (then computed each time).
constexpr size_t kMaxCachedMasks = 2048;

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Whether accept_token(id) would succeed.
  bool accepts_token(int32_t id) const;
  // Advances by one token; false (state unchanged) if the grammar forbids it. A stop id is
  // accepted only in an accepting state and terminates the matcher.
  bool accept_token(int32_t id);
  // Advances by raw bytes (tests, forced prefixes); false (state unchanged) if rejected.
  bool accept_bytes(std::string_view bytes);
  // Undoes the last `n` accepted tokens (speculative decoding); n <= num_accepted().
  void rollback(int n);
  int num_accepted() const { return static_cast<int>(history_.size()) - 1; }

  // The root rule can end here (a stop token is allowed).
  bool is_accepting() const;
  // Nothing can follow: a stop token was accepted, or the state accepts and takes no more bytes.
  bool is_terminated() const;
  // Packed mask of the tokens accept_token() would take (never all-zero: a dead end allows the
  // stop ids so that generation ends).
  void fill_mask(std::span<uint32_t> mask) const;
  const CompiledGrammar& grammar() const { return *grammar_; }
  const StackSet& state() const { return history_.back().state; }

 private:
  struct Step {
    StackSet state;
    bool stopped = false;
  };
  std::shared_ptr<const CompiledGrammar> grammar_;
  std::vector<Step> history_;  // history_.back() is the current state
};

}  // namespace pagoda::grammar
