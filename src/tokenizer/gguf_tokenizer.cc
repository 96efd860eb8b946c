// Tokenizer::from_gguf: the tokenizer.ggml.* metadata of a GGUF file.
//
//   tokenizer.ggml.model   "llama" (SentencePiece BPE with scores) or "gpt2" (byte-level BPE)
//   tokenizer.ggml.pre     the pre-tokenizer family of byte-level vocabularies (table below)
//   tokenizer.ggml.tokens / .scores / .token_type / .merges
//   tokenizer.ggml.{bos,eos,eot,eom,unknown,padding}_token_id, .add_bos_token, .add_eos_token,
//   tokenizer.ggml.fim_{pre,suf,mid}_token_id (older files: {prefix,suffix,middle}_token_id),
//   .add_space_prefix
//
// Each `pre` family is built as the pre_tokenizer of the Hugging Face tokenizer.json it was
// converted from (the reference the vocab vectors come from), through the same Split/Digits steps a
// tokenizer.json would give, so GGUF and HF files share one code path. Families and defaults follow
// llama.cpp's naming (add_bos for the Llama 3 group, ignore_merges for Llama 3 and Tekken). A
// missing `pre` (old conversions, e.g. GPT-NeoX) means GPT-2's ByteLevel regex, which is what those
// models' tokenizer.json use; an unknown `pre` name is refused rather than guessed.
#include <fmt/format.h>

#include <cmath>

#include "loader/gguf.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_data.h"

