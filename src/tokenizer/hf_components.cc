#include "tokenizer/hf_components.h"

#include "tokenizer/unicode.h"

namespace pagoda {
namespace {

using nlohmann::json;

std::string type_of(const json& j) {
  if (!j.is_object()) return "";
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

bool get_bool(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

std::string get_string(const json& j, const char* key, const std::string& fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

// {"String": "..."} or {"Regex": "..."} -> matcher.
Result<std::unique_ptr<Matcher>> pattern_matcher(const json& j, const char* where) {
  auto p = j.find("pattern");
  if (p == j.end() || !p->is_object()) return invalid_argument("{}: missing pattern", where);
  if (auto s = p->find("String"); s != p->end() && s->is_string()) return make_literal_matcher(s->get<std::string>());
  if (auto r = p->find("Regex"); r != p->end() && r->is_string()) return make_regex_matcher(r->get<std::string>());
  return invalid_argument("{}: pattern is neither String nor Regex", where);
}

Result<PrependScheme> metaspace_scheme(const json& j) {
  if (auto it = j.find("prepend_scheme"); it != j.end() && it->is_string()) return parse_prepend_scheme(it->get<std::string>());
  // Files written before prepend_scheme existed use add_prefix_space.
  return get_bool(j, "add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
}

}  // namespace

Result<std::unique_ptr<Normalizer>> build_hf_normalizer(const json& j) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  const std::string t = type_of(j);
  if (t == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    auto list = j.find("normalizers");
    if (list == j.end() || !list->is_array()) return invalid_argument("normalizer Sequence without a normalizers list");
    for (const json& sub : *list) {
      PAGODA_ASSIGN_OR_RETURN(auto n, build_hf_normalizer(sub));
      if (n) steps.push_back(std::move(n));
    }
    return make_sequence_normalizer(std::move(steps));
  }
  if (t == "NFC") return make_unicode_normalizer(unicode::NormalForm::kNfc);
  if (t == "NFD") return make_unicode_normalizer(unicode::NormalForm::kNfd);
  if (t == "NFKC") return make_unicode_normalizer(unicode::NormalForm::kNfkc);
  if (t == "NFKD") return make_unicode_normalizer(unicode::NormalForm::kNfkd);
  if (t == "Lowercase") return make_lowercase_normalizer();
  if (t == "Strip") return make_strip_normalizer(get_bool(j, "strip_left", true), get_bool(j, "strip_right", true));
  if (t == "Prepend") return make_prepend_normalizer(get_string(j, "prepend", ""));
  if (t == "Replace") {
    PAGODA_ASSIGN_OR_RETURN(auto m, pattern_matcher(j, "normalizer Replace"));
    return make_replace_normalizer(std::move(m), get_string(j, "content", ""));
  }
  return unimplemented("tokenizer.json normalizer type '{}' is not supported", t);
}

Status build_hf_pre_tokenizer(const json& j, PreTokenizer* out, bool* byte_level) {
  if (j.is_null()) return Status();
  const std::string t = type_of(j);
  if (t == "Sequence") {
    auto list = j.find("pretokenizers");
    if (list == j.end() || !list->is_array()) return invalid_argument("pre_tokenizer Sequence without a pretokenizers list");
    for (const json& sub : *list) PAGODA_RETURN_IF_ERROR(build_hf_pre_tokenizer(sub, out, byte_level));
    return Status();
  }
  if (t == "ByteLevel") {
    *byte_level = true;
    out->add(make_byte_level_step(get_bool(j, "add_prefix_space", true), get_bool(j, "use_regex", true)));
    return Status();
  }
  if (t == "Split") {
    PAGODA_ASSIGN_OR_RETURN(auto m, pattern_matcher(j, "pre_tokenizer Split"));
    PAGODA_ASSIGN_OR_RETURN(SplitBehavior b, parse_split_behavior(get_string(j, "behavior", "Isolated")));
    out->add(make_split_step(std::move(m), b, get_bool(j, "invert", false)));
    return Status();
  }
  if (t == "Digits") {
    out->add(make_digits_step(get_bool(j, "individual_digits", false)));
    return Status();
  }
  if (t == "Metaspace") {
    PAGODA_ASSIGN_OR_RETURN(PrependScheme scheme, metaspace_scheme(j));
    out->add(make_metaspace_step(get_string(j, "replacement", std::string(kSpmSpace)), scheme, get_bool(j, "split", true)));
    return Status();
  }
  if (t == "Punctuation") {
    PAGODA_ASSIGN_OR_RETURN(SplitBehavior b, parse_split_behavior(get_string(j, "behavior", "Isolated")));
    out->add(make_punctuation_step(b));
    return Status();
  }
  if (t == "WhitespaceSplit") {
    out->add(make_whitespace_split_step());
    return Status();
  }
  if (t == "Whitespace") {
    PAGODA_ASSIGN_OR_RETURN(auto m, make_regex_matcher(R"(\w+|[^\w\s]+)"));
    out->add(make_split_step(std::move(m), SplitBehavior::kRemoved, true));
    return Status();
  }
  if (t == "BertPreTokenizer") {
    out->add(make_whitespace_split_step());
    out->add(make_punctuation_step(SplitBehavior::kIsolated));
    return Status();
  }
  if (t == "CharDelimiterSplit") {
    out->add(make_split_step(make_literal_matcher(get_string(j, "delimiter", " ")), SplitBehavior::kRemoved, false));
    return Status();
  }
  return unimplemented("tokenizer.json pre_tokenizer type '{}' is not supported", t);
}

namespace {
Status add_decoder(const json& j, DecoderSpec* out, bool* fused, bool* byte_level, bool* byte_fallback) {
  const std::string t = type_of(j);
  using K = DecodeStep::Kind;
  if (t == "Sequence") {
    auto list = j.find("decoders");
    if (list == j.end() || !list->is_array()) return invalid_argument("decoder Sequence without a decoders list");
    for (const json& sub : *list) PAGODA_RETURN_IF_ERROR(add_decoder(sub, out, fused, byte_level, byte_fallback));
    return Status();
  }
  if (t == "ByteLevel") {
    *byte_level = true;
    out->per_token.push_back({K::kByteLevel, "", ""});
    return Status();
  }
  if (t == "ByteFallback") {
    *byte_fallback = true;
    out->per_token.push_back({K::kByteFallback, "", ""});
    return Status();
  }
  if (t == "Fuse") {
    *fused = true;
    return Status();
  }
  if (t == "Metaspace") {
    PAGODA_ASSIGN_OR_RETURN(PrependScheme scheme, metaspace_scheme(j));
    const std::string rep = get_string(j, "replacement", std::string(kSpmSpace));
    out->per_token.push_back({K::kMetaspace, rep, " "});
    out->metaspace_first_token = scheme != PrependScheme::kNever;
    out->metaspace_replacement = rep;
    return Status();
  }
  if (t == "Replace") {
    auto p = j.find("pattern");
    if (p == j.end() || !p->is_object() || !p->contains("String") || !(*p)["String"].is_string())
      return unimplemented("tokenizer.json decoder Replace with a non-String pattern is not supported");
    const std::string from = (*p)["String"].get<std::string>();
    // After Fuse a replacement applies to the whole text; per token is the same when the pattern
    // is one character (it cannot straddle two tokens).
    if (*fused && unicode::decode_utf8(from).len != from.size())
      return unimplemented("tokenizer.json decoder Replace of a multi-character pattern after Fuse");
    out->per_token.push_back({K::kReplace, from, get_string(j, "content", "")});
    return Status();
  }
  if (t == "Strip") {
    const std::string content = get_string(j, "content", " ");
    const int start = j.value("start", 0), stop = j.value("stop", 0);
    if (*fused) {
      if (content != " " || stop != 0)
        return unimplemented("tokenizer.json decoder Strip after Fuse other than leading spaces");
      out->strip_leading_spaces = start;
    } else {
      DecodeStep s{K::kStrip, content, ""};
      s.start = start;
      s.stop = stop;
      out->per_token.push_back(s);
    }
    return Status();
  }
  return unimplemented("tokenizer.json decoder type '{}' is not supported", t);
}
}  // namespace

Status build_hf_decoder(const json& j, DecoderSpec* out, bool* byte_level, bool* byte_fallback) {
  if (j.is_null()) return Status();
  bool fused = false;
  return add_decoder(j, out, &fused, byte_level, byte_fallback);
}

}  // namespace pagoda
