// Reader for SentencePiece model files (sentencepiece_model.proto, ModelProto), written against
// the protobuf wire format with no protobuf dependency.
//
// Fields read (others are skipped by wire type):
//   ModelProto       1 pieces (repeated SentencePiece), 2 trainer_spec, 3 normalizer_spec
//   SentencePiece    1 piece, 2 score (float), 3 type (NORMAL=1 UNKNOWN=2 CONTROL=3
//                    USER_DEFINED=4 UNUSED=5 BYTE=6)
//   TrainerSpec      3 model_type (UNIGRAM=1 BPE=2 WORD=3 CHAR=4), 4 vocab_size,
//                    24 treat_whitespace_as_suffix, 35 byte_fallback, 40 unk_id, 41 bos_id,
//                    42 eos_id, 43 pad_id
//   NormalizerSpec   1 name, 2 precompiled_charsmap, 3 add_dummy_prefix,
//                    4 remove_extra_whitespaces, 5 escape_whitespaces
// Defaults are the proto's. Safety contract: every length and varint is bounds-checked; corrupt
// input yields kDataLoss naming the message, field and byte offset, never a crash.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace pagoda {

struct SentencePieceModelProto {
  struct Piece {
    std::string piece;
    float score = 0.0f;
    int type = 1;
  };
  std::vector<Piece> pieces;

  int model_type = 1;  // UNIGRAM
  int64_t vocab_size = 8000;
  bool treat_whitespace_as_suffix = false;
  bool byte_fallback = false;
  int32_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;

  std::string normalizer_name;
  std::string precompiled_charsmap;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

Result<SentencePieceModelProto> parse_sentencepiece_model(std::span<const uint8_t> bytes);

}  // namespace pagoda
