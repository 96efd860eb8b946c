#include "tokenizer/pre_tokenizer.h"

#include <fmt/format.h>

#include "tokenizer/unicode.h"

namespace pagoda {

Result<SplitBehavior> parse_split_behavior(std::string_view name) {
  std::string n;
  for (char c : name)
    if (c != '_') n.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (n == "isolated") return SplitBehavior::kIsolated;
  if (n == "removed") return SplitBehavior::kRemoved;
  if (n == "mergedwithprevious") return SplitBehavior::kMergedWithPrevious;
  if (n == "mergedwithnext") return SplitBehavior::kMergedWithNext;
  if (n == "contiguous") return SplitBehavior::kContiguous;
  return invalid_argument("unknown split behavior '{}'", name);
}

Result<PrependScheme> parse_prepend_scheme(std::string_view name) {
  if (name == "always") return PrependScheme::kAlways;
  if (name == "first") return PrependScheme::kFirst;
  if (name == "never") return PrependScheme::kNever;
  return invalid_argument("unknown prepend_scheme '{}'", name);
}

namespace {

const char* behavior_name(SplitBehavior b) {
  switch (b) {
    case SplitBehavior::kIsolated: return "isolated";
    case SplitBehavior::kRemoved: return "removed";
    case SplitBehavior::kMergedWithPrevious: return "merged_with_previous";
    case SplitBehavior::kMergedWithNext: return "merged_with_next";
    case SplitBehavior::kContiguous: return "contiguous";
  }
  return "?";
}

struct Span {
  size_t begin;
  size_t end;
  bool is_match;
};

// Splits `piece` at the matches of `matcher` and emits the resulting pieces per `behavior`
// (HF NormalizedString::split). Isolated without inversion streams; the others collect the
// match/gap spans first.
void split_by_matches(const Matcher& matcher, SplitBehavior behavior, bool invert, std::string_view piece,
                      bool at_start, PieceSink emit) {
  auto out = [&](size_t b, size_t e) {
    if (e > b) emit(piece.substr(b, e - b), at_start && b == 0);
  };
  if (behavior == SplitBehavior::kIsolated && !invert) {
    size_t prev = 0;
    matcher.find_all(piece, [&](size_t b, size_t e) {
      out(prev, b);
      out(b, e);
      prev = e;
    });
    out(prev, piece.size());
    return;
  }
  std::vector<Span> spans;
  size_t prev = 0;
  matcher.find_all(piece, [&](size_t b, size_t e) {
    if (b > prev) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  });
  if (prev < piece.size()) spans.push_back({prev, piece.size(), invert});

  std::vector<std::pair<size_t, size_t>> pieces;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) pieces.push_back({s.begin, s.end});
      break;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans)
        if (!s.is_match) pieces.push_back({s.begin, s.end});
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !prev_match && !pieces.empty()) {
          pieces.back().second = s.end;
        } else {
          pieces.push_back({s.begin, s.end});
        }
        prev_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      // A match joins the following span when that span is not a match.
      bool carry = false;
      size_t carry_begin = 0;
      for (size_t k = 0; k < spans.size(); ++k) {
        const Span& s = spans[k];
        if (s.is_match && k + 1 < spans.size() && !spans[k + 1].is_match) {
          carry = true;
          carry_begin = s.begin;
          continue;
        }
        pieces.push_back({carry ? carry_begin : s.begin, s.end});
        carry = false;
      }
      break;
    }
    case SplitBehavior::kContiguous: {
      bool prev_match = false;
      for (size_t k = 0; k < spans.size(); ++k) {
        const Span& s = spans[k];
        if (k > 0 && s.is_match == prev_match) {
          pieces.back().second = s.end;
        } else {
          pieces.push_back({s.begin, s.end});
        }
        prev_match = s.is_match;
      }
      break;
    }
  }
  for (auto [b, e] : pieces) out(b, e);
}

class SplitStep final : public PreTokenizerStep {
 public:
  SplitStep(std::unique_ptr<Matcher> m, SplitBehavior b, bool invert, std::string name)
      : matcher_(std::move(m)), behavior_(b), invert_(invert), name_(std::move(name)) {}
  void split(std::string_view piece, bool at_start, PieceSink emit) const override {
    split_by_matches(*matcher_, behavior_, invert_, piece, at_start, emit);
  }
  std::string describe() const override {
    return fmt::format("{}[{}{}{}]", name_, matcher_->engine(),
                       behavior_ == SplitBehavior::kIsolated ? "" : std::string(",") + behavior_name(behavior_),
                       invert_ ? ",invert" : "");
  }

 private:
  std::unique_ptr<Matcher> matcher_;
  SplitBehavior behavior_;
  bool invert_;
  std::string name_;
};

// Every unit for which pred(unit) holds is one match.
template <class Pred>
class PredicateMatcher final : public Matcher {
 public:
  PredicateMatcher(Pred pred, const char* name) : pred_(pred), name_(name) {}
  void find_all(std::string_view text, FunctionRef<void(size_t, size_t)> on_match) const override {
    size_t i = 0;
    while (i < text.size()) {
      unicode::Unit u = unicode::unit_at(text, i);
      if (pred_(u)) on_match(i, i + u.len);
      i += u.len;
    }
  }
  const char* engine() const override { return name_; }

