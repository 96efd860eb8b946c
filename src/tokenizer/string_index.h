// StringIndex: string -> int32 lookup for vocabularies. Keys live in one contiguous arena and the
// table is open addressing over 32-bit slots, so building a 150k-entry vocabulary allocates a few
// arrays instead of 150k nodes, and a lookup touches one slot, one entry and the key bytes.
// The first value inserted for a key wins. Build once, then read from any number of threads.
#pragma once

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL  // hashing short keys: inline, no call through the shared library
#endif
#include <xxhash.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

class StringIndex {
 public:
  void reserve(size_t entries, size_t key_bytes = 0) {
    entries_.reserve(entries);
    arena_.reserve(key_bytes);
    if (entries * 2 > slots_.size()) rehash(entries * 2);
  }

  // Adds key -> value unless key is present; returns whether it was added.
  bool insert(std::string_view key, int32_t value) {
    if ((entries_.size() + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 16 : slots_.size() * 2);
    const uint64_t h = hash(key);
    size_t i = static_cast<size_t>(h) & mask_;
    while (slots_[i] != 0) {
      const Entry& e = entries_[slots_[i] - 1];
      if (e.hash == static_cast<uint32_t>(h >> 32) && key_of(e) == key) return false;
      i = (i + 1) & mask_;
    }
    entries_.push_back({static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size()), value,
                        static_cast<uint32_t>(h >> 32)});
    arena_.append(key);
    slots_[i] = static_cast<uint32_t>(entries_.size());
    return true;
  }

  // The value of key, or -1.
  int32_t find(std::string_view key) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash(key);
    const uint32_t hi = static_cast<uint32_t>(h >> 32);
    size_t i = static_cast<size_t>(h) & mask_;
    while (slots_[i] != 0) {
      const Entry& e = entries_[slots_[i] - 1];
      if (e.hash == hi && key_of(e) == key) return e.value;
      i = (i + 1) & mask_;
    }
    return -1;
  }

  size_t size() const { return entries_.size(); }

  // f(key, value) for every entry, in insertion order.
  template <class F>
  void for_each(F&& f) const {
    for (const Entry& e : entries_) f(key_of(e), e.value);
  }

 private:
  struct Entry {
    uint32_t offset, len;
    int32_t value;
    uint32_t hash;  // high half of the 64-bit hash, to skip most key comparisons
  };
  static uint64_t hash(std::string_view k) { return XXH3_64bits(k.data(), k.size()); }
  std::string_view key_of(const Entry& e) const { return std::string_view(arena_).substr(e.offset, e.len); }
  void rehash(size_t want) {
    size_t cap = 16;
    while (cap < want) cap <<= 1;
    slots_.assign(cap, 0);
    mask_ = cap - 1;
    for (size_t k = 0; k < entries_.size(); ++k) {
      size_t i = static_cast<size_t>(hash(key_of(entries_[k]))) & mask_;
      while (slots_[i] != 0) i = (i + 1) & mask_;
      slots_[i] = static_cast<uint32_t>(k + 1);
    }
  }

  std::string arena_;
  std::vector<Entry> entries_;
  std::vector<uint32_t> slots_;
  size_t mask_ = 0;
};

}  // namespace pagoda
