// ShmBroadcast: one writer sends byte messages to a fixed set of readers in other processes of
// the same host, through a ring of slots in POSIX shared memory (the channel by which rank 0 of a
// tensor-parallel model hands every step's plan to the other ranks: docs/decisions.md D78).
//
// Layout: a header (magic, slot count and size, reader count), per reader an acknowledged
// sequence number, then `slots` slots of a sequence number, a chunk length, a last-chunk flag and
// `slot_bytes` of payload. Message m's chunks take the next sequence numbers; a slot is rewritten
// only after every reader has acknowledged the chunk it held, and a reader copies a chunk out
// before it acknowledges it, so a message of any size passes through a ring of any size.
// Publication is a release store of the slot's sequence number; readers acquire it.
//
// Waits (a writer for the slowest reader, a reader for the next chunk) spin briefly, then sleep in
// growing steps, and give up after the timeout with an i/o error naming what was awaited: a
// dead peer is an error, never a hang.
//
// Thread-safety: one thread writes (the creator's object); each reader object is used by one
// thread. Objects are move-only; the creator unlinks the name when it is destroyed (readers that
// already opened it keep their mapping).
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace pagoda {

class ShmBroadcast {
 public:
  struct Options {
    int readers = 1;
    int slots = 8;
    int64_t slot_bytes = int64_t{1} << 20;
    std::chrono::milliseconds timeout{10000};
  };

  // The writer: creates the shared memory object `name` ("/pagoda-..."; fails if it exists).
  static Result<ShmBroadcast> create(const std::string& name, const Options& options);
  // Reader `reader` (0 <= reader < the creator's readers) of an existing channel.
  static Result<ShmBroadcast> open(const std::string& name, int reader,
                                   std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));

  ShmBroadcast(ShmBroadcast&& o) noexcept;
  ShmBroadcast& operator=(ShmBroadcast&& o) noexcept;
  ShmBroadcast(const ShmBroadcast&) = delete;
  ShmBroadcast& operator=(const ShmBroadcast&) = delete;
  ~ShmBroadcast();

  // Writer only: sends one message (may be empty) to every reader.
  Status send(std::span<const uint8_t> message);
  // Reader only: the next message, in the order sent.
  Result<std::vector<uint8_t>> receive();
  // Reader only: whether the next message has begun to arrive (receive() then does not wait for
  // its first chunk). A reader that must wait longer than the timeout polls this between its own
  // checks (is the writer alive?).
  bool message_ready() const;

  const std::string& name() const { return name_; }

 private:
  struct Header;
  ShmBroadcast() = default;
  void reset();

  std::string name_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  bool owner_ = false;
  int reader_ = -1;         // -1: the writer
  uint64_t next_seq_ = 1;   // the next chunk's sequence number (sent or expected)
  std::chrono::milliseconds timeout_{10000};
};

}  // namespace pagoda
