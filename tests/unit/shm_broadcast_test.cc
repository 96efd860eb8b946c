// ShmBroadcast (common/shm_broadcast.h) across real processes: forked readers receive every
// message in order and intact, whatever its size against the slots (empty, one slot, many
// slots: the ring is reused many times over); a reader that opens late still gets what was sent;
// a dead peer is an i/o error after the timeout, never a hang; bad names, reader indices and
// foreign shared memory are refused; a tensor-parallel rank command (runtime/rank_command.h)
// crosses it intact.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/shm_broadcast.h"
#include "forked_child.h"
#include "runtime/rank_command.h"

namespace pagoda {
namespace {

using std::chrono::milliseconds;

std::string unique_name(const char* what) { return "/pagoda-test-" + std::string(what) + "-" + std::to_string(::getpid()); }

// Message i: (i * 7919) % 3 * slot + i % 13 bytes (0 to a little over two slots), byte j = (i + 31 j) mod 256.
std::vector<uint8_t> message(int i, int64_t slot) {
  std::vector<uint8_t> m(static_cast<size_t>((i * 7919) % 3 * slot + i % 13));
  for (size_t j = 0; j < m.size(); ++j) m[j] = static_cast<uint8_t>(i + 31 * j);
  return m;
}

using test::exit_code;
using test::fork_child;

TEST(ShmBroadcast, ForkedReadersGetEveryMessageInOrder) {
  const std::string name = unique_name("order");
  ShmBroadcast::Options o;
  o.readers = 3;
  o.slots = 4;
  o.slot_bytes = 256;
  o.timeout = milliseconds(20000);
  auto writer = ShmBroadcast::create(name, o);
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  constexpr int kMessages = 300;
  std::vector<pid_t> kids;
  for (int r = 0; r < o.readers; ++r)
    kids.push_back(fork_child([&, r] {
      auto reader = ShmBroadcast::open(name, r, milliseconds(20000));
      if (!reader.ok()) return 2;
      for (int i = 0; i < kMessages; ++i) {
        auto m = reader->receive();
        if (!m.ok()) return 3;
        if (*m != message(i, o.slot_bytes)) return 4;
      }
      return 0;
    }));
  for (int i = 0; i < kMessages; ++i) ASSERT_TRUE(writer->send(message(i, o.slot_bytes)).ok()) << i;
  for (pid_t k : kids) EXPECT_EQ(exit_code(k), 0) << "2: open failed, 3: receive failed, 4: a message differed";
}

TEST(ShmBroadcast, AReaderThatOpensLateGetsWhatWasSent) {
  const std::string name = unique_name("late");
  ShmBroadcast::Options o;
  o.slots = 8;
  o.slot_bytes = 64;
  auto writer = ShmBroadcast::create(name, o);
  ASSERT_TRUE(writer.ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(writer->send(message(i, 16)).ok());  // within the ring: no reader yet
  auto reader = ShmBroadcast::open(name, 0);
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  for (int i = 0; i < 3; ++i) {
    auto m = reader->receive();
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(*m, message(i, 16));
  }
}

TEST(ShmBroadcast, ADeadPeerIsAnErrorAfterTheTimeout) {
  const std::string name = unique_name("dead");
  ShmBroadcast::Options o;
  o.slots = 2;
  o.slot_bytes = 8;
  o.timeout = milliseconds(100);
  auto writer = ShmBroadcast::create(name, o);
  ASSERT_TRUE(writer.ok());
  auto reader = ShmBroadcast::open(name, 0, milliseconds(100));
  ASSERT_TRUE(reader.ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto nothing = reader->receive();  // no sender
  ASSERT_FALSE(nothing.ok());
  EXPECT_EQ(nothing.status().code(), StatusCode::kIoError);
  EXPECT_NE(nothing.status().message().find("dead or stalled"), std::string::npos) << nothing.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(5000));
  // A reader that never reads: two slots of 8 bytes hold 16 bytes; a 40-byte message needs the
  // first slot again before the reader took it.
  Status st = writer->send(std::vector<uint8_t>(40, 1));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("reader 0"), std::string::npos) << st.message();
}

TEST(ShmBroadcast, BadNamesReadersAndForeignMemoryAreRefused) {
  EXPECT_EQ(ShmBroadcast::create("no-slash", {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmBroadcast::create("/a/b", {}).status().code(), StatusCode::kInvalidArgument);
  ShmBroadcast::Options bad;
  bad.readers = 0;
  EXPECT_EQ(ShmBroadcast::create(unique_name("bad"), bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(ShmBroadcast::open(unique_name("missing"), 0).ok());

  const std::string name = unique_name("readers");
  auto writer = ShmBroadcast::create(name, {});
  ASSERT_TRUE(writer.ok());
  EXPECT_FALSE(ShmBroadcast::create(name, {}).ok()) << "the name exists";
  EXPECT_EQ(ShmBroadcast::open(name, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmBroadcast::open(name, -1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(writer->receive().ok()) << "the creator does not receive";
  auto reader = ShmBroadcast::open(name, 0);
  ASSERT_TRUE(reader.ok());
  EXPECT_FALSE(reader->send(std::vector<uint8_t>(1)).ok()) << "a reader does not send";

  const std::string foreign = unique_name("foreign");  // shared memory of the right size, no header
  const int fd = ::shm_open(foreign.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  ::close(fd);
  auto f = ShmBroadcast::open(foreign, 0);
  ::shm_unlink(foreign.c_str());
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
}

TEST(ShmBroadcast, ARankCommandCrossesIntact) {
  const std::string name = unique_name("plan");
  ShmBroadcast::Options o;
  o.slot_bytes = 128;  // the command spans several slots
  auto writer = ShmBroadcast::create(name, o);
  ASSERT_TRUE(writer.ok());
  RankCommand c;
  std::vector<int32_t> prompt;
  for (int t = 0; t < 200; ++t) prompt.push_back(t * 13);
  const std::vector<int32_t> table = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
  c.batch.add_sequence(prompt, 200, table, 16);
  const std::vector<uint8_t> bytes = encode_rank_command(c);
  const pid_t kid = fork_child([&] {
    auto reader = ShmBroadcast::open(name, 0);
    if (!reader.ok()) return 2;
    auto m = reader->receive();
    if (!m.ok()) return 3;
    auto d = decode_rank_command(*m);
    if (!d.ok()) return 4;
    return d->batch.token_ids == prompt && d->batch.seqs.at(0).block_table == table && d->batch.slots == c.batch.slots ? 0 : 5;
  });
  ASSERT_TRUE(writer->send(bytes).ok());
  EXPECT_EQ(exit_code(kid), 0);
}

}  // namespace
}  // namespace pagoda
