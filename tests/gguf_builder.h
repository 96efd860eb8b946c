// Builds GGUF files in memory for tests (valid ones, and corrupt variants by editing bytes).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace pagoda::test {

class GgufBuilder {
 public:
  explicit GgufBuilder(uint32_t version = 3) : version_(version) {}

  GgufBuilder& kv_u32(const std::string& k, uint32_t v) { key(k, 4); put(v); ++n_kv_; return *this; }
  GgufBuilder& kv_i32(const std::string& k, int32_t v) { key(k, 5); put(v); ++n_kv_; return *this; }
  GgufBuilder& kv_f32(const std::string& k, float v) { key(k, 6); put(v); ++n_kv_; return *this; }
  GgufBuilder& kv_bool(const std::string& k, bool v) { key(k, 7); put(static_cast<uint8_t>(v)); ++n_kv_; return *this; }
  GgufBuilder& kv_str(const std::string& k, const std::string& v) { key(k, 8); str(v); ++n_kv_; return *this; }
  GgufBuilder& kv_u64(const std::string& k, uint64_t v) { key(k, 10); put(v); ++n_kv_; return *this; }
  GgufBuilder& kv_i64(const std::string& k, int64_t v) { key(k, 11); put(v); ++n_kv_; return *this; }
  GgufBuilder& kv_f64(const std::string& k, double v) { key(k, 12); put(v); ++n_kv_; return *this; }
  GgufBuilder& kv_u8(const std::string& k, uint8_t v) { key(k, 0); put(v); ++n_kv_; return *this; }
  GgufBuilder& kv_i8(const std::string& k, int8_t v) { key(k, 1); put(v); ++n_kv_; return *this; }
  GgufBuilder& kv_u16(const std::string& k, uint16_t v) { key(k, 2); put(v); ++n_kv_; return *this; }
  GgufBuilder& kv_i16(const std::string& k, int16_t v) { key(k, 3); put(v); ++n_kv_; return *this; }
  GgufBuilder& kv_str_array(const std::string& k, const std::vector<std::string>& v) {
    key(k, 9);
    put(uint32_t{8});
    put(static_cast<uint64_t>(v.size()));
    for (const auto& s : v) str(s);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& kv_f32_array(const std::string& k, const std::vector<float>& v) {
    key(k, 9);
    put(uint32_t{6});
    put(static_cast<uint64_t>(v.size()));
    for (float f : v) put(f);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& kv_i32_array(const std::string& k, const std::vector<int32_t>& v) {
    key(k, 9);
    put(uint32_t{5});
    put(static_cast<uint64_t>(v.size()));
    for (int32_t x : v) put(x);
    ++n_kv_;
    return *this;
  }
  // A tensor with dims innermost first (GGUF order) and raw bytes.
  GgufBuilder& tensor(const std::string& name, std::vector<int64_t> dims, uint32_t type, std::vector<uint8_t> data) {
    tensors_.push_back({name, std::move(dims), type, std::move(data)});
    return *this;
  }
  GgufBuilder& tensor_f32(const std::string& name, std::vector<int64_t> dims, const std::vector<float>& values) {
    std::vector<uint8_t> bytes(values.size() * 4);
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return tensor(name, std::move(dims), 0, std::move(bytes));
  }

  std::vector<uint8_t> build(uint64_t alignment = 32) const {
    std::vector<uint8_t> out;
    auto w = [&](const void* p, size_t n) { out.insert(out.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n); };
    w("GGUF", 4);
    w(&version_, 4);
    uint64_t nt = tensors_.size(), nkv = n_kv_;
    w(&nt, 8);
    w(&nkv, 8);
    out.insert(out.end(), kv_.begin(), kv_.end());
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const auto& t : tensors_) {
      uint64_t len = t.name.size();
      w(&len, 8);
      w(t.name.data(), len);
      uint32_t nd = static_cast<uint32_t>(t.dims.size());
      w(&nd, 4);
      for (int64_t d : t.dims) w(&d, 8);
      w(&t.type, 4);
      w(&offset, 8);
      offsets.push_back(offset);
      offset += (t.data.size() + alignment - 1) / alignment * alignment;
    }
    while (out.size() % alignment) out.push_back(0);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      out.insert(out.end(), tensors_[i].data.begin(), tensors_[i].data.end());
      while (out.size() % alignment) out.push_back(0);
    }
    return out;
  }

 private:
  struct T {
    std::string name;
    std::vector<int64_t> dims;
    uint32_t type;
    std::vector<uint8_t> data;
  };
  template <class V>
  void put(V v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    kv_.insert(kv_.end(), p, p + sizeof(V));
  }
  void str(const std::string& s) {
    put(static_cast<uint64_t>(s.size()));
    kv_.insert(kv_.end(), s.begin(), s.end());
  }
  void key(const std::string& k, uint32_t type) {
    str(k);
    put(type);
  }
  uint32_t version_;
  uint64_t n_kv_ = 0;
  std::vector<uint8_t> kv_;
  std::vector<T> tensors_;
};

}  // namespace pagoda::test
