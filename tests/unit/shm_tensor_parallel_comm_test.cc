// ShmTensorParallelComm (runtime/shm_tensor_parallel_comm.h) across real processes: forked ranks
// all-reduce vectors larger than a slot (chunked) to the rank-order sum, bit for bit on every
// rank; gather columns of different widths (a last rank with fewer vocabulary rows) and rows wider
// than a slot; a rank whose peer died aborts naming it instead of waiting forever; names, ranks
// and foreign shared memory are refused.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "forked_child.h"
#include "runtime/shm_tensor_parallel_comm.h"

namespace pagoda {
namespace {

std::string unique_name(const char* what) { return "/pagoda-test-tp-" + std::string(what) + "-" + std::to_string(::getpid()); }

using test::exit_code;
using test::fork_child;

// Rank r's input to the all-reduce: n values that do not sum exactly in float.
std::vector<float> reduce_input(int r, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 0.1f * static_cast<float>(r + 1) + 1e-3f * static_cast<float>(i % 97);
  return v;
}

// Rank r's part of the gather: `rows` x cols(r), value 1000 r + 10 row + col / 8.
int64_t gather_cols(int r, int size, int64_t per) { return r + 1 == size ? per - 3 : per; }
std::vector<float> gather_part(int r, int size, int64_t rows, int64_t per) {
  const int64_t c = gather_cols(r, size, per);
  std::vector<float> p(static_cast<size_t>(rows * c));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < c; ++j) p[static_cast<size_t>(i * c + j)] = 1000.0f * r + 10.0f * i + j / 8.0f;
  return p;
}

// The collectives of one rank; true when its results are the expected ones.
bool run_rank(TensorParallelComm& c, int64_t n, int64_t rows, int64_t per) {
  const int size = c.size(), r = c.rank();
  std::vector<float> data = reduce_input(r, n), want(static_cast<size_t>(n), 0.0f);
  for (int q = 0; q < size; ++q) {
    const std::vector<float> in = reduce_input(q, n);
    for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] += in[static_cast<size_t>(i)];  // rank order
  }
  c.all_reduce_sum(data.data(), n);
  if (std::memcmp(data.data(), want.data(), data.size() * sizeof(float)) != 0) return false;
  const int64_t out_cols = per * size;
  std::vector<float> out(static_cast<size_t>(rows * out_cols), -1.0f), expect = out;
  for (int q = 0; q < size; ++q) {
    const std::vector<float> p = gather_part(q, size, rows, per);
    const int64_t cq = gather_cols(q, size, per);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cq; ++j) expect[static_cast<size_t>(i * out_cols + q * per + j)] = p[static_cast<size_t>(i * cq + j)];
  }
  const std::vector<float> mine = gather_part(r, size, rows, per);
  c.all_gather_columns(mine.data(), rows, gather_cols(r, size, per), r * per, out.data(), out_cols);
  return out == expect;
}

void expect_ranks_agree(int size, int64_t slot_floats, int64_t n, int64_t rows, int64_t per) {
  const std::string name = unique_name("agree");
  auto root = ShmTensorParallelComm::create(name, size, slot_floats);
  ASSERT_TRUE(root.ok()) << root.status().to_string();
  std::vector<pid_t> kids;
  for (int r = 1; r < size; ++r)
    kids.push_back(fork_child([&, r] {
      auto c = ShmTensorParallelComm::open(name, r);
      if (!c.ok()) return 10;
      return run_rank(**c, n, rows, per) ? 0 : 11;
    }));
  EXPECT_TRUE(run_rank(**root, n, rows, per));
  for (pid_t k : kids) EXPECT_EQ(exit_code(k), 0);
}

TEST(ShmTensorParallelComm, ForkedRanksReduceAndGatherInChunks) {
  expect_ranks_agree(3, /*slot_floats=*/1000, /*n=*/2500, /*rows=*/7, /*per=*/300);   // 3 chunks; 3 rows a piece
  expect_ranks_agree(2, /*slot_floats=*/64, /*n=*/65, /*rows=*/3, /*per=*/200);       // rows wider than a slot
  expect_ranks_agree(4, /*slot_floats=*/1 << 16, /*n=*/4096, /*rows=*/2, /*per=*/512);  // one chunk
}

TEST(ShmTensorParallelComm, ARankWhosePeerDiedAbortsNamingIt) {
  const std::string name = unique_name("dead");
  auto root = ShmTensorParallelComm::create(name, 2, 256);
  ASSERT_TRUE(root.ok());
  const pid_t kid = fork_child([&] { return ShmTensorParallelComm::open(name, 1).ok() ? 0 : 1; });  // joins, then exits
  ASSERT_EQ(exit_code(kid), 0);
  std::vector<float> v(8, 1.0f);
  EXPECT_DEATH((*root)->all_reduce_sum(v.data(), 8), "rank 1 \\(pid [0-9]+\\) died");
}

TEST(ShmTensorParallelComm, BadNamesRanksAndForeignMemoryAreRefused) {
  EXPECT_FALSE(ShmTensorParallelComm::create("no-slash", 2).ok());
  EXPECT_FALSE(ShmTensorParallelComm::create("/a/b", 2).ok());
  EXPECT_FALSE(ShmTensorParallelComm::create(unique_name("zero"), 0).ok());
  EXPECT_FALSE(ShmTensorParallelComm::open(unique_name("missing"), 1).ok());
  const std::string name = unique_name("ranks");
  auto root = ShmTensorParallelComm::create(name, 2, 16);
  ASSERT_TRUE(root.ok());
  EXPECT_FALSE(ShmTensorParallelComm::create(name, 2).ok()) << "the name exists";
  EXPECT_FALSE(ShmTensorParallelComm::open(name, 0).ok()) << "rank 0 creates";
  EXPECT_FALSE(ShmTensorParallelComm::open(name, 2).ok()) << "past the size";
  auto one = ShmTensorParallelComm::open(name, 1);
  ASSERT_TRUE(one.ok());
  auto again = ShmTensorParallelComm::open(name, 1);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("is taken"), std::string::npos);
  // Foreign shared memory of the right size but no magic.
  const std::string foreign = unique_name("foreign");
  const int fd = ::shm_open(foreign.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 1 << 16), 0);
  ::close(fd);
  auto bad = ShmTensorParallelComm::open(foreign, 1);
  ::shm_unlink(foreign.c_str());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not a communicator"), std::string::npos);
}

}  // namespace
}  // namespace pagoda
