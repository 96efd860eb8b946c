#include "tokenizer/sentencepiece_proto.h"

#include <cmath>
#include <cstring>

namespace pagoda {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLen = 2, kStartGroup = 3, kEndGroup = 4, kFixed32 = 5 };

// Reads one protobuf message's bytes. `base` is the offset of data[0] in the whole file, for
// error messages.
class WireReader {
 public:
  WireReader(std::span<const uint8_t> data, size_t base, const char* message)
      : data_(data), base_(base), message_(message) {}

  bool done() const { return pos_ >= data_.size(); }

  Status read_varint(uint64_t* v) {
    uint64_t result = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (pos_ >= data_.size()) return error("truncated varint");
      const uint8_t b = data_[pos_++];
      if (shift == 63 && b > 1) return error("varint overflows 64 bits");
      result |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) {
        *v = result;
        return Status();
      }
    }
    return error("varint longer than 10 bytes");
  }

  Status read_tag(uint32_t* field, uint32_t* wire) {
    uint64_t key = 0;
    PAGODA_RETURN_IF_ERROR(read_varint(&key));
    *field = static_cast<uint32_t>(key >> 3);
    *wire = static_cast<uint32_t>(key & 7);
    if (*field == 0 || key >> 3 > 0x1FFFFFFF) return error("invalid field number");
    return Status();
  }

  Status read_fixed32(uint32_t* v) {
    if (data_.size() - pos_ < 4) return error("truncated fixed32");
    std::memcpy(v, data_.data() + pos_, 4);  // little-endian host assumed (x86-64, arm64)
    pos_ += 4;
    return Status();
  }

  Status read_len(std::span<const uint8_t>* out, size_t* out_base) {
    uint64_t len = 0;
    PAGODA_RETURN_IF_ERROR(read_varint(&len));
    if (len > data_.size() - pos_) return error("length-delimited field runs past the end of its message");
    *out = data_.subspan(pos_, static_cast<size_t>(len));
    *out_base = base_ + pos_;
    pos_ += static_cast<size_t>(len);
    return Status();
  }

  Status skip(uint32_t wire) {
    switch (wire) {
      case kVarint: {
        uint64_t v;
        return read_varint(&v);
      }
      case kFixed64:
        if (data_.size() - pos_ < 8) return error("truncated fixed64");
        pos_ += 8;
        return Status();
      case kLen: {
        std::span<const uint8_t> s;
        size_t b;
        return read_len(&s, &b);
      }
      case kFixed32:
        if (data_.size() - pos_ < 4) return error("truncated fixed32");
        pos_ += 4;
        return Status();
      default:
        return error("unsupported wire type " + std::to_string(wire));
    }
  }

  Status expect(uint32_t wire, uint32_t want, const char* field) {
    if (wire != want) return error(std::string("field ") + field + " has wire type " + std::to_string(wire));
    return Status();
  }

  Status error(const std::string& what) const {
    return data_loss("SentencePiece model: {} in {} at byte offset {}", what, message_, base_ + pos_);
  }

 private:
  std::span<const uint8_t> data_;
  size_t base_;
  size_t pos_ = 0;
  const char* message_;
};

Status read_bool(WireReader& r, uint32_t wire, const char* name, bool* out) {
  PAGODA_RETURN_IF_ERROR(r.expect(wire, kVarint, name));
  uint64_t v = 0;
  PAGODA_RETURN_IF_ERROR(r.read_varint(&v));
  *out = v != 0;
  return Status();
}

Status read_int(WireReader& r, uint32_t wire, const char* name, int64_t* out) {
  PAGODA_RETURN_IF_ERROR(r.expect(wire, kVarint, name));
  uint64_t v = 0;
  PAGODA_RETURN_IF_ERROR(r.read_varint(&v));
  *out = static_cast<int64_t>(v);
  return Status();
}

Status read_int32(WireReader& r, uint32_t wire, const char* name, int32_t* out) {
  int64_t v = 0;
  PAGODA_RETURN_IF_ERROR(read_int(r, wire, name, &v));
  if (v < INT32_MIN || v > INT32_MAX) return r.error(std::string("field ") + name + " out of int32 range");
  *out = static_cast<int32_t>(v);
  return Status();
}

Status read_string(WireReader& r, uint32_t wire, const char* name, std::string* out) {
  PAGODA_RETURN_IF_ERROR(r.expect(wire, kLen, name));
  std::span<const uint8_t> s;
  size_t base = 0;
  PAGODA_RETURN_IF_ERROR(r.read_len(&s, &base));
  out->assign(reinterpret_cast<const char*>(s.data()), s.size());
  return Status();
}

