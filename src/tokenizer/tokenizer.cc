// Tokenizer core: assembly from loader output, encode, decode, accessors, load() dispatch.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "loader/gguf.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_data.h"
#include "tokenizer/unicode.h"

namespace pagoda {
namespace {

// End-of-turn / end-of-generation token texts (llama.cpp's list of conventions).
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "<｜end▁of▁sentence｜>", "<end_of_utterance>",
};
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>", "<｜end▁of▁sentence｜>", "<end_of_utterance>", "<|return|>", "<|call|>",
};

void replace_all(std::string* s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0, prev = 0;
  while ((pos = s->find(from, prev)) != std::string::npos) {
    out.append(*s, prev, pos - prev);
    out.append(to);
    prev = pos + from.size();
  }
  if (prev == 0) return;
  out.append(*s, prev, std::string::npos);
  *s = std::move(out);
}

// Strips up to `start` leading and `stop` trailing code points equal to `c` (HF Strip).
void strip_chars(std::string* s, std::string_view c, int start, int stop) {
  if (c.empty()) return;
  size_t b = 0;
  for (int k = 0; k < start && s->compare(b, c.size(), c) == 0; ++k) b += c.size();
  size_t e = s->size();
  for (int k = 0; k < stop && e >= b + c.size() && s->compare(e - c.size(), c.size(), c) == 0; ++k) e -= c.size();
  *s = s->substr(b, e - b);
}

std::string decode_token(const TokenizerData& d, int32_t id, bool first) {
  std::string s = d.token_text[static_cast<size_t>(id)];
  const TokenType t = d.token_type[static_cast<size_t>(id)];
  const bool literal = t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
  for (const DecodeStep& step : d.decoder.per_token) {
    switch (step.kind) {
      case DecodeStep::Kind::kReplace:
        replace_all(&s, step.from, step.to);
        break;
      case DecodeStep::Kind::kByteFallback:
        if (t == TokenType::kByte) {
          const int b = byte_piece_value(s);
          if (b >= 0) s.assign(1, static_cast<char>(b));
        }
        break;
      case DecodeStep::Kind::kByteLevel:
        if (!literal) {
          if (auto bytes = byte_level::text_to_bytes(s)) s = std::move(*bytes);
        }
        break;
      case DecodeStep::Kind::kMetaspace:
        replace_all(&s, step.from, first && d.decoder.metaspace_first_token ? "" : " ");
        break;
      case DecodeStep::Kind::kStrip:
        strip_chars(&s, step.from, step.start, step.stop);
        break;
    }
  }
  return s;
}

int32_t valid_id_or_none(int32_t id, size_t n) { return id >= 0 && static_cast<size_t>(id) < n ? id : -1; }

}  // namespace

Result<std::shared_ptr<const Tokenizer>> make_tokenizer(std::unique_ptr<TokenizerData> d) {
  const size_t n = d->token_text.size();
  if (n == 0) return invalid_argument("tokenizer: empty vocabulary");
  if (n > static_cast<size_t>(INT32_MAX)) return invalid_argument("tokenizer: vocabulary too large ({})", n);
  if ((d->bpe == nullptr) == (d->spm == nullptr)) return make_status(StatusCode::kInternal, "tokenizer: no model");
  d->token_type.resize(n, TokenType::kNormal);
  d->added.finish();
  for (int32_t* id : {&d->bos_id, &d->eos_id, &d->eot_id, &d->eom_id, &d->unk_id, &d->pad_id}) *id = valid_id_or_none(*id, n);

  if (d->text_to_id.size() == 0) {
    d->text_to_id.reserve(n);
    for (size_t i = 0; i < n; ++i)
      if (!d->token_text[i].empty()) d->text_to_id.insert(d->token_text[i], static_cast<int32_t>(i));
  }

  if (d->eot_id < 0) {
    for (std::string_view t : kEotTexts) {
      const int32_t id = find_id(d->text_to_id, t);
      if (id >= 0 && d->token_type[static_cast<size_t>(id)] == TokenType::kControl) {
        d->eot_id = id;
        break;
      }
    }
  }
  if (d->eom_id < 0) {
    const int32_t id = find_id(d->text_to_id, "<|eom_id|>");
    if (id >= 0 && d->token_type[static_cast<size_t>(id)] == TokenType::kControl) d->eom_id = id;
  }
  for (int32_t id : {d->eos_id, d->eot_id, d->eom_id})
    if (id >= 0) d->stop_ids.push_back(id);
  for (std::string_view t : kEogTexts) {
    const int32_t id = find_id(d->text_to_id, t);
    if (id >= 0 && d->token_type[static_cast<size_t>(id)] == TokenType::kControl) d->stop_ids.push_back(id);
  }
  std::sort(d->stop_ids.begin(), d->stop_ids.end());
  d->stop_ids.erase(std::unique(d->stop_ids.begin(), d->stop_ids.end()), d->stop_ids.end());

  d->token_bytes.resize(n);
  for (size_t i = 0; i < n; ++i) d->token_bytes[i] = decode_token(*d, static_cast<int32_t>(i), false);
  if (d->decoder.metaspace_first_token) {
    d->token_bytes_first.resize(n);
    for (size_t i = 0; i < n; ++i) d->token_bytes_first[i] = decode_token(*d, static_cast<int32_t>(i), true);
  }
  return std::shared_ptr<const Tokenizer>(new Tokenizer(std::move(d)));
}

