// HfModelDir (single file and sharded index) and WeightSource over GGUF / HF / safetensors, on
// files synthesized in a temporary directory.
#include "loader/weight_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loader/gguf.h"
#include "loader/hf_model_dir.h"
#include "loader/safetensors.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

void write_bytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}
void write_text(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

// A safetensors file of f32 tensors named `names`, each [2, 2] holding base + i.
std::vector<uint8_t> safetensors_of(const std::vector<std::string>& names, float base) {
  std::string header = "{";
  std::vector<float> data;
  for (size_t i = 0; i < names.size(); ++i) {
    header += fmt::format(R"({}"{}":{{"dtype":"F32","shape":[2,2],"data_offsets":[{},{}]}})", i ? "," : "", names[i],
                          i * 16, i * 16 + 16);
    for (int k = 0; k < 4; ++k) data.push_back(base + static_cast<float>(i * 4 + k));
  }
  header += "}";
  const uint64_t n = header.size();
  std::string s(reinterpret_cast<const char*>(&n), 8);
  s += header;
  s.append(reinterpret_cast<const char*>(data.data()), data.size() * 4);
  return std::vector<uint8_t>(s.begin(), s.end());
}

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() / fmt::format("pagoda_ws_{}_{}", ::getpid(), counter++);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

constexpr const char* kConfig = R"({"model_type": "llama", "hidden_size": 2})";

TEST(HfModelDir, SingleFile) {
  TempDir d;
  write_text(d.path() / "config.json", kConfig);
  write_bytes(d.path() / "model.safetensors", safetensors_of({"a.weight", "b.weight"}, 0));
  auto dir = HfModelDir::open(d.str());
  ASSERT_TRUE(dir.ok()) << dir.status().to_string();
  EXPECT_FALSE((*dir)->sharded());
  EXPECT_EQ((*dir)->tensors().size(), 2u);
  EXPECT_EQ((*dir)->config()["model_type"], "llama");

  auto src = load_weight_source(d.str());
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_EQ((*src)->format(), WeightFormat::kHfDir);
  EXPECT_EQ((*src)->names(), (std::vector<std::string>{"a.weight", "b.weight"}));
  const Tensor* b = (*src)->find("b.weight");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(b->data_as<float>()[3], 7.0f);
  EXPECT_NE((*src)->hf_dir(), nullptr);
  EXPECT_EQ((*src)->gguf(), nullptr);
  auto missing = (*src)->get("c.weight");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("tensor 'c.weight' not found in Hugging Face directory"));
}

TEST(HfModelDir, TensorsOutliveTheSource) {
  TempDir d;
  write_text(d.path() / "config.json", kConfig);
  write_bytes(d.path() / "model.safetensors", safetensors_of({"a"}, 5));
  Tensor t;
  {
    auto src = load_weight_source(d.str());
    ASSERT_TRUE(src.ok());
    t = *(*src)->find("a");
  }
  EXPECT_EQ(t.data_as<float>()[0], 5.0f);
}

void write_sharded(const TempDir& d) {
  write_text(d.path() / "config.json", kConfig);
  write_bytes(d.path() / "model-00001-of-00002.safetensors", safetensors_of({"a", "b"}, 0));
  write_bytes(d.path() / "model-00002-of-00002.safetensors", safetensors_of({"c"}, 100));
  write_text(d.path() / "model.safetensors.index.json",
             R"({"metadata": {"total_size": 48}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                 "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}})");
}

