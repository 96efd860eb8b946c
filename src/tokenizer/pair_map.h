// PairMap: open-addressing hash map from a pair of token ids to (merge rank, merged token id),
// the hot lookup of BPE. Linear probing over a power-of-two table; built once, read-only after.
#pragma once

#include <cstdint>
#include <vector>

namespace pagoda {

class PairMap {
 public:
  struct Value {
    int32_t rank;
    int32_t merged;
  };

  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    keys_.assign(cap, kEmpty);
    values_.assign(cap, Value{0, 0});
    mask_ = cap - 1;
    size_ = 0;
  }

  // Inserts if absent (the first rank given for a pair wins, as in HF and llama.cpp).
  void insert(int32_t a, int32_t b, Value v) {
    if ((size_ + 1) * 2 > keys_.size()) grow();
    const uint64_t key = make_key(a, b);
    size_t i = slot(key);
    while (keys_[i] != kEmpty) {
      if (keys_[i] == key) return;
      i = (i + 1) & mask_;
    }
    keys_[i] = key;
    values_[i] = v;
    ++size_;
  }

  const Value* find(int32_t a, int32_t b) const {
    if (keys_.empty()) return nullptr;
    const uint64_t key = make_key(a, b);
    size_t i = slot(key);
    while (true) {
      const uint64_t k = keys_[i];
      if (k == key) return &values_[i];
      if (k == kEmpty) return nullptr;
      i = (i + 1) & mask_;
    }
  }

  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t make_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t slot(uint64_t key) const {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>(h ^ (h >> 29)) & mask_;
  }
  void grow() {
    std::vector<uint64_t> old_keys = std::move(keys_);
    std::vector<Value> old_values = std::move(values_);
    reserve(old_keys.empty() ? 8 : old_keys.size());
    for (size_t i = 0; i < old_keys.size(); ++i) {
      if (old_keys[i] == kEmpty) continue;
      insert(static_cast<int32_t>(old_keys[i] >> 32), static_cast<int32_t>(old_keys[i] & 0xFFFFFFFFu), old_values[i]);
    }
  }

  std::vector<uint64_t> keys_;
  std::vector<Value> values_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace pagoda
