#include "kv/disk_tier_store.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "common/check.h"
#include "common/log.h"

namespace pagoda {
namespace {

constexpr char kMagic[8] = {'P', 'G', 'K', 'V', 'B', 'L', 'K', '1'};
constexpr const char* kSuffix = ".kvb";

template <class T>
void put(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}
template <class T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

uint64_t checksum(const uint8_t* header40, std::span<const int32_t> tokens, std::span<const uint8_t> payload) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, header40, 40);
  XXH3_64bits_update(st, tokens.data(), tokens.size_bytes());
  XXH3_64bits_update(st, payload.data(), payload.size());
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

bool parse_hex(const std::string& s, uint64_t* out) {
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

}  // namespace

Result<std::unique_ptr<DiskTierStore>> DiskTierStore::open(const std::string& dir, uint64_t name_space,
                                                           int64_t capacity_bytes, int64_t block_bytes) {
  namespace fs = std::filesystem;
  if (capacity_bytes <= 0) return invalid_argument("the KV disk tier needs a positive capacity, got {}", capacity_bytes);
  if (block_bytes <= 0) return invalid_argument("KV disk tier: block bytes {}", block_bytes);
  const std::string sub = (fs::path(dir) / fmt::format("{:016x}", name_space)).string();
  std::error_code ec;
  fs::create_directories(sub, ec);
  if (ec || !fs::is_directory(sub)) return io_error("cannot create the KV disk tier directory {}: {}", sub, ec.message());
  std::unique_ptr<DiskTierStore> store(new DiskTierStore(sub, name_space, capacity_bytes, block_bytes));
  // Index what an earlier run left, oldest first; contents are checked when loaded.
  std::vector<std::pair<fs::file_time_type, BlockHash>> found;
  for (const auto& e : fs::directory_iterator(sub, ec)) {
    const fs::path p = e.path();
    if (p.extension() != kSuffix) {
      if (p.extension() == ".tmp") fs::remove(p, ec);  // a write that never finished
      continue;
    }
    uint64_t h = 0;
    if (!parse_hex(p.stem().string(), &h)) continue;
    found.emplace_back(fs::last_write_time(p, ec), h);
  }
  std::sort(found.begin(), found.end());
  for (const auto& [_, h] : found) {
    const int64_t size = static_cast<int64_t>(fs::file_size(store->path_of(h), ec));
    if (ec) continue;
    Entry& entry = store->index_[h];
    entry.file_bytes = size;
    entry.lru = store->lru_.insert(store->lru_.end(), h);
    store->used_ += size;
  }
  while (store->used_ > store->capacity_ && !store->lru_.empty()) {
    store->erase(store->lru_.front(), true);
    ++store->evicted_;
  }
  return store;
}

std::string DiskTierStore::path_of(BlockHash hash) const {
  return (std::filesystem::path(dir_) / fmt::format("{:016x}{}", hash, kSuffix)).string();
}

int64_t DiskTierStore::file_bytes(size_t num_tokens) const {
  return kHeaderBytes + static_cast<int64_t>(num_tokens * sizeof(int32_t)) + block_bytes_;
}

void DiskTierStore::erase(BlockHash hash, bool remove_file) {
  auto it = index_.find(hash);
  if (it == index_.end()) return;
  used_ -= it->second.file_bytes;
  lru_.erase(it->second.lru);
  index_.erase(it);
  if (remove_file) {
    std::error_code ec;
    std::filesystem::remove(path_of(hash), ec);
  }
}

bool DiskTierStore::load(BlockHash hash, std::span<const int32_t> tokens, std::span<uint8_t> dst) {
  PAGODA_CHECK(static_cast<int64_t>(dst.size()) == block_bytes_, "disk tier load into {} bytes, blocks are {}", dst.size(),
               block_bytes_);
  auto it = index_.find(hash);
  if (it == index_.end()) return false;
  const std::string path = path_of(hash);
  auto reject = [&](const char* why) {
    log_warn("kv-tier", "disk tier: {} ({}): treated as a miss, file removed", path, why);
    ++rejected_;
    erase(hash, true);
    return false;
  };
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return reject("cannot open");
  const int64_t size = static_cast<int64_t>(in.tellg());
  const int64_t want = file_bytes(tokens.size());
  if (size != want) return reject(size < want ? "truncated" : "longer than a block");
  in.seekg(0);
  uint8_t header[kHeaderBytes];
  std::vector<int32_t> stored(tokens.size());
  in.read(reinterpret_cast<char*>(header), kHeaderBytes);
  in.read(reinterpret_cast<char*>(stored.data()), static_cast<std::streamsize>(stored.size() * sizeof(int32_t)));
  in.read(reinterpret_cast<char*>(dst.data()), static_cast<std::streamsize>(dst.size()));
  if (!in) return reject("short read");
  if (std::memcmp(header, kMagic, 8) != 0) return reject("bad magic");
  if (get<uint64_t>(header + 8) != ns_ || get<uint64_t>(header + 16) != hash) return reject("another block's header");
  if (get<uint32_t>(header + 24) != tokens.size() || get<int64_t>(header + 32) != block_bytes_)
    return reject("another block geometry");
  if (checksum(header, stored, dst) != get<uint64_t>(header + 40)) return reject("checksum mismatch");
  if (!std::equal(stored.begin(), stored.end(), tokens.begin(), tokens.end())) {
    // A hash collision, not damage: the file is someone else's block; keep it.
    return false;
  }
  lru_.splice(lru_.end(), lru_, it->second.lru);
  return true;
}

void DiskTierStore::store(BlockHash hash, std::span<const int32_t> tokens, std::span<const uint8_t> src) {
  PAGODA_CHECK(static_cast<int64_t>(src.size()) == block_bytes_, "disk tier store of {} bytes, blocks are {}", src.size(),
               block_bytes_);
  const int64_t bytes = file_bytes(tokens.size());
  if (bytes > capacity_) return;
  erase(hash, false);
  while (used_ + bytes > capacity_ && !lru_.empty()) {
    erase(lru_.front(), true);
    ++evicted_;
  }
  uint8_t header[kHeaderBytes] = {};
  std::memcpy(header, kMagic, 8);
  put<uint64_t>(header + 8, ns_);
  put<uint64_t>(header + 16, hash);
  put<uint32_t>(header + 24, static_cast<uint32_t>(tokens.size()));
  put<int64_t>(header + 32, block_bytes_);
  put<uint64_t>(header + 40, checksum(header, tokens, src));
  const std::string path = path_of(hash);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(header), kHeaderBytes);
    out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size_bytes()));
    out.write(reinterpret_cast<const char*>(src.data()), static_cast<std::streamsize>(src.size()));
    out.close();
    if (!out) {
      if (!warned_) log_warn("kv-tier", "disk tier: cannot write {}: blocks are dropped instead", tmp);
      warned_ = true;
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    if (!warned_) log_warn("kv-tier", "disk tier: cannot rename {}: {}", tmp, ec.message());
    warned_ = true;
    std::filesystem::remove(tmp, ec);
    return;
  }
  Entry& e = index_[hash];
  e.file_bytes = bytes;
  e.lru = lru_.insert(lru_.end(), hash);
  used_ += bytes;
}

}  // namespace pagoda
