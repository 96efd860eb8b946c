// Special-token settings in Hugging Face tokenizer files (tokenizer_config.json,
// special_tokens_map.json), read by the tokenizer and the chat-template loader alike.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace pagoda {

// A token setting such as bos_token: a plain string or an AddedToken object
// {"content": "text", ...}; nullopt when absent, null or of another type. Json is
// nlohmann::json or nlohmann::ordered_json.
template <class Json>
std::optional<std::string> hf_config_token(const Json& cfg, const char* key) {
  if (!cfg.is_object()) return std::nullopt;
  auto it = cfg.find(key);
  if (it == cfg.end()) return std::nullopt;
  if (it->is_string()) return it->template get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->template get<std::string>();
  }
  return std::nullopt;
}

}  // namespace pagoda
