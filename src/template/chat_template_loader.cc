// Finding a model's chat template: in a GGUF file's metadata or in a Hugging Face directory.
#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <fstream>
#include <sstream>

#include "loader/gguf.h"
#include "loader/hf_token_config.h"
#include "template/chat_template.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

Result<std::string> read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return io_error("cannot open {}", p.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return io_error("cannot read {}", p.string());
  return ss.str();
}

Result<nlohmann::ordered_json> read_json(const fs::path& p) {
  PAGODA_ASSIGN_OR_RETURN(std::string text, read_text(p));
  auto j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("{} is not valid JSON", p.string());
  return j;
}

std::optional<std::string> gguf_token(const GgufFile& g, const char* id_key) {
  auto id = g.get_int(id_key);
  const GgufArray* tokens = g.get_array("tokenizer.ggml.tokens");
  if (!id || !tokens || *id < 0 || static_cast<size_t>(*id) >= tokens->strings.size()) return std::nullopt;
  return tokens->strings[static_cast<size_t>(*id)];
}

}  // namespace

Result<ChatTemplate> chat_template_from_gguf(const GgufFile& gguf) {
  auto source = gguf.get_string("tokenizer.chat_template");
  if (!source) return not_found("{} has no tokenizer.chat_template metadata", gguf.path());
  PAGODA_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::parse(*source));
  t.set_special_tokens(gguf_token(gguf, "tokenizer.ggml.bos_token_id"), gguf_token(gguf, "tokenizer.ggml.eos_token_id"));
  return t;
}

Result<ChatTemplate> chat_template_from_hf_dir(const std::string& dir, bool has_tools) {
  fs::path root(dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return not_found("{} is not a directory", dir);
  nlohmann::ordered_json cfg;
  if (fs::exists(root / "tokenizer_config.json", ec)) {
    PAGODA_ASSIGN_OR_RETURN(cfg, read_json(root / "tokenizer_config.json"));
  }
  std::optional<std::string> source;
  if (fs::exists(root / "chat_template.jinja", ec)) {
    PAGODA_ASSIGN_OR_RETURN(std::string s, read_text(root / "chat_template.jinja"));
    source = std::move(s);
  } else if (cfg.is_object() && cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
    const auto& ct = cfg["chat_template"];
    if (ct.is_string()) {
      source = ct.get<std::string>();
    } else if (ct.is_array()) {
      std::map<std::string, std::string> named;
      std::string names;
      for (const auto& e : ct) {
        if (!e.is_object() || !e.contains("name") || !e.contains("template") || !e["name"].is_string() ||
            !e["template"].is_string())
          return invalid_argument("{}: chat_template list entries must be {{name, template}} objects",
                                  (root / "tokenizer_config.json").string());
        named[e["name"].get<std::string>()] = e["template"].get<std::string>();
        names += (names.empty() ? "" : ", ") + e["name"].get<std::string>();
      }
      if (has_tools && named.count("tool_use")) {
        source = named["tool_use"];
      } else if (named.count("default")) {
        source = named["default"];
      } else {
        return not_found("{}: no \"default\" chat template among: {}", (root / "tokenizer_config.json").string(), names);
      }
    } else {
      return invalid_argument("{}: chat_template must be a string or a list", (root / "tokenizer_config.json").string());
    }
  } else if (fs::exists(root / "chat_template.json", ec)) {
    PAGODA_ASSIGN_OR_RETURN(auto j, read_json(root / "chat_template.json"));
    if (j.is_object() && j.contains("chat_template") && j["chat_template"].is_string())
      source = j["chat_template"].get<std::string>();
  }
  if (!source) return not_found("{} has no chat template (chat_template.jinja or tokenizer_config.json)", dir);
  PAGODA_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::parse(std::move(*source)));
  auto bos = hf_config_token(cfg, "bos_token");
  auto eos = hf_config_token(cfg, "eos_token");
  if ((!bos || !eos) && fs::exists(root / "special_tokens_map.json", ec)) {
    PAGODA_ASSIGN_OR_RETURN(auto stm, read_json(root / "special_tokens_map.json"));
    if (!bos) bos = hf_config_token(stm, "bos_token");
    if (!eos) eos = hf_config_token(stm, "eos_token");
  }
  t.set_special_tokens(std::move(bos), std::move(eos));
  return t;
}

Result<ChatTemplate> load_chat_template(const std::string& path, bool has_tools) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return chat_template_from_hf_dir(path, has_tools);
  if (!fs::exists(path, ec)) return not_found("{} does not exist", path);
  PAGODA_ASSIGN_OR_RETURN(auto gguf, GgufFile::open(path));
  return chat_template_from_gguf(*gguf);
}

}  // namespace pagoda
