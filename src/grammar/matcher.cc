#include "grammar/matcher.h"

#include <xxhash.h>

#include <algorithm>
#include <array>

#include "common/check.h"

namespace pagoda::grammar {

size_t CompiledGrammar::KeyHash::operator()(const std::vector<uint32_t>& k) const {
  return static_cast<size_t>(XXH3_64bits(k.data(), k.size() * sizeof(uint32_t)));
}

CompiledGrammar::CompiledGrammar(Grammar g, std::shared_ptr<const TokenVocabulary> vocab)
    : grammar_(std::move(g)), pda_(grammar_), vocab_(std::move(vocab)) {
  initial_ = pda_.initial();
}

namespace {

// The states one mask computation reaches, interned, with their byte transitions memoized: inside
// a JSON string nearly every byte leads back to the same state, so the trie walk then costs a
// table lookup per trie node instead of a PDA step.
struct WalkTables {
  struct Hash {
    size_t operator()(const std::vector<uint32_t>& k) const {
      return static_cast<size_t>(XXH3_64bits(k.data(), k.size() * sizeof(uint32_t)));
    }
  };
  std::vector<StackSet> states;
  std::vector<std::array<int32_t, 256>> trans;  // -2: not computed; -1: dead
  std::unordered_map<std::vector<uint32_t>, int32_t, Hash> ids;

  int32_t intern(StackSet&& s, const Pda& pda) {
    auto it = ids.find(s.flat);
    if (it != ids.end()) return it->second;
    const int32_t id = static_cast<int32_t>(states.size());
    ids.emplace(s.flat, id);
    const ByteSet next = pda.next_bytes(s);
    std::array<int32_t, 256> row;
    for (int b = 0; b < 256; ++b) row[b] = next.test(static_cast<uint8_t>(b)) ? -2 : -1;
    trans.push_back(row);
    states.push_back(std::move(s));
    return id;
  }
};

}  // namespace

void CompiledGrammar::compute_mask(const StackSet& state, std::span<uint32_t> mask) const {
  PAGODA_CHECK(static_cast<int32_t>(mask.size()) == vocab_->mask_words(), "mask of {} words for a vocabulary of {}", mask.size(), vocab_->size());
  std::fill(mask.begin(), mask.end(), 0u);
  if (state.empty()) return;
  if (pda_.accepting(state))
    for (int32_t t : vocab_->stop_ids()) mask[t >> 5] |= 1u << (t & 31);
  const auto& nodes = vocab_->nodes();
  const auto& toks = vocab_->trie_tokens();
  WalkTables t;
  t.intern(StackSet(state), pda_);
  std::vector<std::pair<uint32_t, int32_t>> stack{{0u, 0}};  // (trie node, state id)
  while (!stack.empty()) {
    const auto [node, sid] = stack.back();
    stack.pop_back();
    for (uint32_t c = nodes[node].child_begin; c < nodes[node].child_end; ++c) {
      const auto& child = nodes[c];
      int32_t nid = t.trans[sid][child.byte];
      if (nid == -1) continue;
      if (nid == -2) {
        StackSet next;
        nid = pda_.advance(t.states[sid], child.byte, &next) ? t.intern(std::move(next), pda_) : -1;
        t.trans[sid][child.byte] = nid;
        if (nid < 0) continue;
      }
      for (uint32_t k = child.tok_begin; k < child.tok_end; ++k) mask[toks[k] >> 5] |= 1u << (toks[k] & 31);
      if (child.child_begin != child.child_end) stack.push_back({c, nid});
    }
  }
}

void CompiledGrammar::fill_mask(const StackSet& state, std::span<uint32_t> mask) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(state.flat);
    if (it != cache_.end()) {
      ++stats_.hits;
      std::copy(it->second.begin(), it->second.end(), mask.begin());
      return;
    }
    ++stats_.misses;
  }
  compute_mask(state, mask);
  std::lock_guard<std::mutex> lock(mu_);
  if (cache_.size() < kMaxCachedMasks) cache_.emplace(state.flat, std::vector<uint32_t>(mask.begin(), mask.end()));
}

CompiledGrammar::CacheStats CompiledGrammar::cache_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CacheStats s = stats_;
  s.entries = static_cast<int64_t>(cache_.size());
  return s;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar) : grammar_(std::move(grammar)) {
  history_.push_back({grammar_->initial(), false});
}

bool GrammarMatcher::accepts_token(int32_t id) const {
  const Step& cur = history_.back();
  if (cur.stopped || id < 0 || id >= grammar_->vocab().size()) return false;
  if (grammar_->vocab().is_stop(id)) return grammar_->pda().accepting(cur.state);
  const std::string& b = grammar_->vocab().bytes(id);
  if (b.empty()) return false;
  StackSet s = cur.state;
  return grammar_->pda().advance_bytes(&s, b);
}

bool GrammarMatcher::accept_token(int32_t id) {
  const Step& cur = history_.back();
  if (cur.stopped || id < 0 || id >= grammar_->vocab().size()) return false;
  if (grammar_->vocab().is_stop(id)) {
    if (!grammar_->pda().accepting(cur.state)) return false;
    history_.push_back({cur.state, true});
    return true;
  }
  const std::string& b = grammar_->vocab().bytes(id);
  if (b.empty()) return false;
  StackSet s = cur.state;
  if (!grammar_->pda().advance_bytes(&s, b)) return false;
  history_.push_back({std::move(s), false});
  return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  const Step& cur = history_.back();
  if (cur.stopped) return false;
  StackSet s = cur.state;
  if (!grammar_->pda().advance_bytes(&s, bytes)) return false;
  history_.push_back({std::move(s), false});
  return true;
}

void GrammarMatcher::rollback(int n) {
  PAGODA_CHECK(n >= 0 && n <= num_accepted(), "rollback({}) with {} accepted", n, num_accepted());
  history_.resize(history_.size() - n);
}

bool GrammarMatcher::is_accepting() const {
  return !history_.back().stopped && grammar_->pda().accepting(history_.back().state);
}

bool GrammarMatcher::is_terminated() const {
  const Step& cur = history_.back();
  return cur.stopped || (grammar_->pda().accepting(cur.state) && grammar_->pda().next_bytes(cur.state).empty());
}

void GrammarMatcher::fill_mask(std::span<uint32_t> mask) const {
  const Step& cur = history_.back();
  if (cur.stopped) {
    std::fill(mask.begin(), mask.end(), 0u);
  } else {
    grammar_->fill_mask(cur.state, mask);
  }
  for (uint32_t w : mask)
    if (w) return;
  for (int32_t t : grammar_->vocab().stop_ids()) mask[t >> 5] |= 1u << (t & 31);
}

}  // namespace pagoda::grammar