TEST(HfModelDir, Sharded) {
  TempDir d;
  write_sharded(d);
  auto dir = HfModelDir::open(d.str());
  ASSERT_TRUE(dir.ok()) << dir.status().to_string();
  EXPECT_TRUE((*dir)->sharded());
  EXPECT_EQ((*dir)->shards().size(), 2u);
  auto src = load_weight_source(d.str() + "/");
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_EQ((*src)->names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ((*src)->find("c")->data_as<float>()[0], 100.0f);
  EXPECT_EQ((*src)->find("b")->data_as<float>()[0], 4.0f);
}

TEST(HfModelDir, MissingShard) {
  TempDir d;
  write_sharded(d);
  fs::remove(d.path() / "model-00002-of-00002.safetensors");
  auto dir = HfModelDir::open(d.str());
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(dir.status().message(), HasSubstr("model-00002-of-00002.safetensors' listed in"));
  EXPECT_THAT(dir.status().message(), HasSubstr("(for tensor 'c') does not exist"));
}

TEST(HfModelDir, IndexedTensorAbsentFromItsShard) {
  TempDir d;
  write_sharded(d);
  write_bytes(d.path() / "model-00002-of-00002.safetensors", safetensors_of({"d"}, 100));
  auto dir = HfModelDir::open(d.str());
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(dir.status().message(), HasSubstr("tensor 'c' is listed in"));
  EXPECT_THAT(dir.status().message(), HasSubstr("model-00002-of-00002.safetensors', but that shard has no such tensor"));
}

TEST(HfModelDir, DuplicateTensorAcrossShards) {
  TempDir d;
  write_sharded(d);
  write_bytes(d.path() / "model-00002-of-00002.safetensors", safetensors_of({"c", "a"}, 100));
  auto dir = HfModelDir::open(d.str());
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(dir.status().message(), HasSubstr("tensor 'a' appears in both"));
}

TEST(HfModelDir, CorruptShardNamesTheFile) {
  TempDir d;
  write_sharded(d);
  auto bytes = safetensors_of({"c"}, 100);
  bytes.resize(bytes.size() - 4);
  write_bytes(d.path() / "model-00002-of-00002.safetensors", bytes);
  auto dir = HfModelDir::open(d.str());
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(dir.status().message(), HasSubstr("model-00002-of-00002.safetensors: truncated file: tensor 'c'"));
}

TEST(HfModelDir, BadIndexAndConfig) {
  {
    TempDir d;
    write_sharded(d);
    write_text(d.path() / "model.safetensors.index.json", R"({"weight_map": ["a"]})");
    auto dir = HfModelDir::open(d.str());
    EXPECT_THAT(dir.status().message(), HasSubstr("has no \"weight_map\" object"));
  }
  {
    TempDir d;
    write_sharded(d);
    write_text(d.path() / "model.safetensors.index.json", R"({"weight_map": {"a": "../x.safetensors"}})");
    auto dir = HfModelDir::open(d.str());
    EXPECT_THAT(dir.status().message(), HasSubstr("is not a file inside the directory"));
  }
  {
    TempDir d;
    write_sharded(d);
    write_text(d.path() / "model.safetensors.index.json", R"({"weight_map": {"a": 5}})");
    auto dir = HfModelDir::open(d.str());
    EXPECT_THAT(dir.status().message(), HasSubstr("weight_map entry for 'a' is not a file name"));
  }
  {
    TempDir d;
    write_sharded(d);
    write_text(d.path() / "model.safetensors.index.json", "{not json");
    auto dir = HfModelDir::open(d.str());
    EXPECT_THAT(dir.status().message(), HasSubstr("is not valid JSON"));
  }
  {
    TempDir d;
    write_bytes(d.path() / "model.safetensors", safetensors_of({"a"}, 0));
    auto dir = HfModelDir::open(d.str());
    EXPECT_EQ(dir.status().code(), StatusCode::kNotFound);
    EXPECT_THAT(dir.status().message(), HasSubstr("has no config.json"));
  }
  {
    TempDir d;
    write_text(d.path() / "config.json", kConfig);
    auto dir = HfModelDir::open(d.str());
    EXPECT_EQ(dir.status().code(), StatusCode::kNotFound);
    EXPECT_THAT(dir.status().message(), HasSubstr("has neither model.safetensors nor model.safetensors.index.json"));
  }
  {
    TempDir d;
    write_text(d.path() / "config.json", "[1]");
    write_bytes(d.path() / "model.safetensors", safetensors_of({"a"}, 0));
    auto dir = HfModelDir::open(d.str());
    EXPECT_THAT(dir.status().message(), HasSubstr("is not a JSON object"));
  }
}

TEST(WeightSource, UnsupportedDtypeIsListedButNotFound) {
  TempDir d;
  std::string header = R"({"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})";
  const uint64_t n = header.size();
  std::string s(reinterpret_cast<const char*>(&n), 8);
  s += header;
  s.append(8, '\0');
  std::vector<uint8_t> bytes(s.begin(), s.end());
  write_bytes(d.path() / "x.safetensors", bytes);
  auto src = load_weight_source((d.path() / "x.safetensors").string());
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_EQ((*src)->format(), WeightFormat::kSafetensors);
  EXPECT_EQ((*src)->names(), std::vector<std::string>{"ids"});
  EXPECT_EQ((*src)->find("ids"), nullptr);
  auto r = (*src)->get("ids");
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_THAT(r.status().message(), HasSubstr("unsupported dtype I64 for tensor 'ids'"));
}