Tokenizer::Tokenizer(std::unique_ptr<TokenizerData> data) : d_(std::move(data)) {}
Tokenizer::~Tokenizer() = default;

namespace {

// Per-call encoding state. The word cache (byte-level BPE on long inputs) maps a piece to the
// ids it produced, stored in one flat vector.
struct EncodeState {
  BpeScratch bpe;
  SpmScratch spm;
  std::string normalized;
  std::vector<TextSegment> segments;
  bool use_cache = false;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>> cache;
  std::vector<int32_t> cache_ids;
};

constexpr size_t kCacheMinText = 2048;  // bytes of input before the word cache pays off
constexpr size_t kCacheMaxPiece = 64;   // longer pieces are rare and not cached

}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_append(text, options, &out);
  return out;
}

void Tokenizer::encode_append(std::string_view text, const EncodeOptions& options, std::vector<int32_t>* out) const {
  const TokenizerData& d = *d_;
  if (options.add_special && d.add_bos && d.bos_id >= 0) out->push_back(d.bos_id);
  EncodeState st;
  st.use_cache = d.bpe != nullptr && !d.pre_tokenizer.empty() && text.size() >= kCacheMinText;
  st.spm.use_cache = d.spm != nullptr && text.size() >= kCacheMinText;

  auto encode_piece = [&](std::string_view piece, bool) {
    if (!st.use_cache || piece.size() > kCacheMaxPiece) {
      d.bpe->encode(piece, out, &st.bpe);
      return;
    }
    auto it = st.cache.find(piece);
    if (it != st.cache.end()) {
      out->insert(out->end(), st.cache_ids.begin() + it->second.first,
                  st.cache_ids.begin() + it->second.first + it->second.second);
      return;
    }
    const size_t before = out->size();
    d.bpe->encode(piece, out, &st.bpe);
    const uint32_t offset = static_cast<uint32_t>(st.cache_ids.size());
    st.cache_ids.insert(st.cache_ids.end(), out->begin() + static_cast<ptrdiff_t>(before), out->end());
    st.cache.emplace(std::string(piece), std::make_pair(offset, static_cast<uint32_t>(out->size() - before)));
  };

  auto encode_text = [&](std::string_view segment, bool at_start) {
    std::string_view t = segment;
    if (d.normalizer) {
      d.normalizer->normalize(segment, at_start, &st.normalized);
      t = st.normalized;
    }
    if (d.spm) {
      d.spm->encode(t, out, &st.spm);
    } else if (d.pre_tokenizer.empty()) {
      if (!t.empty()) encode_piece(t, at_start);
    } else {
      d.pre_tokenizer.run(t, at_start, encode_piece);
    }
  };

  if (d.added.empty()) {
    if (!text.empty()) encode_text(text, true);
  } else {
    d.added.split(text, options.parse_special, &st.segments);
    for (const TextSegment& seg : st.segments) {
      if (seg.id >= 0) {
        out->push_back(seg.id);
      } else {
        encode_text(text.substr(seg.begin, seg.end - seg.begin), seg.begin == 0);
      }
    }
  }
  if (options.add_special && d.add_eos && d.eos_id >= 0) out->push_back(d.eos_id);
}

void Tokenizer::append_token_bytes(int32_t id, bool first, std::string* out) const {
  const size_t i = static_cast<size_t>(id);
  if (first && d_->decoder.metaspace_first_token) {
    out->append(d_->token_bytes_first[i]);
  } else {
    out->append(d_->token_bytes[i]);
  }
}