 private:
  Pred pred_;
  const char* name_;
};

template <class Pred>
std::unique_ptr<Matcher> make_predicate_matcher(Pred pred, const char* name) {
  return std::make_unique<PredicateMatcher<Pred>>(pred, name);
}

bool is_ascii_punct(char32_t c) {
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~');
}

class ByteLevelStep final : public PreTokenizerStep {
 public:
  ByteLevelStep(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::move(make_regex_matcher(kGpt2Pattern)).value();
  }
  void split(std::string_view piece, bool at_start, PieceSink emit) const override {
    std::string prefixed;
    if (add_prefix_space_ && (piece.empty() || piece[0] != ' ')) {
      prefixed.reserve(piece.size() + 1);
      prefixed.push_back(' ');
      prefixed.append(piece);
      piece = prefixed;
    }
    if (regex_) {
      split_by_matches(*regex_, SplitBehavior::kIsolated, false, piece, at_start, emit);
    } else if (!piece.empty()) {
      emit(piece, at_start);
    }
  }
  std::string describe() const override {
    return fmt::format("ByteLevel[{}{}]", regex_ ? "gpt2" : "no-regex", add_prefix_space_ ? ",prefix-space" : "");
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Matcher> regex_;
};

class MetaspaceStep final : public PreTokenizerStep {
 public:
  MetaspaceStep(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split), split_matcher_(make_literal_matcher(replacement_)) {}
  void split(std::string_view piece, bool at_start, PieceSink emit) const override {
    std::string text;
    text.reserve(piece.size() + replacement_.size() * 2);
    for (char c : piece) {
      if (c == ' ') {
        text += replacement_;
      } else {
        text.push_back(c);
      }
    }
    const bool starts = text.compare(0, replacement_.size(), replacement_) == 0;
    if (!starts && (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && at_start)))
      text.insert(0, replacement_);
    if (split_) {
      split_by_matches(*split_matcher_, SplitBehavior::kMergedWithNext, false, text, at_start, emit);
    } else if (!text.empty()) {
      emit(text, at_start);
    }
  }
  std::string describe() const override {
    return fmt::format("Metaspace[{},{}]", scheme_ == PrependScheme::kAlways ? "always" : scheme_ == PrependScheme::kFirst ? "first" : "never",
                       split_ ? "split" : "no-split");
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  std::unique_ptr<Matcher> split_matcher_;
};

}  // namespace

std::unique_ptr<PreTokenizerStep> make_split_step(std::unique_ptr<Matcher> matcher, SplitBehavior behavior, bool invert) {
  return std::make_unique<SplitStep>(std::move(matcher), behavior, invert, "Split");
}

std::unique_ptr<PreTokenizerStep> make_digits_step(bool individual_digits) {
  auto m = make_predicate_matcher([](const unicode::Unit& u) { return (u.flags & unicode::kNumber) != 0; }, "digits");
  return std::make_unique<SplitStep>(std::move(m), individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
                                     false, "Digits");
}

std::unique_ptr<PreTokenizerStep> make_punctuation_step(SplitBehavior behavior) {
  auto m = make_predicate_matcher(
      [](const unicode::Unit& u) { return (u.flags & unicode::kPunct) != 0 || (u.cp < 0x80 && is_ascii_punct(u.cp)); },
      "punctuation");
  return std::make_unique<SplitStep>(std::move(m), behavior, false, "Punctuation");
}

std::unique_ptr<PreTokenizerStep> make_whitespace_split_step() {
  auto m = make_predicate_matcher([](const unicode::Unit& u) { return (u.flags & unicode::kSpace) != 0; }, "whitespace");
  return std::make_unique<SplitStep>(std::move(m), SplitBehavior::kRemoved, false, "WhitespaceSplit");
}

std::unique_ptr<PreTokenizerStep> make_byte_level_step(bool add_prefix_space, bool use_regex) {
  return std::make_unique<ByteLevelStep>(add_prefix_space, use_regex);
}

std::unique_ptr<PreTokenizerStep> make_metaspace_step(std::string replacement, PrependScheme scheme, bool split) {
  return std::make_unique<MetaspaceStep>(std::move(replacement), scheme, split);
}

void PreTokenizer::run(std::string_view text, bool at_start, PieceSink emit) const {
  if (text.empty()) return;
  run_from(0, text, at_start, emit);
}

void PreTokenizer::run_from(size_t k, std::string_view piece, bool at_start, PieceSink emit) const {
  if (k == steps_.size()) {
    if (!piece.empty()) emit(piece, at_start);
    return;
  }
  steps_[k]->split(piece, at_start, [&](std::string_view p, bool s) { run_from(k + 1, p, s, emit); });
}

std::string PreTokenizer::describe() const {
  std::string out;
  for (const auto& s : steps_) {
    if (!out.empty()) out += " > ";
    out += s->describe();
  }
  return out.empty() ? "none" : out;
}

}  // namespace pagoda