// Minimal GGUF v3 writer: one metadata string, then the given tensors (f32 or q8_0).
struct GgufTensorSpec {
  std::string name;
  std::vector<uint64_t> dims;  // innermost first
  uint32_t type;               // ggml type id
  std::vector<uint8_t> data;
};
std::vector<uint8_t> gguf_of(const std::vector<GgufTensorSpec>& tensors) {
  std::vector<uint8_t> out;
  auto put = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  };
  auto put_u32 = [&](uint32_t v) { put(&v, 4); };
  auto put_u64 = [&](uint64_t v) { put(&v, 8); };
  auto put_str = [&](const std::string& s) { put_u64(s.size()); put(s.data(), s.size()); };
  put("GGUF", 4);
  put_u32(3);
  put_u64(tensors.size());
  put_u64(1);
  put_str("general.architecture");
  put_u32(8);
  put_str("llama");
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    put_str(t.name);
    put_u32(static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) put_u64(d);
    put_u32(t.type);
    put_u64(offset);
    offset += (t.data.size() + 31) / 32 * 32;
  }
  out.resize((out.size() + 31) / 32 * 32);
  for (const auto& t : tensors) {
    put(t.data.data(), t.data.size());
    out.resize((out.size() + 31) / 32 * 32);
  }
  return out;
}

TEST(WeightSource, GgufDimsAreReversed) {
  TempDir d;
  std::vector<float> w(6);
  for (int i = 0; i < 6; ++i) w[i] = static_cast<float>(i);
  std::vector<uint8_t> wbytes(reinterpret_cast<uint8_t*>(w.data()), reinterpret_cast<uint8_t*>(w.data()) + 24);
  std::vector<uint8_t> q8(2 * 34, 0);  // two q8_0 blocks: a [2, 32] tensor (GGUF dims [32, 2])
  const auto path = d.path() / "m.gguf";
  write_bytes(path, gguf_of({{"blk.0.attn_q.weight", {3, 2}, 0, wbytes}, {"blk.0.ffn_up.weight", {32, 2}, 8, q8}}));
  auto src = load_weight_source(path.string());
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_EQ((*src)->format(), WeightFormat::kGguf);
  ASSERT_NE((*src)->gguf(), nullptr);
  const Tensor* q = (*src)->find("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->shape(), (std::vector<int64_t>{2, 3}));  // GGUF [3, 2] -> [2, 3]
  EXPECT_EQ(q->data_as<float>()[4], 4.0f);
  const Tensor* up = (*src)->find("blk.0.ffn_up.weight");
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->dtype(), DType::kQ8_0);
  EXPECT_EQ(up->shape(), (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(up->nbytes(), 68);
  EXPECT_THAT((*src)->describe(), HasSubstr("GGUF file"));
}

TEST(WeightSource, RejectsOtherPaths) {
  TempDir d;
  write_text(d.path() / "notes.txt", "hello");
  auto r = load_weight_source((d.path() / "notes.txt").string());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  auto m = load_weight_source((d.path() / "absent.gguf").string());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace pagoda
