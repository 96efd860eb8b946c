#include "grammar/matcher.h"

#include <xxhash.h>

#include <algorithm>
#include <array>
#include <atomic>

#include "common/check.h"

namespace pagoda::grammar {

size_t CompiledGrammar::KeyHash::operator()(const std::vector<uint32_t>& k) const {
  return static_cast<size_t>(XXH3_64bits(k.data(), k.size() * sizeof(uint32_t)));
}

namespace {
std::atomic<uint64_t> next_grammar_id{1};
}  // namespace

CompiledGrammar::CompiledGrammar(Grammar g, std::shared_ptr<const TokenVocabulary> vocab, size_t cache_bytes)
    : grammar_(std::move(g)), pda_(grammar_), vocab_(std::move(vocab)), id_(next_grammar_id.fetch_add(1)) {
  initial_ = pda_.initial();
  // Byte classes: bytes that every byte set of the grammar takes or refuses alike lead every
  // state to the same next state. Refined one distinct byte set at a time.
  std::vector<ByteSet> sets = grammar_.byte_sets;
  std::sort(sets.begin(), sets.end());
  sets.erase(std::unique(sets.begin(), sets.end()), sets.end());
  byte_class_.fill(0);
  num_classes_ = 1;
  for (const ByteSet& set : sets) {
    if (num_classes_ == 256) break;
    std::array<int16_t, 512> remap;
    remap.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      int16_t& id = remap[byte_class_[b] * 2 + (set.test(static_cast<uint8_t>(b)) ? 1 : 0)];
      if (id < 0) id = static_cast<int16_t>(n++);
      byte_class_[b] = static_cast<uint8_t>(id);
    }
    num_classes_ = n;
  }
  class_byte_.assign(static_cast<size_t>(num_classes_), 0);
  const size_t mask_bytes = static_cast<size_t>(vocab_->mask_words()) * sizeof(uint32_t);
  capacity_ = std::clamp<size_t>(cache_bytes / std::max<size_t>(mask_bytes, 1), 16, 4096);
  for (int b = 255; b >= 0; --b) class_byte_[byte_class_[b]] = static_cast<uint8_t>(b);
}

namespace {

// The states one walk reaches, interned, with their transitions per byte class memoized: inside a
// JSON string nearly every byte leads back to the same state, so the trie walk then costs a table
// lookup per trie node instead of a PDA step.
struct WalkTables {
  struct Hash {
    size_t operator()(const std::vector<uint32_t>& k) const {
      return static_cast<size_t>(XXH3_64bits(k.data(), k.size() * sizeof(uint32_t)));
    }
  };
  int num_classes = 0;
  std::vector<StackSet> states;
  std::vector<int32_t> trans;  // [state][class]: -2 not computed; -1 dead
  std::unordered_map<std::vector<uint32_t>, int32_t, Hash> ids;
  size_t bytes = 0;  // about what the states and their rows hold

  int32_t intern(StackSet&& s, const Pda& pda, const std::vector<uint8_t>& class_byte) {
    auto it = ids.find(s.flat);
    if (it != ids.end()) return it->second;
    const int32_t id = static_cast<int32_t>(states.size());
    ids.emplace(s.flat, id);
    const ByteSet next = pda.next_bytes(s);
    for (int c = 0; c < num_classes; ++c) trans.push_back(next.test(class_byte[c]) ? -2 : -1);
    bytes += 2 * s.flat.size() * sizeof(uint32_t) + static_cast<size_t>(num_classes) * sizeof(int32_t) + 64;
    states.push_back(std::move(s));
    return id;
  }
};

// This thread's tables of the walks of a few grammars (by CompiledGrammar::id_), kept across
// walks: a walk then mostly finds the states and transitions that earlier walks (parts, states,
// requests) of the same grammar computed. Bounded: kThreadTableGrammars grammars a thread (the
// least recently walked dropped), a table starting over past kThreadTableBytes (a walk's own
// states always stay: a table is only reset between walks).
constexpr size_t kThreadTableGrammars = 4;
constexpr size_t kThreadTableBytes = size_t{2} << 20;

WalkTables& thread_tables(uint64_t grammar_id, int num_classes) {
  thread_local std::vector<std::pair<uint64_t, std::unique_ptr<WalkTables>>> tables;  // most recent last
  auto it = std::find_if(tables.begin(), tables.end(), [&](const auto& e) { return e.first == grammar_id; });
  std::unique_ptr<WalkTables> t;
  if (it != tables.end()) {
    t = std::move(it->second);
    tables.erase(it);
  } else {
    if (tables.size() >= kThreadTableGrammars) tables.erase(tables.begin());
    t = std::make_unique<WalkTables>();
    t->num_classes = num_classes;
  }
  if (t->bytes >= kThreadTableBytes) {
    t->states.clear();
    t->trans.clear();
    t->ids.clear();
    t->bytes = 0;
  }
  tables.emplace_back(grammar_id, std::move(t));
  return *tables.back().second;
}

}  // namespace

