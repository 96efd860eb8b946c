// libFuzzer target: the grammar front ends (src/grammar/): JSON Schema, regular expressions and
// GBNF text -> Grammar, then matching. The first byte picks the front end; the rest is its
// input. A compiled grammar must give a matcher whose byte-level state stays consistent: the
// trie-walk mask over a 256-token single-byte vocabulary equals trying each byte, and equals the
// walk in parts (TokenVocabulary::part_starts, as a MaskWalk runs it), along a path the mask
// itself chooses. Errors are normal outcomes; crashes, sanitizer reports and failed
// checks are findings.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "grammar/gbnf_parser.h"
#include "grammar/json_schema_compiler.h"
#include "grammar/matcher.h"
#include "grammar/regex_compiler.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
std::shared_ptr<const pagoda::grammar::TokenVocabulary> byte_vocab() {
  static auto v = [] {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
    bytes.push_back("");  // stop
    return std::make_shared<const pagoda::grammar::TokenVocabulary>(std::move(bytes), std::vector<int32_t>{256});
  }();
  return v;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pagoda::grammar;
  if (size == 0 || size > 4096) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  pagoda::Result<Grammar> g = pagoda::invalid_argument("none");
  switch (data[0] % 3) {
    case 0: g = compile_json_schema_text(text); break;
    case 1: g = compile_regex(text); break;
    default: g = compile_gbnf(text); break;
  }
  if (!g.ok()) return 0;
  auto compiled = std::make_shared<const CompiledGrammar>(std::move(g).value(), byte_vocab());
  GrammarMatcher m(compiled);
  std::vector<uint32_t> mask(byte_vocab()->mask_words()), whole(mask.size()), parts(mask.size());
  const auto& starts = byte_vocab()->part_starts();
  for (int step = 0; step < 64 && !m.is_terminated(); ++step) {
    m.fill_mask(mask);
    compiled->compute_mask(m.state(), whole);
    std::fill(parts.begin(), parts.end(), 0u);
    if (compiled->pda().accepting(m.state())) parts[256 >> 5] |= 1u << (256 & 31);
    for (size_t k = 0; k + 1 < starts.size(); ++k) compiled->walk_nodes(m.state(), starts[k], starts[k + 1], parts);
    check(parts == whole);
    int pick = -1;
    for (int t = 0; t < 257; ++t) {
      const bool allowed = (mask[t >> 5] >> (t & 31)) & 1;
      check(allowed == m.accepts_token(t) || (t == 256 && !m.is_accepting()));
      if (allowed && pick < 0 && t != 256) pick = (t + step * 37) % 256;
    }
    if (pick < 0 || !m.accepts_token(pick)) {
      // Take the first allowed byte instead.
      pick = -1;
      for (int t = 0; t < 256 && pick < 0; ++t)
        if ((mask[t >> 5] >> (t & 31)) & 1) pick = t;
      if (pick < 0) break;
    }
    check(m.accept_token(pick));
  }
  return 0;
}
