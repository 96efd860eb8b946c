// The reference token mask of the grammar tests: every token of the vocabulary tried against the
// PDA state one by one (a stop token is allowed in an accepting state, an empty token never).
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/matcher.h"

namespace pagoda::grammar {

inline std::vector<uint32_t> brute_force_mask(const CompiledGrammar& g, const StackSet& st) {
  const auto& vocab = g.vocab();
  std::vector<uint32_t> m(vocab.mask_words(), 0);
  for (int32_t t = 0; t < vocab.size(); ++t) {
    bool ok;
    if (vocab.is_stop(t)) {
      ok = g.pda().accepting(st);
    } else if (vocab.bytes(t).empty()) {
      ok = false;
    } else {
      StackSet s = st;
      ok = g.pda().advance_bytes(&s, vocab.bytes(t));
    }
    if (ok) m[t >> 5] |= 1u << (t & 31);
  }
  return m;
}

}  // namespace pagoda::grammar
