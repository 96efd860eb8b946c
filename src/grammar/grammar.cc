#include "grammar/grammar.h"

#include <algorithm>
#include <functional>
#include <unordered_map>

namespace pagoda::grammar {

namespace ex {
ExprPtr lit(std::string_view bytes) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::kLiteral;
  e->literal = std::string(bytes);
  return e;
}
ExprPtr cls(std::vector<CodepointRange> ranges, bool negated) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::kClass;
  e->ranges = std::move(ranges);
  e->negated = negated;
  return e;
}
ExprPtr bytes(std::vector<CodepointRange> byte_ranges) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::kClass;
  e->ranges = std::move(byte_ranges);
  e->byte_class = true;
  return e;
}
ExprPtr seq(std::vector<ExprPtr> items) {
  if (items.size() == 1) return items[0];
  auto e = std::make_shared<Expr>();
  e->kind = Expr::kSeq;
  e->items = std::move(items);
  return e;
}
ExprPtr alt(std::vector<ExprPtr> items) {
  if (items.size() == 1) return items[0];
  auto e = std::make_shared<Expr>();
  e->kind = Expr::kAlt;
  e->items = std::move(items);
  return e;
}
ExprPtr repeat(ExprPtr item, int32_t min, int32_t max) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::kRepeat;
  e->items = {std::move(item)};
  e->min = min;
  e->max = max;
  return e;
}
ExprPtr ref(std::string_view rule) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::kRef;
  e->ref = std::string(rule);
  return e;
}
}  // namespace ex

void GrammarBuilder::define(const std::string& name, ExprPtr body) {
  if (!defs_.emplace(name, std::move(body)).second) duplicate_.push_back(name);
}

std::string GrammarBuilder::fresh_name(std::string_view hint) {
  for (;;) {
    std::string n = fmt::format("{}-{}", hint, fresh_++);
    if (!defs_.count(n)) return n;
  }
}

namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// One UTF-8 byte-range sequence: byte i of the character lies in ranges[i].
struct ByteRangeSeq {
  int n = 0;
  uint8_t lo[4], hi[4];
};

int utf8_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void encode(uint32_t cp, uint8_t* out) {
  if (cp < 0x80) {
    out[0] = static_cast<uint8_t>(cp);
  } else if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  } else {
    out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  }
}

// [lo, hi] (one encoded length, no surrogates) -> byte-range sequences whose union is exactly it.
void split_range(uint32_t lo, uint32_t hi, std::vector<ByteRangeSeq>* out) {
  const int n = utf8_len(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_range(lo, lo | m, out);
        split_range((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split_range(lo, (hi & ~m) - 1, out);
        split_range(hi & ~m, hi, out);
        return;
      }
    }
  }
  ByteRangeSeq s;
  s.n = n;
  encode(lo, s.lo);
  encode(hi, s.hi);
  out->push_back(s);
}

std::vector<CodepointRange> normalize(std::vector<CodepointRange> r, bool negated) {
  for (auto& x : r) {
    if (x.lo > x.hi) std::swap(x.lo, x.hi);
    x.hi = std::min(x.hi, kMaxCodepoint);
  }
  std::sort(r.begin(), r.end(), [](auto a, auto b) { return a.lo < b.lo; });
  std::vector<CodepointRange> merged;
  for (auto x : r) {
    if (x.lo > kMaxCodepoint) continue;
    if (!merged.empty() && x.lo <= merged.back().hi + 1) merged.back().hi = std::max(merged.back().hi, x.hi);
    else merged.push_back(x);
  }
  if (!negated) return merged;
  std::vector<CodepointRange> comp;
  uint32_t next = 0;
  for (auto x : merged) {
    if (x.lo > next) comp.push_back({next, x.lo - 1});
    next = x.hi + 1;
  }
  if (next <= kMaxCodepoint) comp.push_back({next, kMaxCodepoint});
  return comp;
}