void CompiledGrammar::walk_nodes(const StackSet& state, uint32_t begin, uint32_t end, std::span<uint32_t> mask) const {
  PAGODA_CHECK(static_cast<int32_t>(mask.size()) == vocab_->mask_words(), "mask of {} words for a vocabulary of {}", mask.size(), vocab_->size());
  const auto& nodes = vocab_->nodes();
  end = std::min(end, vocab_->num_nodes());
  begin = std::max(begin, 1u);
  if (state.empty() || begin >= end) return;
  const int32_t* toks = vocab_->trie_tokens().data();
  const size_t nc = static_cast<size_t>(num_classes_);
  WalkTables& t = thread_tables(id_, num_classes_);
  auto step = [&](int32_t sid, uint8_t byte) {
    int32_t& nid = t.trans[static_cast<size_t>(sid) * nc + byte_class_[byte]];
    if (nid == -2) {
      StackSet next;
      const int32_t id = pda_.advance(t.states[sid], byte, &next) ? t.intern(std::move(next), pda_, class_byte_) : -1;
      t.trans[static_cast<size_t>(sid) * nc + byte_class_[byte]] = id;  // intern may have moved the table
      return id;
    }
    return nid;
  };
  // at[d]: the state after the first d bytes of the current node's prefix (-1: no stack takes
  // them). The ancestors of the first node come from its prefix (a token of its subtree).
  thread_local std::vector<int32_t> at;
  at.assign(vocab_->max_token_bytes() + 1, 0);
  at[0] = t.intern(StackSet(state), pda_, class_byte_);
  const uint32_t first_depth = nodes[begin].depth;
  const std::string& prefix = vocab_->bytes(vocab_->trie_tokens()[nodes[begin].tok_begin]);
  for (uint32_t d = 1; d < first_depth; ++d) at[d] = at[d - 1] < 0 ? -1 : step(at[d - 1], static_cast<uint8_t>(prefix[d - 1]));
  for (uint32_t i = begin; i < end;) {
    const TokenVocabulary::Node& node = nodes[i];
    const int32_t sid = at[node.depth - 1];
    const int32_t nid = sid < 0 ? -1 : step(sid, static_cast<uint8_t>(node.byte));
    if (nid < 0) {
      i = node.skip;
      continue;
    }
    at[node.depth] = nid;
    for (uint32_t k = node.tok_begin, e = nodes[i + 1].tok_begin; k < e; ++k) mask[toks[k] >> 5] |= 1u << (toks[k] & 31);
    ++i;
  }
}

void CompiledGrammar::compute_mask(const StackSet& state, std::span<uint32_t> mask) const {
  std::fill(mask.begin(), mask.end(), 0u);
  if (state.empty()) return;
  if (pda_.accepting(state))
    for (int32_t t : vocab_->stop_ids()) mask[t >> 5] |= 1u << (t & 31);
  walk_nodes(state, 1, vocab_->num_nodes(), mask);
}

void CompiledGrammar::store_locked(const std::vector<uint32_t>& key, std::span<const uint32_t> mask) const {
  if (cache_.count(key)) return;
  if (cache_.size() >= capacity_) {
    // Clock: pass over referenced entries (clearing the bit), evict the first unreferenced one.
    for (;; hand_ = (hand_ + 1) % clock_.size()) {
      Entry& e = cache_.at(*clock_[hand_]);
      if (!e.referenced) break;
      e.referenced = false;
    }
    cache_.erase(*clock_[hand_]);
    ++stats_.evictions;
    auto it = cache_.emplace(key, Entry{std::vector<uint32_t>(mask.begin(), mask.end()), false}).first;
    clock_[hand_] = &it->first;
    hand_ = (hand_ + 1) % clock_.size();
    return;
  }
  auto it = cache_.emplace(key, Entry{std::vector<uint32_t>(mask.begin(), mask.end()), false}).first;
  clock_.push_back(&it->first);
}

