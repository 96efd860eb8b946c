// Pre-tokenizers: split normalized text into the pieces the model encodes independently,
// with the semantics of Hugging Face tokenizers' pre_tokenizers (Split, ByteLevel, Digits,
// Metaspace, Punctuation, WhitespaceSplit, Sequence).
//
// A PreTokenizer is a sequence of steps; each step splits every piece the previous step produced
// (a step never sees across piece boundaries, as in HF). Pieces are streamed to a callback rather
// than collected: a piece is a view that is valid only during the callback (steps that rewrite
// text, like Metaspace, hand out views of a local buffer). `at_start` tells whether a piece begins
// at the very start of the input text (Metaspace's prepend_scheme "first" needs it).
//
// ByteLevel's byte-to-character mapping is not done here: byte-level models work on raw bytes
// (see byte_level.h), so the ByteLevel step only adds the prefix space and applies GPT-2's regex.
//
// Thread safety: immutable after construction; run() may be called concurrently.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tokenizer/function_ref.h"
#include "tokenizer/regex_matcher.h"

namespace pagoda {

// How a Split step turns matches into pieces (HF SplitDelimiterBehavior).
enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };
// Accepts HF's spellings ("Isolated", "isolated", "merged_with_next", "MergedWithNext", ...).
Result<SplitBehavior> parse_split_behavior(std::string_view name);

enum class PrependScheme { kAlways, kFirst, kNever };
Result<PrependScheme> parse_prepend_scheme(std::string_view name);

using PieceSink = FunctionRef<void(std::string_view piece, bool at_start)>;

class PreTokenizerStep {
 public:
  virtual ~PreTokenizerStep() = default;
  virtual void split(std::string_view piece, bool at_start, PieceSink emit) const = 0;
  virtual std::string describe() const = 0;
};

// Split on matches of `matcher` (regex or literal), HF `Split`.
std::unique_ptr<PreTokenizerStep> make_split_step(std::unique_ptr<Matcher> matcher, SplitBehavior behavior, bool invert);
// HF `Digits`: every \p{N} character alone (individual) or runs of them.
std::unique_ptr<PreTokenizerStep> make_digits_step(bool individual_digits);
// HF `Punctuation`: \p{P} and ASCII punctuation characters.
std::unique_ptr<PreTokenizerStep> make_punctuation_step(SplitBehavior behavior);
// HF `WhitespaceSplit`: split on White_Space, dropping it.
std::unique_ptr<PreTokenizerStep> make_whitespace_split_step();
// HF `ByteLevel` (see above): optional prefix space, then GPT-2's regex if use_regex.
std::unique_ptr<PreTokenizerStep> make_byte_level_step(bool add_prefix_space, bool use_regex);
// HF `Metaspace`: ' ' -> replacement, prefix per scheme, optional split before each replacement.
std::unique_ptr<PreTokenizerStep> make_metaspace_step(std::string replacement, PrependScheme scheme, bool split);

class PreTokenizer {
 public:
  void add(std::unique_ptr<PreTokenizerStep> step) { steps_.push_back(std::move(step)); }
  bool empty() const { return steps_.empty(); }
  // Streams the pieces of `text` to emit. Empty pieces are never emitted.
  void run(std::string_view text, bool at_start, PieceSink emit) const;
  // "Split[gpt2] > Digits" etc., for logs and tests.
  std::string describe() const;

 private:
  void run_from(size_t k, std::string_view piece, bool at_start, PieceSink emit) const;
  std::vector<std::unique_ptr<PreTokenizerStep>> steps_;
};

}  // namespace pagoda
