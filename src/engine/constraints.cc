// Engine::constraint(): structured-output constraints against the model's vocabulary.
#include "engine/engine.h"
#include "grammar/constraint.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

std::shared_ptr<const grammar::TokenVocabulary> make_token_vocabulary(const Tokenizer& tok) {
  const int32_t n = static_cast<int32_t>(tok.vocab_size());
  std::vector<std::string> bytes(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id)
    if (!tok.is_special(id)) bytes[id] = tok.token_bytes(id);
  return std::make_shared<const grammar::TokenVocabulary>(std::move(bytes), tok.stop_ids());
}

grammar::ConstraintCache& Engine::constraint_cache() const {
  std::call_once(constraints_once_, [&] { constraints_ = std::make_unique<grammar::ConstraintCache>(make_token_vocabulary(tokenizer())); });
  return *constraints_;
}

Result<std::shared_ptr<const TokenConstraintSpec>> Engine::constraint(const grammar::ConstraintSource& source) const {
  PAGODA_ASSIGN_OR_RETURN(auto spec, constraint_cache().get(source));
  return std::shared_ptr<const TokenConstraintSpec>(std::move(spec));
}

}  // namespace pagoda
