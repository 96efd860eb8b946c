// Token-level constrained decoding: a grammar bound to a vocabulary (CompiledGrammar, shared by
// every request that uses the same constraint) and the per-request position in it
// (GrammarMatcher).
//
// Masks: the allowed tokens of a state are found by walking the vocabulary trie (in preorder,
// TokenVocabulary) with the state, one pass that jumps past every subtree no stack can enter.
// Transitions are per byte class (bytes that every byte set of the grammar takes or refuses
// alike); the states a walk reaches are interned with their transitions in tables of the calling
// thread, kept for the next walks of the same grammar (bounded). Stop ids are allowed exactly in
// accepting states. Masks are cached per CompiledGrammar keyed by the (canonical) state: the state
// fully determines the allowed set, so a hit is exact, and grammars revisit few distinct states
// (inside a JSON string, after each digit of a number ...), so steady-state decoding costs a hash
// lookup and a copy per step. The cache holds kMaskCacheBytes of masks and evicts by the clock
// algorithm. A mask not in the cache can also be computed as a MaskWalk, a job in parts that
// several threads run at once (runtime/constraint_masks.h).
//
// Thread-safety: CompiledGrammar is safe to share (its cache is guarded by a mutex; the walk tables
// are per thread); a GrammarMatcher belongs to one request and is used by one thread at a time.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/token_constraint.h"
#include "grammar/grammar.h"
#include "grammar/pda.h"
#include "grammar/token_vocabulary.h"

namespace pagoda::grammar {

// Bytes of cached masks per compiled grammar (bounds the memory: 64 grammars in the engine's
// constraint cache hold at most 64 times this).
constexpr size_t kMaskCacheBytes = size_t{8} << 20;

class MaskWalk;

class CompiledGrammar {
 public:
  // cache_bytes: the masks cached at most, in bytes (then 16 to 4096 masks).
  CompiledGrammar(Grammar g, std::shared_ptr<const TokenVocabulary> vocab, size_t cache_bytes = kMaskCacheBytes);
  const Grammar& grammar() const { return grammar_; }
  const Pda& pda() const { return pda_; }
  const TokenVocabulary& vocab() const { return *vocab_; }
  const StackSet& initial() const { return initial_; }

  // The packed allowed-token mask of `state` (vocab().mask_words() words).
  void fill_mask(const StackSet& state, std::span<uint32_t> mask) const;
  // The cached mask of `state` (true); else false and *walk the computation of it in parts
  // (MaskWalk): the one already under way for this state if any, so that rows in the same state
  // share it. When its parts have run, fill_mask finds the mask cached.
  bool fill_mask_if_ready(const StackSet& state, std::span<uint32_t> mask, std::shared_ptr<MaskJob>* walk) const;
  // The same without the cache: the trie walk (the reference for tests and benchmarks).
  void compute_mask(const StackSet& state, std::span<uint32_t> mask) const;
  // ORs into `mask` the tokens of the trie nodes [begin, end) (TokenVocabulary::nodes) that
  // `state` allows; stop ids not included.
  void walk_nodes(const StackSet& state, uint32_t begin, uint32_t end, std::span<uint32_t> mask) const;

  struct CacheStats {
    int64_t hits = 0, misses = 0, entries = 0, evictions = 0;
  };
  CacheStats cache_stats() const;
  // Masks kept at most (the cache evicts past it, least recently used first, approximately).
  size_t cache_capacity() const { return capacity_; }

 private:
  friend class MaskWalk;
  struct KeyHash {
    size_t operator()(const std::vector<uint32_t>& k) const;
  };
  struct Entry {
    std::vector<uint32_t> mask;
    bool referenced = false;  // used since the clock hand last passed (second chance)
  };
  // The cached mask of `state` into `mask` (mu_ held): false when it is not cached.
  bool lookup_locked(const StackSet& state, std::span<uint32_t> mask) const;
  // Caches a computed mask (mu_ held), evicting by the clock algorithm when full.
  void store_locked(const std::vector<uint32_t>& key, std::span<const uint32_t> mask) const;
  void walk_done(const StackSet& state, std::span<const uint32_t> mask) const;

  Grammar grammar_;
  Pda pda_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  const uint64_t id_;  // unique in the process: keys the walks' per-thread tables
  StackSet initial_;
  // Byte classes (bytes every byte set of the grammar treats alike) and a byte of each.
  std::array<uint8_t, 256> byte_class_{};
  int num_classes_ = 1;
  std::vector<uint8_t> class_byte_;
  size_t capacity_ = 0;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::vector<uint32_t>, Entry, KeyHash> cache_;
  mutable std::vector<const std::vector<uint32_t>*> clock_;  // the cached keys, in a ring
  mutable size_t hand_ = 0;
  mutable std::unordered_map<std::vector<uint32_t>, std::weak_ptr<MaskWalk>, KeyHash> walking_;
  mutable CacheStats stats_;
};

// One mask computed in parts (a MaskJob): a walk that may visit kMinNodesToSplit trie nodes or more
// (by the first bytes the state takes) runs as the TokenVocabulary::part_starts() parts, a smaller
// one as one part. Each part walks its range of the trie into a scratch mask and ORs it into the
// result; the last part to finish caches the result in the grammar. Valid while the grammar lives
// (the requester holds it).
constexpr uint32_t kMinNodesToSplit = 16384;

class MaskWalk final : public MaskJob {
 public:
  MaskWalk(const CompiledGrammar& grammar, StackSet state);
  int32_t parts() const override;
  void run_part(int32_t k) override;

 private:
  const CompiledGrammar& grammar_;
  const StackSet state_;
  int32_t parts_ = 1;
  std::vector<uint32_t> result_;  // written through std::atomic_ref
  std::atomic<int32_t> remaining_;
};

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
  // fill_mask if the mask is cached (true); else false and *job computes it (TokenConstraint).
  bool fill_mask_if_ready(std::span<uint32_t> mask, std::shared_ptr<MaskJob>* job) const;
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
