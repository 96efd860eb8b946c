#include "server/fim_prompt.h"

namespace pagoda::server {

std::optional<FimTokens> find_fim_tokens(const std::function<std::optional<int32_t>(std::string_view)>& token_id) {
  struct Spelling {
    const char *prefix, *suffix, *middle;
  };
  static constexpr Spelling kSpellings[] = {
      {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"},              // Qwen2.5-Coder, Qwen3-Coder
      {"<fim_prefix>", "<fim_suffix>", "<fim_middle>"},                    // StarCoder, SmolLM (v1)
      {"<fim-prefix>", "<fim-suffix>", "<fim-middle>"},                    // Santacoder-style
      {"<PRE>", "<SUF>", "<MID>"},                                         // CodeLlama (sentencepiece)
      {"\xe2\x96\x81<PRE>", "\xe2\x96\x81<SUF>", "\xe2\x96\x81<MID>"},     // CodeLlama, with the leading "▁"
      {"<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>",
       "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>"},               // DeepSeek-Coder
  };
  for (const Spelling& s : kSpellings) {
    const auto p = token_id(s.prefix), x = token_id(s.suffix), m = token_id(s.middle);
    if (p && x && m) return FimTokens{*p, *x, *m, std::string(s.prefix) + " " + s.suffix + " " + s.middle};
  }
  return std::nullopt;
}

std::optional<FimTokens> fim_tokens_of(const std::array<int32_t, 3>& named,
                                       const std::function<std::string(int32_t)>& spelling,
                                       const std::function<std::optional<int32_t>(std::string_view)>& token_id) {
  if (named[0] >= 0 && named[1] >= 0 && named[2] >= 0)
    return FimTokens{named[0], named[1], named[2], spelling(named[0]) + " " + spelling(named[1]) + " " + spelling(named[2])};
  return find_fim_tokens(token_id);
}

std::vector<int32_t> fim_prompt(const FimTokens& fim, int32_t bos, std::span<const int32_t> prefix,
                                std::span<const int32_t> suffix) {
  std::vector<int32_t> ids;
  ids.reserve(prefix.size() + suffix.size() + 4);
  if (bos >= 0) ids.push_back(bos);
  ids.push_back(fim.prefix);
  ids.insert(ids.end(), prefix.begin(), prefix.end());
  ids.push_back(fim.suffix);
  ids.insert(ids.end(), suffix.begin(), suffix.end());
  ids.push_back(fim.middle);
  return ids;
}

}  // namespace pagoda::server
