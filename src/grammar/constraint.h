// Structured-output constraints: what a request asks for (ConstraintSource), compiled against
// the model's vocabulary into a shared TokenConstraintSpec (core/token_constraint.h), with a
// cache of compiled constraints keyed by their source text.
//
// Thread-safety: ConstraintCache is safe to use from any thread; compiled specs are immutable
// apart from their internal mask caches (which lock).
#pragma once

#include <nlohmann/json.hpp>

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "core/token_constraint.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/token_vocabulary.h"

namespace pagoda::grammar {

enum class ConstraintKind { kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar };
const char* constraint_kind_name(ConstraintKind k);  // "json_schema", "json_object", ...

struct ConstraintSource {
  ConstraintKind kind = ConstraintKind::kJsonObject;
  std::string text;                  // schema JSON, regex, GBNF; empty for json_object
  std::vector<std::string> choices;  // kChoice
  // A prebuilt grammar (tool calling builds its own); when set, kind/text only key the cache.
  std::shared_ptr<const Grammar> grammar;
  std::string cache_key() const;
};

Result<Grammar> compile_source(const ConstraintSource& source);

// The TokenConstraintSpec of one compiled grammar.
class GrammarConstraintSpec final : public TokenConstraintSpec {
 public:
  explicit GrammarConstraintSpec(std::shared_ptr<const CompiledGrammar> g) : grammar_(std::move(g)) {}
  std::unique_ptr<TokenConstraint> start() const override;
  const std::shared_ptr<const CompiledGrammar>& compiled() const { return grammar_; }

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
};

// Compiled constraints by source, least recently used dropped past `capacity`.
class ConstraintCache {
 public:
  ConstraintCache(std::shared_ptr<const TokenVocabulary> vocab, size_t capacity = 64)
      : vocab_(std::move(vocab)), capacity_(capacity) {}
  // The compiled spec (from the cache, else compiled now); an error says what is wrong.
  Result<std::shared_ptr<const GrammarConstraintSpec>> get(const ConstraintSource& source);
  const std::shared_ptr<const TokenVocabulary>& vocab() const { return vocab_; }
  int64_t hits() const;
  int64_t misses() const;

 private:
  std::shared_ptr<const TokenVocabulary> vocab_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<const GrammarConstraintSpec>>> lru_;
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace pagoda::grammar