bool CompiledGrammar::lookup_locked(const StackSet& state, std::span<uint32_t> mask) const {
  auto it = cache_.find(state.flat);
  if (it == cache_.end()) return false;
  ++stats_.hits;
  it->second.referenced = true;
  std::copy(it->second.mask.begin(), it->second.mask.end(), mask.begin());
  return true;
}

void CompiledGrammar::fill_mask(const StackSet& state, std::span<uint32_t> mask) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (lookup_locked(state, mask)) return;
    ++stats_.misses;
  }
  compute_mask(state, mask);
  std::lock_guard<std::mutex> lock(mu_);
  store_locked(state.flat, mask);
}

bool CompiledGrammar::fill_mask_if_ready(const StackSet& state, std::span<uint32_t> mask, std::shared_ptr<MaskJob>* walk) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (lookup_locked(state, mask)) return true;
  auto w = walking_.find(state.flat);
  if (w != walking_.end()) {
    if (auto live = w->second.lock()) {
      *walk = std::move(live);
      return false;
    }
  }
  ++stats_.misses;
  auto job = std::make_shared<MaskWalk>(*this, state);
  // Walks whose jobs were dropped unfinished leave expired entries: swept when they pile up.
  if (walking_.size() >= 256) std::erase_if(walking_, [](const auto& e) { return e.second.expired(); });
  walking_[state.flat] = job;
  *walk = std::move(job);
  return false;
}

void CompiledGrammar::walk_done(const StackSet& state, std::span<const uint32_t> mask) const {
  std::lock_guard<std::mutex> lock(mu_);
  store_locked(state.flat, mask);
  walking_.erase(state.flat);
}

CompiledGrammar::CacheStats CompiledGrammar::cache_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CacheStats s = stats_;
  s.entries = static_cast<int64_t>(cache_.size());
  return s;
}

MaskWalk::MaskWalk(const CompiledGrammar& grammar, StackSet state)
    : grammar_(grammar), state_(std::move(state)), result_(static_cast<size_t>(grammar.vocab().mask_words()), 0u) {
  const ByteSet first = grammar_.pda().next_bytes(state_);
  uint64_t nodes = 0;
  for (int b = 0; b < 256; ++b)
    if (first.test(static_cast<uint8_t>(b))) nodes += grammar_.vocab().first_byte_nodes()[b];
  if (nodes >= kMinNodesToSplit) parts_ = static_cast<int32_t>(grammar_.vocab().part_starts().size()) - 1;
  remaining_.store(parts_);
  if (grammar_.pda().accepting(state_))
    for (int32_t t : grammar_.vocab().stop_ids()) result_[t >> 5] |= 1u << (t & 31);
}

int32_t MaskWalk::parts() const { return parts_; }

void MaskWalk::run_part(int32_t k) {
  const auto& starts = grammar_.vocab().part_starts();
  thread_local std::vector<uint32_t> scratch;
  scratch.assign(result_.size(), 0u);
  if (parts_ == 1) grammar_.walk_nodes(state_, starts.front(), starts.back(), scratch);
  else grammar_.walk_nodes(state_, starts[k], starts[k + 1], scratch);
  for (size_t w = 0; w < scratch.size(); ++w)
    if (scratch[w]) std::atomic_ref<uint32_t>(result_[w]).fetch_or(scratch[w], std::memory_order_relaxed);
  // The last part sees every other part's bits (their decrements release them).
  if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) grammar_.walk_done(state_, result_);
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

namespace {
// A dead end allows the stop ids (a mask is never all zero).
void allow_stops_if_empty(const TokenVocabulary& vocab, std::span<uint32_t> mask) {
  for (uint32_t w : mask)
    if (w) return;
  for (int32_t t : vocab.stop_ids()) mask[t >> 5] |= 1u << (t & 31);
}
}  // namespace

void GrammarMatcher::fill_mask(std::span<uint32_t> mask) const {
  const Step& cur = history_.back();
  if (cur.stopped) {
    std::fill(mask.begin(), mask.end(), 0u);
  } else {
    grammar_->fill_mask(cur.state, mask);
  }
  allow_stops_if_empty(grammar_->vocab(), mask);
}

bool GrammarMatcher::fill_mask_if_ready(std::span<uint32_t> mask, std::shared_ptr<MaskJob>* job) const {
  const Step& cur = history_.back();
  if (cur.stopped) {
    std::fill(mask.begin(), mask.end(), 0u);
  } else if (!grammar_->fill_mask_if_ready(cur.state, mask, job)) {
    return false;
  }
  allow_stops_if_empty(grammar_->vocab(), mask);
  return true;
}

}  // namespace pagoda::grammar