namespace pagoda {
namespace {

Status add_split(PreTokenizer* p, std::string_view pattern) {
  PAGODA_ASSIGN_OR_RETURN(auto m, make_regex_matcher(pattern));
  p->add(make_split_step(std::move(m), SplitBehavior::kIsolated, false));
  return Status();
}

struct PreFamily {
  bool ignore_merges = false;
  bool add_bos = false;
};

// Fills *p with the pre-tokenizer of GGUF family `pre`.
Result<PreFamily> build_gguf_pre_tokenizer(std::string_view pre, PreTokenizer* p) {
  auto is = [&](std::initializer_list<std::string_view> names) {
    for (auto n : names)
      if (pre == n) return true;
    return false;
  };
  PreFamily f;
  if (pre.empty() || is({"default", "gpt-2", "gpt2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
                         "a.x-4.0", "mellum", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais",
                         "trillion", "granite-docling", "exaone4"})) {
    p->add(make_byte_level_step(false, true));
  } else if (is({"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"})) {
    p->add(make_digits_step(true));
    p->add(make_byte_level_step(false, true));
  } else if (is({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"})) {
    PAGODA_RETURN_IF_ERROR(add_split(p, kLlama3Pattern));
    f.ignore_merges = true;
    f.add_bos = true;
  } else if (is({"dbrx", "smaug-bpe", "chatglm-bpe", "glm4"})) {
    PAGODA_RETURN_IF_ERROR(add_split(p, kLlama3Pattern));
  } else if (is({"qwen2", "deepseek-r1-qwen", "kormo", "megrez", "stablelm2", "hunyuan", "grok-2"})) {
    PAGODA_RETURN_IF_ERROR(add_split(p, kQwen2Pattern));
  } else if (pre == "deepseek-coder") {
    for (std::string_view pat : {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", "[一-龥ࠀ-一가-퟿]+"})
      PAGODA_RETURN_IF_ERROR(add_split(p, pat));
    p->add(make_digits_step(true));
  } else if (pre == "deepseek-llm") {
    for (std::string_view pat : {
             R"([\r\n])",
             R"(\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-)" "\u1F7D" R"(ᾀ-ᾴᾶ-ᾼ)" "\u1FBE" R"(ῂ-ῄῆ-ῌῐ-)" "\u1FD3" R"(ῖ-)" "\u1FDB" R"(ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ)" "\u2126" R"(ℨ)" "\u212A" R"(-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+)",
             R"(\s?[!-/:-~！-／：-～‘-‟　-。]+)",
             R"(\s+$)",
             "[一-龥ࠀ-一가-퟿]+",
         })
      PAGODA_RETURN_IF_ERROR(add_split(p, pat));
    p->add(make_digits_step(true));
  } else if (is({"deepseek-v3", "hunyuan-dense"})) {
    PAGODA_RETURN_IF_ERROR(add_split(p, R"(\p{N}{1,3})"));
    PAGODA_RETURN_IF_ERROR(add_split(p, "[一-龥぀-ゟ゠-ヿ]+"));
    PAGODA_RETURN_IF_ERROR(add_split(
        p, R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"));
  } else if (pre == "falcon") {
    PAGODA_RETURN_IF_ERROR(add_split(p, R"([\p{P}\$\+<=>\^~\|`]+)"));
    p->add(make_byte_level_step(false, true));
    PAGODA_RETURN_IF_ERROR(add_split(p, "[0-9][0-9][0-9]"));
  } else if (is({"gpt-4o", "llama4", "minimax-m2"})) {
    PAGODA_RETURN_IF_ERROR(add_split(
        p, R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"));
  } else if (pre == "tekken") {
    PAGODA_RETURN_IF_ERROR(add_split(
        p, R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"));
    f.ignore_merges = true;
    f.add_bos = true;
  } else if (pre == "seed-coder") {
    PAGODA_RETURN_IF_ERROR(add_split(
        p, R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)"));
  } else if (is({"bailingmoe", "bailingmoe2", "llada-moe"})) {
    PAGODA_RETURN_IF_ERROR(add_split(
        p, R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)"));
  } else if (is({"bloom", "poro-chat", "gpt3-finnish"})) {
    PAGODA_RETURN_IF_ERROR(add_split(p, R"( ?[^(\s|.,!?…。，、।۔،)]+)"));
  } else if (pre == "viking") {
    PAGODA_RETURN_IF_ERROR(add_split(p, R"( ?[^(\s|.,!?…。，、।۔،)]+)"));
    p->add(make_digits_step(true));
  } else {
    return unimplemented("tokenizer.ggml.pre '{}' is not a supported pre-tokenizer family", pre);
  }
  return f;
}

TokenType token_type_from_gguf(int64_t t) {
  if (t >= 0 && t <= 6) return static_cast<TokenType>(t);
  return TokenType::kUndefined;
}

}  // namespace

Result<std::shared_ptr<const Tokenizer>> Tokenizer::from_gguf(const GgufFile& g) {
  const std::string where = g.path().empty() ? "GGUF" : fmt::format("GGUF {}", g.path());
  // "has type X, expected Y" for a key that is present with the wrong type (not "missing").
  auto type_of = [&g](const char* key) -> std::string {
    const GgufValue* v = g.find(key);
    if (v == nullptr) return "missing";
    if (const GgufArray* a = v->as_array()) return fmt::format("has type array of {}", gguf_type_name(a->elem_type));
    return fmt::format("has type {}", gguf_type_name(v->type));
  };
  const auto model = g.get_string("tokenizer.ggml.model");
  if (!model) {
    if (g.find("tokenizer.ggml.model"))
      return data_loss("{}: tokenizer.ggml.model {}, expected a string", where, type_of("tokenizer.ggml.model"));
    return not_found("{}: no tokenizer.ggml.model (the file holds no tokenizer)", where);
  }
  const GgufArray* tokens = g.get_array("tokenizer.ggml.tokens");
  if (!tokens || tokens->elem_type != GgufType::kString || tokens->strings.empty())
    return data_loss("{}: tokenizer.ggml.tokens {}, expected a non-empty array of strings", where,
                     tokens && tokens->elem_type == GgufType::kString ? "is empty" : type_of("tokenizer.ggml.tokens"));
  const size_t n = tokens->strings.size();

  auto d = std::make_unique<TokenizerData>();
  d->source = "gguf";
  d->token_text = tokens->strings;
  d->token_type.assign(n, TokenType::kNormal);
  if (const GgufArray* types = g.get_array("tokenizer.ggml.token_type")) {
    if (types->ints.size() != n) return data_loss("{}: tokenizer.ggml.token_type has {} entries for {} tokens", where, types->size(), n);
    for (size_t i = 0; i < n; ++i) d->token_type[i] = token_type_from_gguf(types->ints[i]);
  }
  std::vector<float> scores;
  if (const GgufArray* s = g.get_array("tokenizer.ggml.scores")) {
    if (s->floats.size() != n) return data_loss("{}: tokenizer.ggml.scores has {} entries for {} tokens", where, s->size(), n);
    scores.assign(s->floats.begin(), s->floats.end());
    for (size_t i = 0; i < n; ++i)
      if (std::isnan(scores[i])) return data_loss("{}: tokenizer.ggml.scores[{}] is NaN", where, i);
  }
  auto id_key = [&](const char* key, int32_t fallback) -> int32_t {
    auto v = g.get_int(key);
    if (!v) return fallback;
    return *v >= 0 && static_cast<uint64_t>(*v) < n ? static_cast<int32_t>(*v) : -1;
  };
  d->eot_id = id_key("tokenizer.ggml.eot_token_id", -1);
  d->eom_id = id_key("tokenizer.ggml.eom_token_id", -1);
  d->pad_id = id_key("tokenizer.ggml.padding_token_id", -1);
  // FIM markers: today's keys, else the names llama.cpp wrote before them.
  auto either = [&](const char* key, const char* older) { return g.get_int(key) ? id_key(key, -1) : id_key(older, -1); };
  d->fim_prefix_id = either("tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id");
  d->fim_suffix_id = either("tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id");
  d->fim_middle_id = either("tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id");

  if (*model == "llama" && !g.get_array("tokenizer.ggml.token_type")) {
    // No types: infer the ones the model and decoder rely on, as SentencePiece would have them.
    for (size_t i = 0; i < n; ++i)
      if (byte_piece_value(d->token_text[i]) >= 0) d->token_type[i] = TokenType::kByte;
    for (int32_t id : {id_key("tokenizer.ggml.bos_token_id", 1), id_key("tokenizer.ggml.eos_token_id", 2)})
      if (id >= 0) d->token_type[static_cast<size_t>(id)] = TokenType::kControl;
    if (int32_t unk = id_key("tokenizer.ggml.unknown_token_id", 0); unk >= 0) d->token_type[static_cast<size_t>(unk)] = TokenType::kUnknown;
  }
  const std::string arch = g.get_string("general.architecture").value_or("");
  for (size_t i = 0; i < n; ++i) {
    const TokenType t = d->token_type[i];
    if (t != TokenType::kControl && t != TokenType::kUserDefined && t != TokenType::kUnknown) continue;
    AddedToken a;
    a.content = d->token_text[i];
    a.id = static_cast<int32_t>(i);
    a.special = t != TokenType::kUserDefined;
    // Phi-3's tokenizer.json gives its chat tokens rstrip (llama.cpp applies the same rule).
    if (arch == "phi3") a.rstrip = a.content != "<unk>" && a.content != "<s>" && a.content != "<|endoftext|>";
    d->added.add(std::move(a));
  }

  if (*model == "llama") {
    d->kind = TokenizerKind::kSentencePiece;
    d->bos_id = id_key("tokenizer.ggml.bos_token_id", 1);
    d->eos_id = id_key("tokenizer.ggml.eos_token_id", 2);
    d->unk_id = id_key("tokenizer.ggml.unknown_token_id", 0);
    d->add_bos = g.get_bool("tokenizer.ggml.add_bos_token").value_or(true);
    d->add_eos = g.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
    const bool add_space_prefix = g.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    SpmNormalizerOptions no;
    no.add_dummy_prefix = add_space_prefix;
    d->normalizer = make_spm_normalizer(no);
    SpmOptions so;
    so.byte_fallback = true;
    so.unk_id = d->unk_id;
    d->spm = std::make_unique<SpmModel>(d->token_text, scores, d->token_type, so);
    d->decoder.per_token = {{DecodeStep::Kind::kReplace, std::string(kSpmSpace), " "}, {DecodeStep::Kind::kByteFallback, "", ""}};
    d->decoder.strip_leading_spaces = add_space_prefix ? 1 : 0;
    return make_tokenizer(std::move(d));
  }

  if (*model != "gpt2")
    return unimplemented("{}: tokenizer.ggml.model '{}' is not supported (supported: llama, gpt2)", where, *model);

  d->kind = TokenizerKind::kByteLevelBpe;
  d->bos_id = id_key("tokenizer.ggml.bos_token_id", -1);
  d->eos_id = id_key("tokenizer.ggml.eos_token_id", -1);
  d->unk_id = id_key("tokenizer.ggml.unknown_token_id", -1);
  const std::string pre = g.get_string("tokenizer.ggml.pre").value_or("");
  PAGODA_ASSIGN_OR_RETURN(PreFamily family, build_gguf_pre_tokenizer(pre, &d->pre_tokenizer));
  d->add_bos = g.get_bool("tokenizer.ggml.add_bos_token").value_or(family.add_bos);
  d->add_eos = g.get_bool("tokenizer.ggml.add_eos_token").value_or(false);

  const GgufArray* merges = g.get_array("tokenizer.ggml.merges");
  if (!merges || merges->elem_type != GgufType::kString)
    return data_loss("{}: tokenizer.ggml.merges {}, expected an array of strings", where, type_of("tokenizer.ggml.merges"));

  StringIdMap& source_ids = d->text_to_id;  // vocabulary text -> id (first wins), kept by make_tokenizer
  source_ids.reserve(n);
  for (size_t i = 0; i < n; ++i)
    if (!d->token_text[i].empty()) source_ids.insert(d->token_text[i], static_cast<int32_t>(i));
  StringIdMap model_vocab;  // raw bytes -> id, for the tokens BPE can produce
  model_vocab.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const TokenType t = d->token_type[i];
    if (t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown) continue;
    if (auto bytes = byte_level::text_to_bytes(d->token_text[i])) model_vocab.insert(*bytes, static_cast<int32_t>(i));
  }
  std::vector<BpeMerge> bpe_merges;
  bpe_merges.reserve(merges->strings.size());
  std::string joined;
  for (const std::string& m : merges->strings) {
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) continue;
    const int32_t a = find_id(source_ids, std::string_view(m).substr(0, sp));
    const int32_t b = find_id(source_ids, std::string_view(m).substr(sp + 1));
    joined.assign(m, 0, sp);
    joined.append(m, sp + 1, std::string::npos);
    const int32_t c = find_id(source_ids, joined);
    if (a < 0 || b < 0 || c < 0) continue;  // a merge whose tokens are not in the vocabulary cannot fire
    bpe_merges.push_back({a, b, c});
  }
  if (bpe_merges.empty() && !merges->strings.empty())
    return data_loss("{}: none of the {} merges refers to vocabulary tokens", where, merges->strings.size());
  BpeOptions bo;
  bo.byte_level = true;
  bo.ignore_merges = family.ignore_merges;
  bo.unk_id = d->unk_id;
  d->bpe = std::make_unique<BpeModel>(std::move(model_vocab), bpe_merges, bo);
  d->decoder.per_token = {{DecodeStep::Kind::kByteLevel, "", ""}};
  return make_tokenizer(std::move(d));
}

}  // namespace pagoda
