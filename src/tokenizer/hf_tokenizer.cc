// Hugging Face tokenizer files:
//   * tokenizer.json: model (BPE: vocab, merges as "a b" strings or [a, b] pairs, unk_token,
//     byte_fallback, fuse_unk, ignore_merges), added_tokens, normalizer, pre_tokenizer,
//     post_processor (TemplateProcessing / RobertaProcessing / BertProcessing -> BOS/EOS), decoder;
//   * vocab.json + merges.txt: byte-level BPE (ByteLevel decoder; the pre-tokenizer of the
//     tokenizer_config.json's tokenizer_class: Qwen2Tokenizer's NFC + regex, else GPT-2's ByteLevel);
//   * tokenizer_config.json (optional, both forms): bos/eos/unk/pad tokens, add_bos_token,
//     add_eos_token, added_tokens_decoder; its add_*_token settings win over the post-processor,
//     as transformers does.
//
// Added tokens are matched in the raw text (their "normalized" flag is not modelled: matching
// always happens before normalization). A decoder-less byte-level file decodes with ByteLevel.
// JSON errors of any kind become kDataLoss / kInvalidArgument results, never exceptions.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "loader/hf_token_config.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/hf_components.h"
#include "tokenizer/regex_matcher.h"
#include "tokenizer/tokenizer_data.h"

namespace pagoda {
namespace {

using nlohmann::json;

Result<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return io_error("cannot open {}", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Result<json> parse_json(std::string_view text, const char* what) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return data_loss("{} is not valid JSON", what);
  return j;
}

struct Vocab {
  std::vector<std::string> text;  // by id; "" for ids nobody uses
  std::vector<TokenType> type;
  void put(int64_t id, const std::string& t, TokenType ty) {
    if (static_cast<size_t>(id) >= text.size()) {
      text.resize(static_cast<size_t>(id) + 1);
      type.resize(static_cast<size_t>(id) + 1, TokenType::kUnused);
    }
    text[static_cast<size_t>(id)] = t;
    type[static_cast<size_t>(id)] = ty;
  }
};

constexpr int64_t kMaxId = 16 * 1024 * 1024;

Status read_vocab(const json& vocab, Vocab* v, StringIdMap* model_text) {
  if (!vocab.is_object()) return data_loss("BPE vocab is not an object");
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer()) return data_loss("vocab entry '{}' has a non-integer id", it.key());
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id > kMaxId) return data_loss("vocab entry '{}' has id {} out of range", it.key(), id);
    v->put(id, it.key(), TokenType::kNormal);
    model_text->insert(it.key(), static_cast<int32_t>(id));
  }
  return Status();
}

Status read_merges(const json& merges, const StringIdMap& model_text, std::vector<BpeMerge>* out) {
  if (merges.is_null()) return Status();
  if (!merges.is_array()) return data_loss("BPE merges is not an array");
  out->reserve(merges.size());
  std::string a, b;
  for (const json& m : merges) {
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) return data_loss("merge '{}' has no space", s);
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return data_loss("a BPE merge is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const int32_t ia = find_id(model_text, a), ib = find_id(model_text, b), ic = find_id(model_text, a + b);
    if (ia < 0 || ib < 0 || ic < 0) continue;  // cannot fire
    out->push_back({ia, ib, ic});
  }
  return Status();
}

Status read_merges_txt(std::string_view text, const StringIdMap& model_text, std::vector<BpeMerge>* out) {
  size_t pos = 0;
  bool first = true;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (first && line.substr(0, 8) == "#version") {
      first = false;
      continue;
    }
    first = false;
    if (line.empty()) continue;
    const size_t sp = line.find(' ', 1);
    if (sp == std::string_view::npos) return data_loss("merges.txt line '{}' has no space", line);
    std::string a(line.substr(0, sp)), b(line.substr(sp + 1));
    const int32_t ia = find_id(model_text, a), ib = find_id(model_text, b), ic = find_id(model_text, a + b);
    if (ia < 0 || ib < 0 || ic < 0) continue;
    out->push_back({ia, ib, ic});
  }
  return Status();
}

void add_added_token(TokenizerData* d, Vocab* v, const json& t) {
  AddedToken a;
  a.content = t.value("content", "");
  a.id = static_cast<int32_t>(t.value("id", int64_t{-1}));
  a.special = t.value("special", false);
  a.lstrip = t.value("lstrip", false);
  a.rstrip = t.value("rstrip", false);
  if (a.content.empty() || a.id < 0 || a.id > kMaxId) return;
  v->put(a.id, a.content, a.special ? TokenType::kControl : TokenType::kUserDefined);
  d->added.add(std::move(a));
}

