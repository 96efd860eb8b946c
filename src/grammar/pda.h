// Byte-level pushdown matching of a Grammar.
//
// A parse position is a stack of element positions (grammar.elements indices): the top is the
// byte set to match next, the entries below are the continuations to resume when the rule above
// them completes (a reference in tail position pushes no continuation, so right recursion keeps
// the stack flat). A matcher state is the set of all live stacks (a nondeterministic PDA run in
// parallel, like llama.cpp's grammar stacks), kept canonical: stacks sorted and unique, so equal
// states have equal encodings and can key a cache. The empty stack means "the root rule is
// complete here" (an accepting state).
//
// Bounds: stacks deeper than kMaxStackDepth and states of more than kMaxStacks stacks are cut
// (documented limitation: grammars that ambiguous or inputs that deeply nested lose those paths).
// Thread-safety: Pda is immutable; StackSet and Scratch are per caller.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace pagoda::grammar {

constexpr size_t kMaxStackDepth = 2048;
constexpr size_t kMaxStacks = 4096;

// Canonical state: stacks back to back, each as [depth, bottom ... top].
struct StackSet {
  std::vector<uint32_t> flat;
  bool empty() const { return flat.empty(); }
  bool operator==(const StackSet& o) const { return flat == o.flat; }
};

class Pda {
 public:
  explicit Pda(const Grammar& g) : g_(g) {}
  const Grammar& grammar() const { return g_; }

  StackSet initial() const;
  // *out = the state after byte `b`; false (and *out empty) when no stack can take it.
  bool advance(const StackSet& in, uint8_t b, StackSet* out) const;
  // Feeds bytes in order; false as soon as one is rejected (*state then empty).
  bool advance_bytes(StackSet* state, std::string_view bytes) const;
  bool accepting(const StackSet& s) const;
  // The union of the byte sets at the stack tops: every byte some stack can take.
  ByteSet next_bytes(const StackSet& s) const;

 private:
  struct Builder;
  void expand(std::vector<uint32_t>& below, uint32_t pos, Builder& out) const;
  const Grammar& g_;
};

}  // namespace pagoda::grammar
