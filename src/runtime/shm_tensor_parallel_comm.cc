#include "runtime/shm_tensor_parallel_comm.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>
#include <thread>

#include "common/check.h"
#include "common/process_alive.h"
#include "common/shm_segment.h"

namespace pagoda {
namespace {

constexpr uint64_t kMagic = 0x4d4d4f4350544750ull;  // "PGTPCOMM"
constexpr int kMaxRanks = 64;

}  // namespace

struct ShmTensorParallelComm::Header {
  std::atomic<uint64_t> magic;  // published last by the creator
  uint64_t size;
  uint64_t slot_floats;
  std::atomic<uint64_t> arrived;     // ranks at the current barrier
  std::atomic<uint64_t> generation;  // barriers passed
  std::atomic<int64_t> pids[kMaxRanks];
  int64_t cols[kMaxRanks], col_offset[kMaxRanks];  // all_gather_columns' parts
  static size_t slots_offset() { return (sizeof(Header) + 63) / 64 * 64; }
};

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free);

Result<std::unique_ptr<ShmTensorParallelComm>> ShmTensorParallelComm::create(const std::string& name, int size,
                                                                             int64_t slot_floats) {
  PAGODA_RETURN_IF_ERROR(check_shm_name(name, "shared-memory communicator"));
  if (size < 1 || size > kMaxRanks || slot_floats < 1 || slot_floats > (int64_t{1} << 28))
    return invalid_argument("shared-memory communicator: 1..{} ranks and 1..2^28 floats a slot (got {}, {})", kMaxRanks,
                            size, slot_floats);
  const size_t bytes = Header::slots_offset() + static_cast<size_t>(size) * static_cast<size_t>(slot_floats) * 4;
  PAGODA_ASSIGN_OR_RETURN(const ShmMapping m, create_shm_segment(name, bytes));
  void* p = m.base;
  auto* h = static_cast<Header*>(p);  // zero-filled by ftruncate
  new (&h->magic) std::atomic<uint64_t>(0);
  h->size = static_cast<uint64_t>(size);
  h->slot_floats = static_cast<uint64_t>(slot_floats);
  new (&h->arrived) std::atomic<uint64_t>(0);
  new (&h->generation) std::atomic<uint64_t>(0);
  for (auto& pid : h->pids) new (&pid) std::atomic<int64_t>(0);
  h->pids[0].store(::getpid(), std::memory_order_relaxed);
  h->magic.store(kMagic, std::memory_order_release);
  auto c = std::unique_ptr<ShmTensorParallelComm>(new ShmTensorParallelComm());
  c->name_ = name;
  c->base_ = p;
  c->bytes_ = bytes;
  c->owner_ = true;
  c->rank_ = 0;
  c->size_ = size;
  c->slot_floats_ = slot_floats;
  return c;
}

Result<std::unique_ptr<ShmTensorParallelComm>> ShmTensorParallelComm::open(const std::string& name, int rank) {
  PAGODA_ASSIGN_OR_RETURN(const ShmMapping m, open_shm_segment(name, Header::slots_offset(), "communicator"));
  void* p = m.base;
  const size_t bytes = m.bytes;
  auto c = std::unique_ptr<ShmTensorParallelComm>(new ShmTensorParallelComm());  // unmaps on the errors below
  c->name_ = name;
  c->base_ = p;
  c->bytes_ = bytes;
  auto* h = static_cast<Header*>(p);
  if (h->magic.load(std::memory_order_acquire) != kMagic) return data_loss("shared memory '{}' is not a communicator", name);
  if (h->size < 1 || h->size > kMaxRanks || h->slot_floats < 1 ||
      Header::slots_offset() + h->size * h->slot_floats * 4 > bytes)
    return data_loss("shared memory '{}': a corrupt communicator header", name);
  if (rank < 1 || rank >= static_cast<int>(h->size))
    return invalid_argument("rank {} of a communicator of {} ranks (rank 0 creates it)", rank, h->size);
  int64_t none = 0;
  if (!h->pids[rank].compare_exchange_strong(none, ::getpid()))
    return invalid_argument("rank {} of communicator '{}' is taken (pid {})", rank, name, none);
  c->rank_ = rank;
  c->size_ = static_cast<int>(h->size);
  c->slot_floats_ = static_cast<int64_t>(h->slot_floats);
  return c;
}