// BOS / EOS from a post_processor.
Status read_post_processor(const json& pp, TokenizerData* d, const StringIdMap& ids) {
  if (pp.is_null()) return Status();
  const std::string t = pp.value("type", "");
  if (t == "Sequence") {
    for (const json& sub : pp.value("processors", json::array())) PAGODA_RETURN_IF_ERROR(read_post_processor(sub, d, ids));
    return Status();
  }
  if (t == "ByteLevel") return Status();
  if (t == "RobertaProcessing" || t == "BertProcessing") {
    auto pick = [&](const char* key) -> int32_t {
      auto it = pp.find(key);
      if (it == pp.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer()) return -1;
      return (*it)[1].get<int32_t>();
    };
    d->bos_id = pick("cls");
    d->eos_id = pick("sep");
    d->add_bos = d->bos_id >= 0;
    d->add_eos = d->eos_id >= 0;
    return Status();
  }
  if (t != "TemplateProcessing") return unimplemented("tokenizer.json post_processor type '{}' is not supported", t);
  const json& single = pp.value("single", json::array());
  std::vector<int32_t> before, after;
  bool seen_sequence = false;
  for (const json& item : single) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    if (!item.contains("SpecialToken")) continue;
    const std::string name = item["SpecialToken"].value("id", "");
    int32_t id = -1;
    const json& specials = pp.value("special_tokens", json::object());
    if (specials.contains(name) && specials[name].contains("ids") && !specials[name]["ids"].empty())
      id = specials[name]["ids"][0].get<int32_t>();
    if (id < 0) id = find_id(ids, name);
    (seen_sequence ? after : before).push_back(id);
  }
  if (before.size() > 1 || after.size() > 1)
    return unimplemented("tokenizer.json TemplateProcessing with more than one token before or after the text");
  if (!before.empty()) {
    d->bos_id = before[0];
    d->add_bos = true;
  }
  if (!after.empty()) {
    d->eos_id = after[0];
    d->add_eos = true;
  }
  return Status();
}

// tokenizer_config.json settings shared by both file forms.
void apply_config(const json& cfg, TokenizerData* d, Vocab* v, const StringIdMap& ids) {
  if (!cfg.is_object()) return;
  if (auto atd = cfg.find("added_tokens_decoder"); atd != cfg.end() && atd->is_object()) {
    for (auto it = atd->begin(); it != atd->end(); ++it) {
      if (!it.value().is_object()) continue;
      json t = it.value();
      try {
        t["id"] = std::stoll(it.key());
      } catch (...) {
        continue;
      }
      // Tokens already listed by tokenizer.json keep their settings.
      if (static_cast<size_t>(t["id"].get<int64_t>()) < v->text.size() &&
          v->type[static_cast<size_t>(t["id"].get<int64_t>())] != TokenType::kNormal &&
          v->type[static_cast<size_t>(t["id"].get<int64_t>())] != TokenType::kUnused)
        continue;
      add_added_token(d, v, t);
    }
  }
  auto id_of = [&](const char* key) -> int32_t {
    auto text = hf_config_token(cfg, key);
    if (!text) return -2;  // not set
    int32_t id = find_id(ids, *text);
    if (id < 0) {
      for (size_t i = 0; i < v->text.size(); ++i)
        if (v->text[i] == *text) id = static_cast<int32_t>(i);
    }
    return id;
  };
  if (int32_t id = id_of("bos_token"); id != -2) d->bos_id = id;
  if (int32_t id = id_of("eos_token"); id != -2) d->eos_id = id;
  if (int32_t id = id_of("unk_token"); id != -2 && d->unk_id < 0) d->unk_id = id;
  if (int32_t id = id_of("pad_token"); id != -2) d->pad_id = id;
  if (auto it = cfg.find("add_bos_token"); it != cfg.end() && it->is_boolean()) d->add_bos = it->get<bool>();
  if (auto it = cfg.find("add_eos_token"); it != cfg.end() && it->is_boolean()) d->add_eos = it->get<bool>();
}