int Tokenizer::strip_leading_spaces() const { return d_->decoder.strip_leading_spaces; }

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  bool first = true;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special && is_special(id)) continue;
    append_token_bytes(id, first, &bytes);
    first = false;
  }
  size_t strip = 0;
  while (strip < bytes.size() && static_cast<int>(strip) < d_->decoder.strip_leading_spaces && bytes[strip] == ' ') ++strip;
  return unicode::to_valid_utf8(std::string_view(bytes).substr(strip));
}

std::string_view Tokenizer::token_text(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return d_->token_text[static_cast<size_t>(id)];
}

std::string Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return d_->token_bytes[static_cast<size_t>(id)];
}

std::optional<int32_t> Tokenizer::token_id(std::string_view text) const {
  const int32_t id = find_id(d_->text_to_id, text);
  if (id < 0) return std::nullopt;
  return id;
}

int32_t Tokenizer::bos_id() const { return d_->bos_id; }
int32_t Tokenizer::eos_id() const { return d_->eos_id; }
int32_t Tokenizer::eot_id() const { return d_->eot_id; }
int32_t Tokenizer::eom_id() const { return d_->eom_id; }
int32_t Tokenizer::unk_id() const { return d_->unk_id; }
int32_t Tokenizer::pad_id() const { return d_->pad_id; }
int32_t Tokenizer::fim_prefix_id() const { return d_->fim_prefix_id; }
int32_t Tokenizer::fim_suffix_id() const { return d_->fim_suffix_id; }
int32_t Tokenizer::fim_middle_id() const { return d_->fim_middle_id; }
std::vector<int32_t> Tokenizer::stop_ids() const { return d_->stop_ids; }
bool Tokenizer::add_bos() const { return d_->add_bos && d_->bos_id >= 0; }
bool Tokenizer::add_eos() const { return d_->add_eos && d_->eos_id >= 0; }
int64_t Tokenizer::vocab_size() const { return static_cast<int64_t>(d_->token_text.size()); }
TokenizerKind Tokenizer::kind() const { return d_->kind; }

std::string Tokenizer::kind_name() const {
  return d_->kind == TokenizerKind::kSentencePiece ? "sentencepiece-bpe" : "byte-level-bpe";
}

bool Tokenizer::is_special(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return false;
  const TokenType t = d_->token_type[static_cast<size_t>(id)];
  return t == TokenType::kControl || t == TokenType::kUnknown;
}

std::string Tokenizer::describe() const {
  const TokenizerData& d = *d_;
  std::string model;
  if (d.spm) {
    model = "SentencePieceBPE(scores)";
  } else {
    const BpeOptions& o = d.bpe->options();
    model = fmt::format("BPE({}, {} merges{}{})", o.byte_level ? "byte-level" : "characters", d.bpe->num_merges(),
                        o.byte_fallback ? ", byte-fallback" : "", o.ignore_merges ? ", ignore-merges" : "");
  }
  return fmt::format("{} tokenizer from {}: vocab {}, {} added tokens, normalizer {}, pre-tokenizer {}, model {}, bos {} eos {} add_bos {}",
                     kind_name(), d.source, d.token_text.size(), d.added.tokens().size(),
                     d.normalizer ? d.normalizer->describe() : "none", d.pre_tokenizer.describe(), model, d.bos_id,
                     d.eos_id, add_bos());
}

Result<std::shared_ptr<const Tokenizer>> Tokenizer::load(const std::string& model_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path path(model_path);
  if (fs::is_directory(path, ec)) return from_hf_dir(model_path);
  if (!fs::exists(path, ec)) return not_found("tokenizer: no such file or directory: {}", model_path);
  if (path.filename() == "tokenizer.json" || path.filename() == "vocab.json")
    return from_hf_dir(path.has_parent_path() ? path.parent_path().string() : std::string("."));
  char magic[4] = {};
  {
    std::ifstream f(path, std::ios::binary);
    if (!f) return io_error("tokenizer: cannot open {}", model_path);
    f.read(magic, 4);
  }
  if (std::string_view(magic, 4) == "GGUF") {
    PAGODA_ASSIGN_OR_RETURN(auto gguf, GgufFile::open(model_path));
    return from_gguf(*gguf);
  }
  return from_sentencepiece_model(model_path);
}

}  // namespace pagoda
