// PairMap: open-addressing hash map from a pair of token ids to (merge rank, merged token id),
// the hot lookup of BPE. Linear probing over a power-of-two table of 16-byte slots (key and value
// side by side: one cache line per probe); built once, read-only after.
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
    slots_.assign(cap, Slot{kEmpty, Value{0, 0}});
    mask_ = cap - 1;
    size_ = 0;
  }

  // Inserts if absent (the first rank given for a pair wins, as in HF and llama.cpp).
  void insert(int32_t a, int32_t b, Value v) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    const uint64_t key = make_key(a, b);
    size_t i = slot(key);
    while (slots_[i].key != kEmpty) {
      if (slots_[i].key == key) return;
      i = (i + 1) & mask_;
    }
    slots_[i] = Slot{key, v};
    ++size_;
  }

  const Value* find(int32_t a, int32_t b) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = make_key(a, b);
    size_t i = slot(key);
    while (true) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.value;
      if (s.key == kEmpty) return nullptr;
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
  struct Slot {
    uint64_t key;
    Value value;
  };
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    reserve(old.empty() ? 8 : old.size());
    for (const Slot& s : old) {
      if (s.key == kEmpty) continue;
      insert(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key & 0xFFFFFFFFu), s.value);
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace pagoda
