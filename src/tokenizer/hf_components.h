// Builders for the pipeline parts of a Hugging Face tokenizer.json: "normalizer", "pre_tokenizer"
// and "decoder" objects. Unsupported types yield kUnimplemented naming the type, so a file is
// never half-understood. Internal to src/tokenizer/.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>

#include "common/status.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_data.h"

namespace pagoda {

// null -> nullptr. Supported: Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace.
Result<std::unique_ptr<Normalizer>> build_hf_normalizer(const nlohmann::json& j);

// null -> nothing added. Supported: Sequence, ByteLevel, Split, Digits, Metaspace, Punctuation,
// WhitespaceSplit, Whitespace, BertPreTokenizer, CharDelimiterSplit. Sets *byte_level if a
// ByteLevel step is present.
Status build_hf_pre_tokenizer(const nlohmann::json& j, PreTokenizer* out, bool* byte_level);

// Supported: Sequence, ByteLevel, Metaspace, Replace (String pattern), ByteFallback, Fuse, Strip.
// Sets *byte_level / *byte_fallback if those decoders are present.
Status build_hf_decoder(const nlohmann::json& j, DecoderSpec* out, bool* byte_level, bool* byte_fallback);

}  // namespace pagoda