// Code point ranges -> UTF-8 byte-range sequences (surrogates excluded).
std::vector<ByteRangeSeq> utf8_sequences(const std::vector<CodepointRange>& ranges) {
  std::vector<ByteRangeSeq> out;
  const uint32_t bounds[] = {0, 0x80, 0x800, 0x10000, kMaxCodepoint + 1};
  for (auto r : ranges) {
    for (int k = 0; k < 4; ++k) {
      uint32_t lo = std::max(r.lo, bounds[k]), hi = std::min(r.hi, bounds[k + 1] - 1);
      if (lo > hi) continue;
      if (k == 2) {  // cut out the surrogates
        if (lo < 0xD800 && hi >= 0xD800) {
          split_range(lo, 0xD7FF, &out);
          if (hi > 0xDFFF) split_range(0xE000, hi, &out);
          continue;
        }
        if (lo >= 0xD800 && lo <= 0xDFFF) lo = 0xE000;
        if (lo > hi) continue;
      }
      split_range(lo, hi, &out);
    }
  }
  return out;
}

using Alt = std::vector<Element>;

class Lowering {
 public:
  explicit Lowering(const std::map<std::string, ExprPtr>& defs) : defs_(defs) {}

  Status run(const std::string& root, Grammar* g) {
    auto it = defs_.find(root);
    if (it == defs_.end()) return invalid_argument("grammar has no rule '{}'", root);
    named_id(root);
    while (!pending_.empty()) {
      auto [name, id] = pending_.back();
      pending_.pop_back();
      auto d = defs_.find(name);
      if (d == defs_.end()) return invalid_argument("grammar rule '{}' is used but not defined", name);
      std::vector<Alt> alts;
      PAGODA_RETURN_IF_ERROR(lower_alternatives(d->second, &alts));
      rules_[id] = std::move(alts);
    }
    // Flatten.
    g->rules.assign(rules_.size(), {});
    g->rule_names = names_;
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const auto& a : rules_[r]) {
        g->rules[r].push_back(static_cast<uint32_t>(g->elements.size()));
        g->elements.insert(g->elements.end(), a.begin(), a.end());
        g->elements.push_back({Element::kEnd, 0});
      }
      if (g->elements.size() > kMaxGrammarElements) return resource_exhausted("grammar too large (over {} elements)", kMaxGrammarElements);
    }
    g->byte_sets = std::move(sets_);
    g->root = 0;
    return {};
  }

 private:
  uint32_t named_id(const std::string& name) {
    auto it = named_.find(name);
    if (it != named_.end()) return it->second;
    uint32_t id = new_rule(name);
    named_[name] = id;
    pending_.push_back({name, id});
    return id;
  }
  uint32_t new_rule(const std::string& name) {
    names_.push_back(name);
    rules_.emplace_back();
    return static_cast<uint32_t>(rules_.size() - 1);
  }
  uint32_t set_id(const ByteSet& s) {
    auto it = set_ids_.find(s);
    if (it != set_ids_.end()) return it->second;
    sets_.push_back(s);
    return set_ids_[s] = static_cast<uint32_t>(sets_.size() - 1);
  }
  Status grow(size_t n) {
    total_ += n;
    if (total_ > kMaxGrammarElements) return resource_exhausted("grammar too large (over {} elements)", kMaxGrammarElements);
    return {};
  }

  Status lower_alternatives(const ExprPtr& e, std::vector<Alt>* alts) {
    if (e->kind == Expr::kAlt) {
      for (const auto& item : e->items) {
        alts->emplace_back();
        PAGODA_RETURN_IF_ERROR(lower_seq(item, &alts->back()));
      }
      return {};
    }
    alts->emplace_back();
    return lower_seq(e, &alts->back());
  }

  Status aux_rule(const ExprPtr& e, std::string_view hint, uint32_t* id) {
    auto it = aux_.find(e.get());
    if (it != aux_.end()) {
      *id = it->second;
      return {};
    }
    std::vector<Alt> alts;
    PAGODA_RETURN_IF_ERROR(lower_alternatives(e, &alts));
    *id = new_rule(fmt::format("{}-{}", hint, rules_.size()));
    rules_[*id] = std::move(alts);
    aux_[e.get()] = *id;
    keep_.push_back(e);
    return {};
  }

  Status lower_class(const Expr& e, Alt* out) {
    if (e.byte_class) {
      ByteSet s;
      for (auto r : e.ranges) s.set_range(static_cast<uint8_t>(std::min<uint32_t>(r.lo, 255)), static_cast<uint8_t>(std::min<uint32_t>(r.hi, 255)));
      if (e.negated) for (auto& w : s.words) w = ~w;
      if (s.empty()) return invalid_argument("grammar has an empty byte class");
      out->push_back({Element::kBytes, set_id(s)});
      return grow(1);
    }
    auto ranges = normalize(e.ranges, e.negated);
    if (ranges.empty()) return invalid_argument("grammar has a character class that matches nothing");
    if (ranges.back().hi < 0x80) {
      ByteSet s;
      for (auto r : ranges) s.set_range(static_cast<uint8_t>(r.lo), static_cast<uint8_t>(r.hi));
      out->push_back({Element::kBytes, set_id(s)});
      return grow(1);
    }
    std::string key;
    for (auto r : ranges) key += fmt::format("{:x}-{:x},", r.lo, r.hi);
    auto it = class_rules_.find(key);
    uint32_t id;
    if (it != class_rules_.end()) {
      id = it->second;
    } else {
      std::vector<Alt> alts;
      ByteSet ascii;
      for (const auto& s : utf8_sequences(ranges)) {
        if (s.n == 1) {
          ascii.set_range(s.lo[0], s.hi[0]);
          continue;
        }
        Alt a;
        for (int i = 0; i < s.n; ++i) {
          ByteSet b;
          b.set_range(s.lo[i], s.hi[i]);
          a.push_back({Element::kBytes, set_id(b)});
        }
        alts.push_back(std::move(a));
      }
      if (!ascii.empty()) alts.insert(alts.begin(), Alt{{Element::kBytes, set_id(ascii)}});
      PAGODA_RETURN_IF_ERROR(grow(alts.size() * 4));
      id = new_rule(fmt::format("class-{}", rules_.size()));
      rules_[id] = std::move(alts);
      class_rules_[key] = id;
    }
    out->push_back({Element::kRule, id});
    return grow(1);
  }

  // A single element standing for `e` (a rule reference unless `e` is one byte set already).
  Status as_element(const ExprPtr& e, Element* out) {
    Alt a;
    if (e->kind == Expr::kClass || e->kind == Expr::kRef || (e->kind == Expr::kLiteral && e->literal.size() == 1)) {
      PAGODA_RETURN_IF_ERROR(lower_seq(e, &a));
      if (a.size() == 1) {
        *out = a[0];
        return {};
      }
    }
    uint32_t id;
    PAGODA_RETURN_IF_ERROR(aux_rule(e, "group", &id));
    *out = {Element::kRule, id};
    return {};
  }

  Status lower_seq(const ExprPtr& e, Alt* out) {
    switch (e->kind) {
      case Expr::kLiteral:
        for (unsigned char c : e->literal) {
          ByteSet s;
          s.set(c);
          out->push_back({Element::kBytes, set_id(s)});
        }
        return grow(e->literal.size());
      case Expr::kClass:
        return lower_class(*e, out);
      case Expr::kSeq:
        for (const auto& item : e->items) PAGODA_RETURN_IF_ERROR(lower_seq(item, out));
        return {};
      case Expr::kAlt: {
        if (e->items.empty()) return invalid_argument("grammar has an empty alternation");
        uint32_t id;
        PAGODA_RETURN_IF_ERROR(aux_rule(e, "alt", &id));
        out->push_back({Element::kRule, id});
        return grow(1);
      }
      case Expr::kRef:
        out->push_back({Element::kRule, named_id(e->ref)});
        return grow(1);
      case Expr::kRepeat: {
        if (e->min < 0 || (e->max >= 0 && e->max < e->min)) return invalid_argument("grammar has a bad repetition {{{},{}}}", e->min, e->max);
        Element x;
        PAGODA_RETURN_IF_ERROR(as_element(e->items[0], &x));
        PAGODA_RETURN_IF_ERROR(grow(static_cast<size_t>(e->min) + (e->max < 0 ? 2 : static_cast<size_t>(e->max - e->min) * 3)));
        for (int i = 0; i < e->min; ++i) out->push_back(x);
        if (e->max < 0) {
          // R ::= x R | (empty)
          uint32_t r = new_rule(fmt::format("star-{}", rules_.size()));
          rules_[r] = {Alt{x, {Element::kRule, r}}, Alt{}};
          out->push_back({Element::kRule, r});
        } else if (e->max > e->min) {
          // R1 ::= x | (empty); Rk ::= x R(k-1) | (empty)
          uint32_t prev = new_rule(fmt::format("opt-{}", rules_.size()));
          rules_[prev] = {Alt{x}, Alt{}};
          for (int k = 2; k <= e->max - e->min; ++k) {
            uint32_t r = new_rule(fmt::format("opt-{}", rules_.size()));
            rules_[r] = {Alt{x, {Element::kRule, prev}}, Alt{}};
            prev = r;
          }
          out->push_back({Element::kRule, prev});
        }
        return {};
      }
    }
    return {};
  }

  const std::map<std::string, ExprPtr>& defs_;
  std::vector<std::vector<Alt>> rules_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> named_;
  std::vector<std::pair<std::string, uint32_t>> pending_;
  std::vector<ByteSet> sets_;
  std::map<ByteSet, uint32_t> set_ids_;
  std::unordered_map<const Expr*, uint32_t> aux_;
  std::vector<ExprPtr> keep_;
  std::unordered_map<std::string, uint32_t> class_rules_;
  size_t total_ = 0;
};

