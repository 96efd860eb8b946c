// A per-request constraint on which tokens may be sampled (structured outputs), as the runner
// and the samplers see it: an abstract interface so that core/ and runtime/ do not depend on
// how constraints are compiled (grammar/ implements it).
//
// Contract: a TokenConstraintSpec is immutable and shared (SamplingParams holds it); start()
// makes the per-request state. A TokenConstraint is used by one thread at a time. Masks are
// packed: bit (id % 32) of word (id / 32), vocab_size() bits; a set bit means "allowed".
#pragma once

#include <cstdint>
#include <memory>
#include <span>

namespace pagoda {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  virtual int32_t vocab_size() const = 0;
  // Writes (vocab_size() + 31) / 32 words. Never all zero (a dead end allows the stop ids).
  virtual void fill_mask(std::span<uint32_t> mask) const = 0;
  // Whether advance(token) would succeed (speculative decoding: reject a draft token).
  virtual bool accepts(int32_t token) const = 0;
  // Moves past `token`; false (state unchanged) if the constraint forbids it.
  virtual bool advance(int32_t token) = 0;
  // Undoes the last n advances.
  virtual void rollback(int n) = 0;
  // Nothing may follow (the output is complete).
  virtual bool finished() const = 0;
};

class TokenConstraintSpec {
 public:
  virtual ~TokenConstraintSpec() = default;
  virtual std::unique_ptr<TokenConstraint> start() const = 0;
};

}  // namespace pagoda