ShmTensorParallelComm::~ShmTensorParallelComm() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
  if (owner_) ::shm_unlink(name_.c_str());
}

float* ShmTensorParallelComm::slot(int r) const {
  return reinterpret_cast<float*>(static_cast<uint8_t*>(base_) + Header::slots_offset()) + r * slot_floats_;
}

void ShmTensorParallelComm::barrier() {
  auto* h = static_cast<Header*>(base_);
  const uint64_t gen = h->generation.load(std::memory_order_acquire);
  if (h->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint64_t>(size_)) {
    h->arrived.store(0, std::memory_order_relaxed);
    h->generation.fetch_add(1, std::memory_order_acq_rel);
    return;
  }
  auto last_check = std::chrono::steady_clock::now();
  for (int spins = 0; h->generation.load(std::memory_order_acquire) == gen; ++spins) {
    if (spins < 4096) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    const auto now = std::chrono::steady_clock::now();
    if (now - last_check < std::chrono::milliseconds(20)) continue;
    last_check = now;
    for (int r = 0; r < size_; ++r) {
      const int64_t pid = h->pids[r].load(std::memory_order_relaxed);
      PAGODA_CHECK(r == rank_ || pid == 0 || process_alive(static_cast<pid_t>(pid)),
                   "tensor-parallel rank {} (pid {}) died: rank {} cannot finish the step alone", r, pid, rank_);
    }
  }
}

void ShmTensorParallelComm::all_reduce_sum(float* data, int64_t n) {
  if (size_ == 1) return;
  for (int64_t i0 = 0; i0 < n; i0 += slot_floats_) {
    const int64_t m = std::min(slot_floats_, n - i0);
    std::memcpy(slot(rank_), data + i0, static_cast<size_t>(m) * 4);
    barrier();  // every rank's chunk is in its slot
    std::fill(data + i0, data + i0 + m, 0.0f);
    for (int r = 0; r < size_; ++r) {  // rank order: the same bits on every rank
      const float* s = slot(r);
      for (int64_t i = 0; i < m; ++i) data[i0 + i] += s[i];
    }
    barrier();  // every rank has read every slot
  }
}

void ShmTensorParallelComm::all_gather_columns(const float* part, int64_t rows, int64_t cols, int64_t col_offset,
                                               float* out, int64_t out_cols) {
  auto* h = static_cast<Header*>(base_);
  h->cols[rank_] = cols;
  h->col_offset[rank_] = col_offset;
  barrier();  // every rank's part is described
  int64_t max_cols = 1;
  for (int r = 0; r < size_; ++r) {
    PAGODA_CHECK(h->col_offset[r] >= 0 && h->cols[r] >= 0 && h->col_offset[r] + h->cols[r] <= out_cols,
                 "all_gather_columns: rank {}'s columns [{}, +{}) outside {}", r, h->col_offset[r], h->cols[r], out_cols);
    max_cols = std::max(max_cols, h->cols[r]);
  }
  // Pieces of chunk_rows x chunk_cols (every rank the same loop), each rank's part of a piece packed
  // in its slot.
  const int64_t chunk_cols = std::min(max_cols, slot_floats_), chunk_rows = std::max<int64_t>(1, slot_floats_ / chunk_cols);
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t m = std::min(chunk_rows, rows - r0);
    for (int64_t c0 = 0; c0 < max_cols; c0 += chunk_cols) {
      const int64_t w = std::clamp<int64_t>(cols - c0, 0, chunk_cols);
      for (int64_t i = 0; i < m && w > 0; ++i)
        std::memcpy(slot(rank_) + i * w, part + (r0 + i) * cols + c0, static_cast<size_t>(w) * 4);
      barrier();
      for (int r = 0; r < size_; ++r) {
        const int64_t wr = std::clamp<int64_t>(h->cols[r] - c0, 0, chunk_cols), off = h->col_offset[r] + c0;
        for (int64_t i = 0; i < m && wr > 0; ++i)
          std::memcpy(out + (r0 + i) * out_cols + off, slot(r) + i * wr, static_cast<size_t>(wr) * 4);
      }
      barrier();
    }
  }
  if (rows == 0) barrier();  // the description is read before a later call rewrites it
}

}  // namespace pagoda
