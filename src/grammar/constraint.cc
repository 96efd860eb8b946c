#include "grammar/constraint.h"

#include "grammar/gbnf_parser.h"
#include "grammar/json_schema_compiler.h"
#include "grammar/regex_compiler.h"

namespace pagoda::grammar {

const char* constraint_kind_name(ConstraintKind k) {
  switch (k) {
    case ConstraintKind::kJsonSchema: return "json_schema";
    case ConstraintKind::kJsonObject: return "json_object";
    case ConstraintKind::kRegex: return "regex";
    case ConstraintKind::kChoice: return "choice";
    case ConstraintKind::kGrammar: return "grammar";
  }
  return "";
}

std::string ConstraintSource::cache_key() const {
  std::string k = constraint_kind_name(kind);
  k += '\n';
  k += text;
  for (const auto& c : choices) {
    k += '\n';
    k += std::to_string(c.size());
    k += ':';
    k += c;
  }
  return k;
}

Result<Grammar> compile_source(const ConstraintSource& s) {
  if (s.grammar) return *s.grammar;
  switch (s.kind) {
    case ConstraintKind::kJsonSchema: return compile_json_schema_text(s.text);
    case ConstraintKind::kJsonObject: return json_object_grammar();
    case ConstraintKind::kRegex: return compile_regex(s.text);
    case ConstraintKind::kGrammar: return compile_gbnf(s.text);
    case ConstraintKind::kChoice: {
      if (s.choices.empty()) return invalid_argument("choice list is empty");
      std::vector<ExprPtr> alts;
      for (const auto& c : s.choices) {
        if (c.empty()) return invalid_argument("choice list has an empty string");
        alts.push_back(ex::lit(c));
      }
      GrammarBuilder b;
      b.define("root", ex::alt(std::move(alts)));
      return b.build("root");
    }
  }
  return invalid_argument("unknown constraint kind");
}

namespace {

class GrammarConstraint final : public TokenConstraint {
 public:
  explicit GrammarConstraint(std::shared_ptr<const CompiledGrammar> g) : m_(std::move(g)) {}
  int32_t vocab_size() const override { return m_.grammar().vocab().size(); }
  void fill_mask(std::span<uint32_t> mask) const override { m_.fill_mask(mask); }
  bool fill_mask_if_ready(std::span<uint32_t> mask, std::shared_ptr<MaskJob>* job) const override {
    return m_.fill_mask_if_ready(mask, job);
  }
  bool accepts(int32_t token) const override { return m_.accepts_token(token); }
  bool advance(int32_t token) override { return m_.accept_token(token); }
  void rollback(int n) override { m_.rollback(n); }
  bool finished() const override { return m_.is_terminated(); }

 private:
  GrammarMatcher m_;
};

}  // namespace

std::unique_ptr<TokenConstraint> GrammarConstraintSpec::start() const { return std::make_unique<GrammarConstraint>(grammar_); }

Result<std::shared_ptr<const GrammarConstraintSpec>> ConstraintCache::get(const ConstraintSource& source) {
  const std::string key = source.cache_key();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      ++hits_;
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
    ++misses_;
  }
  PAGODA_ASSIGN_OR_RETURN(Grammar g, compile_source(source));
  auto spec = std::make_shared<const GrammarConstraintSpec>(std::make_shared<const CompiledGrammar>(std::move(g), vocab_));
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(key)) return index_[key]->second;
  lru_.emplace_front(key, spec);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return spec;
}

int64_t ConstraintCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}
int64_t ConstraintCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

}  // namespace pagoda::grammar
