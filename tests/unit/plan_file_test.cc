// core/plan_file.h: a plan round-trips; a missing, stale (other key, other format version),
// truncated, appended-to or corrupt (header, key, index, section bytes) file is refused with the
// status that names it, never returned; the model identity follows the file's contents and
// modification time.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "common/plan_file.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

class PlanFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("pagoda_plan_test_{}_{}", ::getpid(),
                                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "sub" / "model.plan").string();  // write() creates "sub"
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write_sample(const std::string& key = "key-1") {
    PlanWriter w;
    w.add("small", "hello plan");
    big_.assign(3 * 4096 + 17, '\0');
    for (size_t i = 0; i < big_.size(); ++i) big_[i] = static_cast<char>(i * 131 + 7);
    w.add_view("big", big_.data(), big_.size());
    w.add("empty", "");
    ASSERT_TRUE(w.write(path_, key).ok());
  }
  std::string read_all() {
    std::ifstream f(path_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  void write_all(const std::string& bytes) {
    std::ofstream f(path_, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  void expect_refused(StatusCode code, const std::string& what, const std::string& words) {
    auto p = PlanFile::open(path_, "key-1");
    ASSERT_FALSE(p.ok()) << what << ": a damaged plan was accepted";
    EXPECT_EQ(p.status().code(), code) << what << ": " << p.status().message();
    EXPECT_NE(p.status().message().find(words), std::string::npos) << what << ": " << p.status().message();
  }

  fs::path dir_;
  std::string path_;
  std::string big_;
};

TEST_F(PlanFileTest, RoundTripsSectionsPageAligned) {
  write_sample();
  auto p = PlanFile::open(path_, "key-1");
  ASSERT_TRUE(p.ok()) << p.status().message();
  auto small = (*p)->section("small");
  EXPECT_EQ(std::string(small.begin(), small.end()), "hello plan");
  auto big = (*p)->section("big");
  ASSERT_EQ(big.size(), big_.size());
  EXPECT_EQ(std::string(big.begin(), big.end()), big_);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % 4096, 0u) << "sections are page-aligned in the mapping";
  EXPECT_TRUE((*p)->has("empty"));
  EXPECT_TRUE((*p)->section("empty").empty());
  EXPECT_FALSE((*p)->has("missing"));
  // Rewriting replaces the file atomically: no temporary is left beside it.
  write_sample();
  int files = 0;
  for (const auto& e : fs::directory_iterator(fs::path(path_).parent_path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST_F(PlanFileTest, MissingFileIsNotFound) {
  auto p = PlanFile::open(path_, "key-1");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
}

TEST_F(PlanFileTest, PlanOfAnotherKeyIsStale) {
  write_sample("key-2");
  expect_refused(StatusCode::kInvalidArgument, "other key", "stale");
}

TEST_F(PlanFileTest, OtherFormatVersionIsStale) {
  write_sample();
  std::string b = read_all();
  b[8] = static_cast<char>(kPlanFormatVersion + 1);  // the u32 after the magic
  write_all(b);
  expect_refused(StatusCode::kInvalidArgument, "version", "stale");
}

TEST_F(PlanFileTest, TruncatedAnywhereIsDataLoss) {
  write_sample();
  const std::string b = read_all();
  for (size_t cut : {size_t{0}, size_t{5}, size_t{12}, size_t{30}, size_t{60}, size_t{4096}, b.size() / 2, b.size() - 1}) {
    write_all(b.substr(0, cut));
    expect_refused(StatusCode::kDataLoss, fmt::format("cut at {}", cut), cut < 8 ? "magic" : "");
  }
  write_all(b + "x");
  expect_refused(StatusCode::kDataLoss, "appended", "header says");
}

TEST_F(PlanFileTest, EveryFlippedByteIsCaught) {
  write_sample();
  const std::string b = read_all();
  auto p = PlanFile::open(path_, "key-1");
  ASSERT_TRUE(p.ok());
  const size_t big_at = static_cast<size_t>((*p)->section("big").data() - (*p)->mapping()->data());
  p->reset();
  // Every byte of the header (magic, version, count, size, key, index, checksum) and bytes of
  // the section data: each flip is refused (the version byte as stale, the rest as corrupt).
  std::vector<size_t> where;
  for (size_t i = 0; i < 200 && i < b.size(); ++i) where.push_back(i);
  for (size_t i : {big_at, big_at + 1000, big_at + big_.size() - 1}) where.push_back(i);
  for (size_t i : where) {
    std::string c = b;
    c[i] = static_cast<char>(c[i] ^ 0x20);
    write_all(c);
    auto q = PlanFile::open(path_, "key-1");
    // Bytes past the header's end and before the first section are padding: nothing reads them.
    // The header: magic 8, version 4, count 4, size 8, key length 8 + "key-1", three index
    // entries (4 + name + 24 each), checksum 8.
    constexpr size_t kHeaderEnd = 8 + 4 + 4 + 8 + 8 + 5 + (4 + 5 + 24) + (4 + 3 + 24) + (4 + 5 + 24) + 8;
    if (q.ok()) {
      EXPECT_GE(i, kHeaderEnd) << "flip at " << i << " accepted";
      EXPECT_LT(i, big_at) << "flip in section data at " << i << " accepted";
      continue;
    }
    EXPECT_TRUE(q.status().code() == StatusCode::kDataLoss || q.status().code() == StatusCode::kInvalidArgument)
        << i << ": " << q.status().message();
  }
}

TEST_F(PlanFileTest, ModelIdentityFollowsContentsAndMtime) {
  const std::string model = (dir_ / "m.gguf").string();
  { std::ofstream(model) << "GGUF model bytes"; }
  auto a = model_identity(model);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*model_identity(model), *a) << "the same file has the same identity";
  { std::ofstream(model) << "GGUF model bytez"; }  // same size, other bytes
  auto b = model_identity(model);
  ASSERT_TRUE(b.ok());
  EXPECT_NE(*a, *b);
  const auto t = fs::last_write_time(model);
  fs::last_write_time(model, t + std::chrono::seconds(5));
  EXPECT_NE(*model_identity(model), *b) << "a touched file is another identity";
  EXPECT_FALSE(model_identity((dir_ / "absent").string()).ok());
  EXPECT_EQ(plan_file_path("/c", model, "cpu"), plan_file_path("/c", model, "cpu"));
  EXPECT_NE(plan_file_path("/c", model, "cpu"), plan_file_path("/c", model, "cuda"));
  EXPECT_FALSE(build_identity().empty());
  auto k = plan_key(model, "cpu x");
  ASSERT_TRUE(k.ok());
  EXPECT_NE(k->find("cpu x"), std::string::npos);
}

}  // namespace
}  // namespace pagoda
