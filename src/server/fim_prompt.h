// Fill-in-the-middle prompts for /v1/completions `suffix`: prefix-suffix-middle (PSM) order with
// the tokenizer's own FIM tokens,
//   [BOS] <fim_prefix> prefix <fim_suffix> suffix <fim_middle>   -> the model writes the middle.
// The token triple is the one the model file names (GGUF tokenizer.ggml.fim_pre/suf/mid_token_id,
// Tokenizer::fim_prefix_id ...) when it names all three; else it is looked up by its text among
// the families' known spellings (Qwen2.5-Coder
// `<|fim_prefix|>`, StarCoder / SmolLM `<fim_prefix>`, CodeLlama `<PRE>`, DeepSeek-Coder
// `<｜fim▁begin｜>`); a tokenizer with none of them cannot fill in the middle (a 400 saying so).
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::server {

struct FimTokens {
  int32_t prefix = -1, suffix = -1, middle = -1;
  std::string names;  // the spellings found, for messages ("<|fim_prefix|> <|fim_suffix|> <|fim_middle|>")
};

// `token_id(text)`: the id of the token spelled `text`, if the vocabulary has it.
std::optional<FimTokens> find_fim_tokens(const std::function<std::optional<int32_t>(std::string_view)>& token_id);

// The file's own triple (`named`: prefix, suffix, middle ids; `spelling(id)`: the token's text for
// FimTokens::names) when all three are valid ids, else find_fim_tokens(token_id).
std::optional<FimTokens> fim_tokens_of(const std::array<int32_t, 3>& named,
                                       const std::function<std::string(int32_t)>& spelling,
                                       const std::function<std::optional<int32_t>(std::string_view)>& token_id);

// The PSM prompt: bos (if >= 0), prefix marker, prefix ids, suffix marker, suffix ids, middle marker.
std::vector<int32_t> fim_prompt(const FimTokens& fim, int32_t bos, std::span<const int32_t> prefix,
                                std::span<const int32_t> suffix);

}  // namespace pagoda::server