// Finishes vocabulary and models for both forms.
Result<std::shared_ptr<const Tokenizer>> finish_hf(std::unique_ptr<TokenizerData> d, Vocab v, StringIdMap model_text,
                                                  const std::vector<BpeMerge>& merges, BpeOptions bo, bool byte_level,
                                                  bool byte_fallback_decoder, const json& cfg) {
  StringIdMap all_ids;
  for (size_t i = 0; i < v.text.size(); ++i)
    if (!v.text[i].empty()) all_ids.insert(v.text[i], static_cast<int32_t>(i));
  if (!cfg.is_null()) apply_config(cfg, d.get(), &v, all_ids);
  if (bo.unk_id >= 0 && static_cast<size_t>(bo.unk_id) < v.type.size() && v.type[bo.unk_id] == TokenType::kNormal)
    v.type[bo.unk_id] = TokenType::kUnknown;
  if (bo.byte_fallback || byte_fallback_decoder) {
    for (size_t i = 0; i < v.text.size(); ++i)
      if (v.type[i] == TokenType::kNormal && byte_piece_value(v.text[i]) >= 0) v.type[i] = TokenType::kByte;
  }
  if (d->unk_id < 0) d->unk_id = bo.unk_id;

  bo.byte_level = byte_level;
  StringIdMap model_vocab;
  if (byte_level) {
    model_text.for_each([&](std::string_view text, int32_t id) {
      if (auto bytes = byte_level::text_to_bytes(text)) model_vocab.insert(*bytes, id);
    });
  } else {
    model_vocab = std::move(model_text);
  }
  d->kind = byte_level ? TokenizerKind::kByteLevelBpe : TokenizerKind::kSentencePiece;
  d->token_text = std::move(v.text);
  d->token_type = std::move(v.type);
  d->bpe = std::make_unique<BpeModel>(std::move(model_vocab), merges, bo);
  return make_tokenizer(std::move(d));
}

Result<std::shared_ptr<const Tokenizer>> from_tokenizer_json(const json& j, const json& cfg) {
  auto d = std::make_unique<TokenizerData>();
  d->source = "hf";
  const json& model = j.value("model", json::object());
  const std::string mtype = model.value("type", model.contains("merges") ? "BPE" : "");
  if (mtype != "BPE") return unimplemented("tokenizer.json model type '{}' is not supported (only BPE)", mtype);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    if (it != model.end() && it->is_string() && !it->get<std::string>().empty())
      return unimplemented("tokenizer.json BPE {} is not supported", key);
  }
  Vocab v;
  StringIdMap model_text;
  PAGODA_RETURN_IF_ERROR(read_vocab(model.value("vocab", json::object()), &v, &model_text));
  std::vector<BpeMerge> merges;
  PAGODA_RETURN_IF_ERROR(read_merges(model.value("merges", json::array()), model_text, &merges));
  BpeOptions bo;
  bo.byte_fallback = model.value("byte_fallback", false);
  bo.fuse_unk = model.value("fuse_unk", false);
  bo.ignore_merges = model.value("ignore_merges", false);
  if (auto unk = model.find("unk_token"); unk != model.end() && unk->is_string()) bo.unk_id = find_id(model_text, unk->get<std::string>());

  for (const json& t : j.value("added_tokens", json::array())) add_added_token(d.get(), &v, t);

  PAGODA_ASSIGN_OR_RETURN(d->normalizer, build_hf_normalizer(j.value("normalizer", json())));
  bool byte_level = false, dec_byte_level = false, dec_byte_fallback = false;
  PAGODA_RETURN_IF_ERROR(build_hf_pre_tokenizer(j.value("pre_tokenizer", json()), &d->pre_tokenizer, &byte_level));
  const json& dec = j.value("decoder", json());
  PAGODA_RETURN_IF_ERROR(build_hf_decoder(dec, &d->decoder, &dec_byte_level, &dec_byte_fallback));
  byte_level = byte_level || dec_byte_level;
  if (dec.is_null() && byte_level) d->decoder.per_token.push_back({DecodeStep::Kind::kByteLevel, "", ""});

  StringIdMap ids;
  for (size_t i = 0; i < v.text.size(); ++i)
    if (!v.text[i].empty()) ids.insert(v.text[i], static_cast<int32_t>(i));
  PAGODA_RETURN_IF_ERROR(read_post_processor(j.value("post_processor", json()), d.get(), ids));
  return finish_hf(std::move(d), std::move(v), std::move(model_text), merges, bo, byte_level, dec_byte_fallback, cfg);
}

