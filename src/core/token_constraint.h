// A per-request constraint on which tokens may be sampled (structured outputs), as the runner
// and the samplers see it: an abstract interface so that core/ and runtime/ do not depend on
// how constraints are compiled (grammar/ implements it).
//
// Contract: a TokenConstraintSpec is immutable and shared (SamplingParams holds it); start()
// makes the per-request state. A TokenConstraint is used by one thread at a time. Masks are
// packed: bit (id % 32) of word (id / 32), vocab_size() bits; a set bit means "allowed".
// fill_mask, accepts and advance agree: a token's bit is set exactly when advance would take it.
//
// Speculative decoding works on the request's own state: it advances over draft tokens to reach
// the state (and mask) at each later position, then rolls those advances back, so that the
// state only keeps the tokens the request actually emits (accepted_prefix below; the verifier,
// runtime/spec_verifier.h). advance and rollback are O(1) amortised apart from the grammar step
// itself; the state keeps one entry per advance not rolled back.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

namespace pagoda {

// The computation of one mask that is not at hand, in parts that may run on different threads at
// the same time (each part once); when every part has run, the constraint's fill_mask finds the
// mask ready. Several rows in the same state may get the same job (run its parts once).
class MaskJob {
 public:
  virtual ~MaskJob() = default;
  virtual int32_t parts() const = 0;
  // Thread-safe for distinct k in [0, parts()).
  virtual void run_part(int32_t k) = 0;
};

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  virtual int32_t vocab_size() const = 0;
  // Writes (vocab_size() + 31) / 32 words. Never all zero (a dead end allows the stop ids).
  virtual void fill_mask(std::span<uint32_t> mask) const = 0;
  // fill_mask when the mask is at hand (true). Otherwise false, the mask unspecified, and *job
  // the work that computes it: run its parts (spread over threads), then fill_mask. The default:
  // always at hand.
  virtual bool fill_mask_if_ready(std::span<uint32_t> mask, std::shared_ptr<MaskJob>* job) const {
    (void)job;
    fill_mask(mask);
    return true;
  }
  // Whether advance(token) would succeed (speculative decoding: reject a draft token).
  virtual bool accepts(int32_t token) const = 0;
  // Moves past `token`; false (state unchanged) if the constraint forbids it.
  virtual bool advance(int32_t token) = 0;
  // Undoes the last n successful advances (0 <= n <= successful advances not yet undone): the
  // state, mask and finished() are then as they were before them.
  virtual void rollback(int n) = 0;
  // Nothing may follow (the output is complete).
  virtual bool finished() const = 0;
};

// The number of leading `tokens` the constraint takes one after another from its current state
// (speculative decoding: drafts are cut before the first token it forbids). The state is the
// same on return (advanced, then rolled back).
inline int32_t accepted_prefix(TokenConstraint& c, std::span<const int32_t> tokens) {
  int32_t n = 0;
  while (n < static_cast<int32_t>(tokens.size()) && c.advance(tokens[n])) ++n;
  c.rollback(n);
  return n;
}

class TokenConstraintSpec {
 public:
  virtual ~TokenConstraintSpec() = default;
  virtual std::unique_ptr<TokenConstraint> start() const = 0;
};

}  // namespace pagoda