Status parse_piece(std::span<const uint8_t> data, size_t base, SentencePieceModelProto::Piece* p) {
  WireReader r(data, base, "SentencePiece");
  while (!r.done()) {
    uint32_t field = 0, wire = 0;
    PAGODA_RETURN_IF_ERROR(r.read_tag(&field, &wire));
    switch (field) {
      case 1:
        PAGODA_RETURN_IF_ERROR(read_string(r, wire, "piece", &p->piece));
        break;
      case 2: {
        PAGODA_RETURN_IF_ERROR(r.expect(wire, kFixed32, "score"));
        uint32_t bits = 0;
        PAGODA_RETURN_IF_ERROR(r.read_fixed32(&bits));
        std::memcpy(&p->score, &bits, 4);
        if (std::isnan(p->score)) return r.error("score is NaN");
        break;
      }
      case 3: {
        int64_t t = 0;
        PAGODA_RETURN_IF_ERROR(read_int(r, wire, "type", &t));
        if (t < 1 || t > 6) return r.error("piece type " + std::to_string(t) + " is not 1..6");
        p->type = static_cast<int>(t);
        break;
      }
      default:
        PAGODA_RETURN_IF_ERROR(r.skip(wire));
    }
  }
  return Status();
}

Status parse_trainer(std::span<const uint8_t> data, size_t base, SentencePieceModelProto* m) {
  WireReader r(data, base, "TrainerSpec");
  while (!r.done()) {
    uint32_t field = 0, wire = 0;
    PAGODA_RETURN_IF_ERROR(r.read_tag(&field, &wire));
    int64_t v = 0;
    switch (field) {
      case 3:
        PAGODA_RETURN_IF_ERROR(read_int(r, wire, "model_type", &v));
        m->model_type = static_cast<int>(v);
        break;
      case 4:
        PAGODA_RETURN_IF_ERROR(read_int(r, wire, "vocab_size", &m->vocab_size));
        break;
      case 24:
        PAGODA_RETURN_IF_ERROR(read_bool(r, wire, "treat_whitespace_as_suffix", &m->treat_whitespace_as_suffix));
        break;
      case 35:
        PAGODA_RETURN_IF_ERROR(read_bool(r, wire, "byte_fallback", &m->byte_fallback));
        break;
      case 40:
        PAGODA_RETURN_IF_ERROR(read_int32(r, wire, "unk_id", &m->unk_id));
        break;
      case 41:
        PAGODA_RETURN_IF_ERROR(read_int32(r, wire, "bos_id", &m->bos_id));
        break;
      case 42:
        PAGODA_RETURN_IF_ERROR(read_int32(r, wire, "eos_id", &m->eos_id));
        break;
      case 43:
        PAGODA_RETURN_IF_ERROR(read_int32(r, wire, "pad_id", &m->pad_id));
        break;
      default:
        PAGODA_RETURN_IF_ERROR(r.skip(wire));
    }
  }
  return Status();
}

Status parse_normalizer(std::span<const uint8_t> data, size_t base, SentencePieceModelProto* m) {
  WireReader r(data, base, "NormalizerSpec");
  while (!r.done()) {
    uint32_t field = 0, wire = 0;
    PAGODA_RETURN_IF_ERROR(r.read_tag(&field, &wire));
    switch (field) {
      case 1:
        PAGODA_RETURN_IF_ERROR(read_string(r, wire, "name", &m->normalizer_name));
        break;
      case 2:
        PAGODA_RETURN_IF_ERROR(read_string(r, wire, "precompiled_charsmap", &m->precompiled_charsmap));
        break;
      case 3:
        PAGODA_RETURN_IF_ERROR(read_bool(r, wire, "add_dummy_prefix", &m->add_dummy_prefix));
        break;
      case 4:
        PAGODA_RETURN_IF_ERROR(read_bool(r, wire, "remove_extra_whitespaces", &m->remove_extra_whitespaces));
        break;
      case 5:
        PAGODA_RETURN_IF_ERROR(read_bool(r, wire, "escape_whitespaces", &m->escape_whitespaces));
        break;
      default:
        PAGODA_RETURN_IF_ERROR(r.skip(wire));
    }
  }
  return Status();
}

}  // namespace

Result<SentencePieceModelProto> parse_sentencepiece_model(std::span<const uint8_t> bytes) {
  SentencePieceModelProto m;
  WireReader r(bytes, 0, "ModelProto");
  while (!r.done()) {
    uint32_t field = 0, wire = 0;
    PAGODA_RETURN_IF_ERROR(r.read_tag(&field, &wire));
    if (field >= 1 && field <= 3) {
      PAGODA_RETURN_IF_ERROR(r.expect(wire, kLen, field == 1 ? "pieces" : field == 2 ? "trainer_spec" : "normalizer_spec"));
      std::span<const uint8_t> sub;
      size_t base = 0;
      PAGODA_RETURN_IF_ERROR(r.read_len(&sub, &base));
      if (field == 1) {
        SentencePieceModelProto::Piece p;
        PAGODA_RETURN_IF_ERROR(parse_piece(sub, base, &p));
        m.pieces.push_back(std::move(p));
      } else if (field == 2) {
        PAGODA_RETURN_IF_ERROR(parse_trainer(sub, base, &m));
      } else {
        PAGODA_RETURN_IF_ERROR(parse_normalizer(sub, base, &m));
      }
    } else {
      PAGODA_RETURN_IF_ERROR(r.skip(wire));
    }
  }
  if (m.pieces.empty()) return data_loss("SentencePiece model: no pieces (not a SentencePiece model file?)");
  for (size_t i = 0; i < m.pieces.size(); ++i)
    if (m.pieces[i].piece.empty()) return data_loss("SentencePiece model: piece {} is empty", i);
  return m;
}

}  // namespace pagoda
