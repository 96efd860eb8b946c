#include "common/shm_broadcast.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>
#include <thread>
#include <utility>

#include "common/shm_segment.h"
#include "common/spin_wait.h"

namespace pagoda {
namespace {

constexpr uint64_t kMagic = 0x54534342474150ull;  // "PAGBCST"
constexpr int kMaxReaders = 64;

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory atomics must be lock-free (address-free)");

struct SlotHeader {
  std::atomic<uint64_t> seq;  // the chunk's sequence number once published (0: never written)
  uint64_t length;            // payload bytes of this chunk
  uint64_t last;              // 1: the message's last chunk
  uint64_t pad;
};

constexpr size_t align64(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

struct ShmBroadcast::Header {
  std::atomic<uint64_t> magic;  // published last by the creator: the rest is set up
  uint64_t slots;
  uint64_t slot_bytes;
  uint64_t readers;
  // Then (64-byte aligned): std::atomic<uint64_t> acked[readers] (the last chunk each reader
  // copied out), then slots x (SlotHeader + slot_bytes).
  std::atomic<uint64_t>* acked() { return reinterpret_cast<std::atomic<uint64_t>*>(reinterpret_cast<uint8_t*>(this) + 64); }
  static size_t slots_offset(uint64_t readers) { return 64 + align64(readers * sizeof(uint64_t)); }
  size_t slot_stride() const { return align64(sizeof(SlotHeader) + slot_bytes); }
  SlotHeader* slot(uint64_t seq) {
    return reinterpret_cast<SlotHeader*>(reinterpret_cast<uint8_t*>(this) + slots_offset(readers) +
                                         ((seq - 1) % slots) * slot_stride());
  }
  static size_t total_bytes(uint64_t readers, uint64_t slots, uint64_t slot_bytes) {
    return slots_offset(readers) + slots * align64(sizeof(SlotHeader) + slot_bytes);
  }
};

Result<ShmBroadcast> ShmBroadcast::create(const std::string& name, const Options& o) {
  PAGODA_RETURN_IF_ERROR(check_shm_name(name, "shared-memory channel"));
  if (o.readers < 1 || o.readers > kMaxReaders || o.slots < 1 || o.slot_bytes < 1 || o.slot_bytes > (int64_t{1} << 30))
    return invalid_argument("shared-memory channel: readers 1..{}, slots >= 1, slot bytes 1..1 GiB (got {}, {}, {})",
                            kMaxReaders, o.readers, o.slots, o.slot_bytes);
  const size_t bytes = Header::total_bytes(o.readers, o.slots, o.slot_bytes);
  PAGODA_ASSIGN_OR_RETURN(const ShmMapping m, create_shm_segment(name, bytes));
  void* p = m.base;
  auto* h = static_cast<Header*>(p);  // ftruncate zero-filled it: every seq and ack is 0
  new (&h->magic) std::atomic<uint64_t>(0);
  h->slots = static_cast<uint64_t>(o.slots);
  h->slot_bytes = static_cast<uint64_t>(o.slot_bytes);
  h->readers = static_cast<uint64_t>(o.readers);
  for (int r = 0; r < o.readers; ++r) new (&h->acked()[r]) std::atomic<uint64_t>(0);
  for (uint64_t s = 1; s <= h->slots; ++s) new (&h->slot(s)->seq) std::atomic<uint64_t>(0);
  h->magic.store(kMagic, std::memory_order_release);
  ShmBroadcast b;
  b.name_ = name;
  b.base_ = p;
  b.bytes_ = bytes;
  b.owner_ = true;
  b.timeout_ = o.timeout;
  return b;
}

Result<ShmBroadcast> ShmBroadcast::open(const std::string& name, int reader, std::chrono::milliseconds timeout) {
  PAGODA_ASSIGN_OR_RETURN(const ShmMapping m, open_shm_segment(name, 64, "broadcast channel"));
  void* p = m.base;
  const size_t bytes = m.bytes;
  ShmBroadcast b;  // unmaps on every error below
  b.name_ = name;
  b.base_ = p;
  b.bytes_ = bytes;
  b.reader_ = reader;
  b.timeout_ = timeout;
  auto* h = static_cast<Header*>(p);
  if (h->magic.load(std::memory_order_acquire) != kMagic)
    return data_loss("shared memory '{}' is not a broadcast channel (no magic)", name);
  if (h->readers < 1 || h->readers > kMaxReaders || h->slots < 1 ||
      Header::total_bytes(h->readers, h->slots, h->slot_bytes) != bytes)
    return data_loss("shared memory '{}': its header does not match its size", name);
  if (reader < 0 || static_cast<uint64_t>(reader) >= h->readers)
    return invalid_argument("shared memory '{}' has {} readers; reader {} does not exist", name, h->readers, reader);
  b.next_seq_ = h->acked()[reader].load(std::memory_order_acquire) + 1;
  return b;
}

ShmBroadcast::ShmBroadcast(ShmBroadcast&& o) noexcept { *this = std::move(o); }

ShmBroadcast& ShmBroadcast::operator=(ShmBroadcast&& o) noexcept {
  if (this != &o) {
    reset();
    name_ = std::move(o.name_);
    base_ = std::exchange(o.base_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    owner_ = std::exchange(o.owner_, false);
    reader_ = o.reader_;
    next_seq_ = o.next_seq_;
    timeout_ = o.timeout_;
  }
  return *this;
}

ShmBroadcast::~ShmBroadcast() { reset(); }

void ShmBroadcast::reset() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
  if (owner_) ::shm_unlink(name_.c_str());
  base_ = nullptr;
  owner_ = false;
}

Status ShmBroadcast::send(std::span<const uint8_t> message) {
  if (base_ == nullptr || reader_ != -1) return invalid_argument("shared memory '{}': only its creator sends", name_);
  auto* h = static_cast<Header*>(base_);
  size_t done = 0;
  do {
    const uint64_t seq = next_seq_;
    // The slot last held chunk seq - slots: every reader must have copied it out.
    if (seq > h->slots) {
      const uint64_t need = seq - h->slots;
      for (uint64_t r = 0; r < h->readers; ++r) {
        auto& acked = h->acked()[r];
        if (!spin_wait([&] { return acked.load(std::memory_order_acquire) >= need; }, timeout_))
          return io_error("shared memory '{}': reader {} did not take message chunk {} within {} ms (dead or stalled)",
                          name_, r, need, timeout_.count());
      }
    }
    SlotHeader* slot = h->slot(seq);
    const size_t n = std::min<size_t>(message.size() - done, h->slot_bytes);
    if (n > 0) std::memcpy(reinterpret_cast<uint8_t*>(slot + 1), message.data() + done, n);
    slot->length = n;
    done += n;
    slot->last = done == message.size() ? 1 : 0;
    slot->seq.store(seq, std::memory_order_release);
    ++next_seq_;
  } while (done < message.size());
  return {};
}

bool ShmBroadcast::message_ready() const {
  if (base_ == nullptr || reader_ < 0) return false;
  auto* h = static_cast<Header*>(base_);
  return h->slot(next_seq_)->seq.load(std::memory_order_acquire) == next_seq_;
}

Result<std::vector<uint8_t>> ShmBroadcast::receive() {
  if (base_ == nullptr || reader_ < 0) return invalid_argument("shared memory '{}': the creator does not receive", name_);
  auto* h = static_cast<Header*>(base_);
  std::vector<uint8_t> out;
  for (;;) {
    const uint64_t seq = next_seq_;
    SlotHeader* slot = h->slot(seq);
    if (!spin_wait([&] { return slot->seq.load(std::memory_order_acquire) == seq; }, timeout_))
      return io_error("shared memory '{}': reader {} got no message chunk {} within {} ms (the sender is dead or stalled)",
                      name_, reader_, seq, timeout_.count());
    const uint64_t n = slot->length, last = slot->last;
    if (n > h->slot_bytes || last > 1) return data_loss("shared memory '{}': chunk {} has a corrupt header", name_, seq);
    const uint8_t* payload = reinterpret_cast<const uint8_t*>(slot + 1);
    out.insert(out.end(), payload, payload + n);
    h->acked()[reader_].store(seq, std::memory_order_release);
    ++next_seq_;
    if (last == 1) return out;
  }
}

}  // namespace pagoda
