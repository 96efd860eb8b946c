#include "tokenizer/normalizer.h"

#include <fmt/format.h>

namespace pagoda {
namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::NormalForm f) : form_(f) {}
  void normalize(std::string_view in, bool, std::string* out) const override { *out = unicode::normalize(in, form_); }
  std::string describe() const override {
    switch (form_) {
      case unicode::NormalForm::kNfc: return "NFC";
      case unicode::NormalForm::kNfd: return "NFD";
      case unicode::NormalForm::kNfkc: return "NFKC";
      case unicode::NormalForm::kNfkd: return "NFKD";
    }
    return "?";
  }

 private:
  unicode::NormalForm form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  void normalize(std::string_view in, bool, std::string* out) const override { *out = unicode::to_lower(in); }
  std::string describe() const override { return "Lowercase"; }
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string_view in, bool, std::string* out) const override {
    size_t b = 0, e = in.size();
    if (left_) {
      while (b < e) {
        unicode::Unit u = unicode::unit_at(in, b);
        if (!(u.flags & unicode::kSpace)) break;
        b += u.len;
      }
    }
    if (right_) {
      // Walk forward to find the end of the last non-space unit.
      size_t i = b, last_end = b;
      while (i < e) {
        unicode::Unit u = unicode::unit_at(in, i);
        i += u.len;
        if (!(u.flags & unicode::kSpace)) last_end = i;
      }
      e = last_end;
    }
    out->assign(in.substr(b, e - b));
  }
  std::string describe() const override { return fmt::format("Strip[{}{}]", left_ ? "L" : "", right_ ? "R" : ""); }

 private:
  bool left_, right_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string p) : prefix_(std::move(p)) {}
  void normalize(std::string_view in, bool, std::string* out) const override {
    out->clear();
    if (in.empty()) return;
    out->reserve(prefix_.size() + in.size());
    out->append(prefix_);
    out->append(in);
  }
  std::string describe() const override { return "Prepend"; }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Matcher> m, std::string content) : matcher_(std::move(m)), content_(std::move(content)) {}
  void normalize(std::string_view in, bool, std::string* out) const override {
    out->clear();
    out->reserve(in.size());
    size_t prev = 0;
    matcher_->find_all(in, [&](size_t b, size_t e) {
      out->append(in.substr(prev, b - prev));
      out->append(content_);
      prev = e;
    });
    out->append(in.substr(prev));
  }
  std::string describe() const override { return fmt::format("Replace[{}]", matcher_->engine()); }

 private:
  std::unique_ptr<Matcher> matcher_;
  std::string content_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::string_view in, bool at_start, std::string* out) const override {
    std::string cur(in), next;
    for (const auto& s : steps_) {
      s->normalize(cur, at_start, &next);
      cur.swap(next);
    }
    *out = std::move(cur);
  }
  std::string describe() const override {
    std::string d;
    for (const auto& s : steps_) d += (d.empty() ? "" : " > ") + s->describe();
    return d;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

// SentencePiece's Normalizer::Normalize for an identity character map.
class SpmNormalizer final : public Normalizer {
 public:
  explicit SpmNormalizer(const SpmNormalizerOptions& o) : o_(o) {}
  void normalize(std::string_view in, bool, std::string* out) const override {
    out->clear();
    if (in.empty()) return;
    const std::string_view space = o_.escape_whitespaces ? kSpmSpace : std::string_view(" ");
    size_t i = 0;
    if (o_.remove_extra_whitespaces) {
      while (i < in.size() && in[i] == ' ') ++i;
      if (i == in.size()) return;
    }
    out->reserve((in.size() - i) * 3 / 2 + 3);
    if (o_.add_dummy_prefix) out->append(space);
    bool prev_space = o_.remove_extra_whitespaces;
    while (i < in.size()) {
      const char c = in[i];
      if (c == ' ') {
        if (!prev_space) out->append(space);
        prev_space = o_.remove_extra_whitespaces;
        ++i;
        continue;
      }
      prev_space = false;
      if (static_cast<uint8_t>(c) < 0x80) {
        out->push_back(c);
        ++i;
        continue;
      }
      unicode::Utf8Char u = unicode::decode_utf8(in.substr(i));
      if (u.valid) {
        out->append(in.substr(i, u.len));
        i += u.len;
      } else if (o_.replace_malformed) {
        out->append("\xEF\xBF\xBD");
        ++i;
      } else {
        out->push_back(c);
        ++i;
      }
    }
    if (o_.remove_extra_whitespaces) {
      while (out->size() >= space.size() && std::string_view(*out).substr(out->size() - space.size()) == space)
        out->resize(out->size() - space.size());
    }
  }
  std::string describe() const override {
    return fmt::format("SentencePiece[{}{}{}]", o_.add_dummy_prefix ? "prefix" : "no-prefix",
                       o_.remove_extra_whitespaces ? ",remove-extra-ws" : "", o_.replace_malformed ? ",fffd" : "");
  }

 private:
  SpmNormalizerOptions o_;
};

}  // namespace

std::unique_ptr<Normalizer> make_unicode_normalizer(unicode::NormalForm form) { return std::make_unique<UnicodeNormalizer>(form); }
std::unique_ptr<Normalizer> make_lowercase_normalizer() { return std::make_unique<LowercaseNormalizer>(); }
std::unique_ptr<Normalizer> make_strip_normalizer(bool left, bool right) { return std::make_unique<StripNormalizer>(left, right); }
std::unique_ptr<Normalizer> make_prepend_normalizer(std::string prefix) { return std::make_unique<PrependNormalizer>(std::move(prefix)); }
std::unique_ptr<Normalizer> make_replace_normalizer(std::unique_ptr<Matcher> matcher, std::string content) {
  return std::make_unique<ReplaceNormalizer>(std::move(matcher), std::move(content));
}
std::unique_ptr<Normalizer> make_sequence_normalizer(std::vector<std::unique_ptr<Normalizer>> steps) {
  return std::make_unique<SequenceNormalizer>(std::move(steps));
}
std::unique_ptr<Normalizer> make_spm_normalizer(const SpmNormalizerOptions& options) {
  return std::make_unique<SpmNormalizer>(options);
}

}  // namespace pagoda