Result<std::shared_ptr<const Tokenizer>> from_vocab_merges(const std::string& vocab_json, const std::string& merges_txt,
                                                           const json& cfg) {
  auto d = std::make_unique<TokenizerData>();
  d->source = "hf";
  PAGODA_ASSIGN_OR_RETURN(json vocab, parse_json(vocab_json, "vocab.json"));
  Vocab v;
  StringIdMap model_text;
  PAGODA_RETURN_IF_ERROR(read_vocab(vocab, &v, &model_text));
  std::vector<BpeMerge> merges;
  PAGODA_RETURN_IF_ERROR(read_merges_txt(merges_txt, model_text, &merges));
  // The pre-tokenizer the checkpoint's tokenizer class implies (the files transformers' slow
  // tokenizers read): Qwen2Tokenizer normalizes to NFC and splits with Qwen2's regex before the
  // byte-level mapping; every other class gets GPT-2's byte-level regex.
  const bool prefix = cfg.is_object() && cfg.value("add_prefix_space", false);
  const std::string cls = cfg.is_object() && cfg.contains("tokenizer_class") && cfg["tokenizer_class"].is_string()
                              ? cfg["tokenizer_class"].get<std::string>()
                              : std::string();
  if (cls == "Qwen2Tokenizer" || cls == "Qwen2TokenizerFast") {
    PAGODA_ASSIGN_OR_RETURN(d->normalizer, build_hf_normalizer(json{{"type", "NFC"}}));
    PAGODA_ASSIGN_OR_RETURN(auto split, make_regex_matcher(kQwen2Pattern));
    d->pre_tokenizer.add(make_split_step(std::move(split), SplitBehavior::kIsolated, false));
    d->pre_tokenizer.add(make_byte_level_step(false, false));
  } else {
    d->pre_tokenizer.add(make_byte_level_step(prefix, true));
  }
  d->decoder.per_token.push_back({DecodeStep::Kind::kByteLevel, "", ""});
  if (!cfg.is_object()) {
    // GPT-2's defaults: <|endoftext|> is BOS, EOS and a special token.
    const int32_t eot = find_id(model_text, "<|endoftext|>");
    if (eot >= 0) {
      d->bos_id = d->eos_id = eot;
      v.type[static_cast<size_t>(eot)] = TokenType::kControl;
      d->added.add(AddedToken{"<|endoftext|>", eot, true, false, false});
    }
  }
  BpeOptions bo;
  if (cfg.is_object()) {
    if (auto unk = hf_config_token(cfg, "unk_token")) bo.unk_id = find_id(model_text, *unk);
  }
  return finish_hf(std::move(d), std::move(v), std::move(model_text), merges, bo, true, false, cfg);
}

template <class F>
Result<std::shared_ptr<const Tokenizer>> guarded(F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return data_loss("malformed tokenizer file: {}", e.what());
  }
}

}  // namespace

Result<std::shared_ptr<const Tokenizer>> Tokenizer::from_hf_json(std::string_view tokenizer_json, std::string_view config_json) {
  return guarded([&]() -> Result<std::shared_ptr<const Tokenizer>> {
    PAGODA_ASSIGN_OR_RETURN(json j, parse_json(tokenizer_json, "tokenizer.json"));
    if (!j.is_object()) return data_loss("tokenizer.json is not a JSON object");
    json cfg;
    if (!config_json.empty()) {
      PAGODA_ASSIGN_OR_RETURN(cfg, parse_json(config_json, "tokenizer_config.json"));
    }
    return from_tokenizer_json(j, cfg);
  });
}

Result<std::shared_ptr<const Tokenizer>> Tokenizer::from_hf_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path root(dir);
  if (!fs::is_directory(root, ec)) return not_found("{} is not a directory", dir);
  std::string cfg_text;
  if (fs::exists(root / "tokenizer_config.json", ec)) {
    PAGODA_ASSIGN_OR_RETURN(cfg_text, read_file((root / "tokenizer_config.json").string()));
  }
  auto with_path = [&](Result<std::shared_ptr<const Tokenizer>> r) -> Result<std::shared_ptr<const Tokenizer>> {
    if (r.ok()) return r;
    return Status(r.status().code(), dir + ": " + r.status().message());
  };
  if (fs::exists(root / "tokenizer.json", ec)) {
    PAGODA_ASSIGN_OR_RETURN(std::string text, read_file((root / "tokenizer.json").string()));
    return with_path(from_hf_json(text, cfg_text));
  }
  if (fs::exists(root / "vocab.json", ec) && fs::exists(root / "merges.txt", ec)) {
    PAGODA_ASSIGN_OR_RETURN(std::string vocab, read_file((root / "vocab.json").string()));
    PAGODA_ASSIGN_OR_RETURN(std::string merges, read_file((root / "merges.txt").string()));
    return with_path(guarded([&]() -> Result<std::shared_ptr<const Tokenizer>> {
      json cfg;
      if (!cfg_text.empty()) {
        PAGODA_ASSIGN_OR_RETURN(cfg, parse_json(cfg_text, "tokenizer_config.json"));
      }
      return from_vocab_merges(vocab, merges, cfg);
    }));
  }
  return not_found("{}: no tokenizer.json, nor vocab.json + merges.txt", dir);
}

}  // namespace pagoda