Status check_left_recursion(const Grammar& g) {
  const size_t n = g.rules.size();
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (uint32_t start : g.rules[r]) {
        bool all = true;
        for (uint32_t p = start; g.elements[p].kind != Element::kEnd; ++p) {
          const Element& e = g.elements[p];
          if (e.kind == Element::kBytes || !nullable[e.arg]) {
            all = false;
            break;
          }
        }
        if (all) {
          nullable[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  std::vector<std::vector<uint32_t>> left(n);
  for (size_t r = 0; r < n; ++r)
    for (uint32_t start : g.rules[r])
      for (uint32_t p = start; g.elements[p].kind == Element::kRule; ++p) {
        left[r].push_back(g.elements[p].arg);
        if (!nullable[g.elements[p].arg]) break;
      }
  // Iterative DFS for a cycle.
  std::vector<char> color(n, 0);
  for (size_t s = 0; s < n; ++s) {
    if (color[s]) continue;
    std::vector<std::pair<uint32_t, size_t>> stack{{static_cast<uint32_t>(s), 0}};
    color[s] = 1;
    while (!stack.empty()) {
      auto& [r, i] = stack.back();
      if (i < left[r].size()) {
        uint32_t c = left[r][i++];
        if (color[c] == 1) return invalid_argument("grammar rule '{}' is left-recursive (it can reach itself without consuming input)", g.rule_names[c]);
        if (color[c] == 0) {
          color[c] = 1;
          stack.push_back({c, 0});
        }
      } else {
        color[r] = 2;
        stack.pop_back();
      }
    }
  }
  return {};
}

}  // namespace

Result<Grammar> GrammarBuilder::build(const std::string& root) {
  if (!duplicate_.empty()) return invalid_argument("grammar rule '{}' is defined twice", duplicate_[0]);
  Grammar g;
  Lowering lowering(defs_);
  PAGODA_RETURN_IF_ERROR(lowering.run(root, &g));
  PAGODA_RETURN_IF_ERROR(check_left_recursion(g));
  return g;
}

std::string Grammar::to_string() const {
  std::string out;
  auto set_text = [&](const ByteSet& s) {
    std::string t = "[";
    for (int b = 0; b < 256; ++b) {
      if (!s.test(static_cast<uint8_t>(b))) continue;
      int e = b;
      while (e + 1 < 256 && s.test(static_cast<uint8_t>(e + 1))) ++e;
      auto ch = [](int c) { return (c > 32 && c < 127 && c != ']' && c != '\\' && c != '-') ? std::string(1, static_cast<char>(c)) : fmt::format("\\x{:02X}", c); };
      t += ch(b);
      if (e > b) t += "-" + ch(e);
      b = e;
    }
    return t + "]";
  };
  for (size_t r = 0; r < rules.size(); ++r) {
    out += rule_names[r] + " ::=";
    for (size_t a = 0; a < rules[r].size(); ++a) {
      if (a) out += " |";
      for (uint32_t p = rules[r][a]; elements[p].kind != Element::kEnd; ++p) {
        const Element& e = elements[p];
        out += " " + (e.kind == Element::kBytes ? set_text(byte_sets[e.arg]) : rule_names[e.arg]);
      }
      if (elements[rules[r][a]].kind == Element::kEnd) out += " ()";
    }
    out += "\n";
  }
  return out;
}

}  // namespace pagoda::grammar
