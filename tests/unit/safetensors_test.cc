// SafetensorsFile on synthesized files: valid files, and every kind of corruption the parser
// promises to catch -> a status with the right code and message (never a crash).
#include "loader/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace pagoda {
namespace {

using ::testing::HasSubstr;

std::vector<uint8_t> make_file(const std::string& header, const std::vector<uint8_t>& data) {
  // Built as a string: g++ 12 warns falsely (-Warray-bounds) on inserting into a small vector.
  const uint64_t n = header.size();
  std::string s(reinterpret_cast<const char*>(&n), 8);
  s += header;
  s.append(reinterpret_cast<const char*>(data.data()), data.size());
  return std::vector<uint8_t>(s.begin(), s.end());
}

template <class T>
void append(std::vector<uint8_t>* out, const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  out->insert(out->end(), p, p + v.size() * sizeof(T));
}

Result<std::shared_ptr<SafetensorsFile>> parse_bytes(const std::vector<uint8_t>& bytes) {
  auto owned = std::make_shared<std::vector<uint8_t>>(bytes);
  return SafetensorsFile::parse(std::span<const uint8_t>(owned->data(), owned->size()), owned, "test.safetensors");
}

// Header and data of a valid two-tensor file (f32 [2, 3] then bf16 [4]).
struct Valid {
  std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}})";
  std::vector<uint8_t> data;
  Valid() {
    append(&data, std::vector<float>{1, 2, 3, 4, 5, 6});
    append(&data, std::vector<uint16_t>{0x3f80, 0x4000, 0xbf80, 0x0000});  // 1, 2, -1, 0 in bf16
  }
};

TEST(Safetensors, ParsesValidFile) {
  Valid v;
  auto f = parse_bytes(make_file(v.header, v.data));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  ASSERT_EQ((*f)->tensors().size(), 2u);
  EXPECT_EQ((*f)->tensors()[0].name, "w");  // data order
  const auto* w = (*f)->find_tensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  auto t = (*f)->to_tensor(*w);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->dtype(), DType::kF32);
  EXPECT_EQ(t->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t->data_as<float>()[5], 6.0f);
  auto b = (*f)->to_tensor(*(*f)->find_tensor("b"));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->dtype(), DType::kBF16);
  EXPECT_EQ(b->data_as<uint16_t>()[2], 0xbf80);
  EXPECT_EQ((*f)->find_tensor("missing"), nullptr);
}

TEST(Safetensors, TensorKeepsFileAlive) {
  Valid v;
  Tensor t;
  {
    auto f = parse_bytes(make_file(v.header, v.data));
    ASSERT_TRUE(f.ok());
    t = (*f)->to_tensor(*(*f)->find_tensor("w")).value();
  }
  EXPECT_EQ(t.data_as<float>()[0], 1.0f);
}

TEST(Safetensors, EmptyHeaderAndScalarAndZeroSize) {
  auto empty = parse_bytes(make_file("{}", {}));
  ASSERT_TRUE(empty.ok()) << empty.status().to_string();
  EXPECT_TRUE((*empty)->tensors().empty());

  std::vector<uint8_t> data;
  append(&data, std::vector<float>{7.5f});
  auto f = parse_bytes(make_file(
      R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"z":{"dtype":"F16","shape":[0,5],"data_offsets":[4,4]}})",
      data));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto s = (*f)->to_tensor(*(*f)->find_tensor("s"));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->ndim(), 0);
  EXPECT_EQ(s->numel(), 1);
  EXPECT_EQ(s->data_as<float>()[0], 7.5f);
  auto z = (*f)->to_tensor(*(*f)->find_tensor("z"));
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->numel(), 0);
  EXPECT_EQ(z->nbytes(), 0);
}

TEST(Safetensors, HeaderPaddingWithSpacesIsAccepted) {
  Valid v;
  auto f = parse_bytes(make_file(v.header + "      ", v.data));
  EXPECT_TRUE(f.ok()) << f.status().to_string();
}

TEST(Safetensors, RecognisedButUnsupportedDtype) {
  std::vector<uint8_t> data(16);
  auto f = parse_bytes(make_file(R"({"position_ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", data));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto t = (*f)->to_tensor(*(*f)->find_tensor("position_ids"));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
  EXPECT_THAT(t.status().message(), HasSubstr("unsupported dtype I64 for tensor 'position_ids'"));
}

TEST(Safetensors, EveryFormatDtypeIsRecognised) {
  const std::vector<std::pair<std::string, uint32_t>> all = {
      {"F64", 8}, {"I64", 8}, {"U64", 8}, {"I32", 4}, {"U32", 4}, {"I16", 2}, {"U16", 2}, {"I8", 1}, {"U8", 1},
      {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F8_E8M0", 1}, {"F32", 4}, {"F16", 2}, {"BF16", 2}};
  for (const auto& [name, bytes] : all) {
    EXPECT_EQ(safetensors_element_bytes(name), bytes) << name;
    std::vector<uint8_t> data(3 * bytes);
    auto f = parse_bytes(make_file(
        fmt::format(R"({{"t":{{"dtype":"{}","shape":[3],"data_offsets":[0,{}]}}}})", name, 3 * bytes), data));
    ASSERT_TRUE(f.ok()) << name << ": " << f.status().to_string();
    auto t = (*f)->to_tensor((*f)->tensors()[0]);
    const bool supported = name == "F32" || name == "F16" || name == "BF16";
    EXPECT_EQ(t.ok(), supported) << name;
    if (!supported) {
      EXPECT_THAT(t.status().message(), HasSubstr("unsupported dtype " + name + " for tensor 't'"));
    }
  }
}

TEST(Safetensors, MisalignedDataIsCopiedAligned) {
  // A 1-byte U8 tensor first puts the f32 tensor at an odd address.
  std::vector<uint8_t> data = {9};
  append(&data, std::vector<float>{3.25f, -1.0f});
  auto f = parse_bytes(make_file(
      R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})",
      data));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto t = (*f)->to_tensor(*(*f)->find_tensor("b"));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data()) % 4, 0u);
  EXPECT_EQ(t->data_as<float>()[0], 3.25f);
  EXPECT_EQ(t->data_as<float>()[1], -1.0f);
}

struct BadCase {
  const char* what;
  std::vector<uint8_t> bytes;
  StatusCode code;
  const char* message;
};

std::vector<BadCase> bad_cases() {
  Valid v;
  std::vector<BadCase> cases;
  auto file = [&](const std::string& header, std::vector<uint8_t> data) { return make_file(header, data); };
  const std::vector<uint8_t> d24(24);
  cases.push_back({"too short", {1, 2, 3}, StatusCode::kDataLoss, "8-byte header length"});
  {
    auto b = make_file(v.header, v.data);
    const uint64_t huge = b.size();  // larger than what follows the length field
    std::memcpy(b.data(), &huge, 8);
    cases.push_back({"header length past end", b, StatusCode::kDataLoss, "exceeds the"});
    const uint64_t max = ~0ull;
    std::memcpy(b.data(), &max, 8);
    cases.push_back({"header length 2^64-1", b, StatusCode::kDataLoss, "header length 18446744073709551615 exceeds"});
  }
  {
    auto b = make_file(v.header, {});
    b.resize(b.size() - 5);
    cases.push_back({"truncated header", b, StatusCode::kDataLoss, "exceeds the"});
  }
  cases.push_back({"not json", file("{\"a\": [1, 2", {}), StatusCode::kDataLoss, "not valid JSON"});
  cases.push_back({"not utf-8", file("{\"\xff\": 1}", {}), StatusCode::kDataLoss, "not valid JSON"});
  cases.push_back({"not an object", file("[1, 2, 3]", {}), StatusCode::kDataLoss, "not a JSON object"});
  cases.push_back({"entry not object", file(R"({"w": 5})", {}), StatusCode::kDataLoss, "tensor 'w': header entry is not an object"});
  cases.push_back({"metadata not object", file(R"({"__metadata__": [1]})", {}), StatusCode::kDataLoss,
                   "'__metadata__' is not an object"});
  cases.push_back({"metadata value not string", file(R"({"__metadata__": {"format": 1}})", {}),
                   StatusCode::kDataLoss, "'__metadata__' value of 'format' is not a string"});
  cases.push_back({"no dtype", file(R"({"w":{"shape":[6],"data_offsets":[0,24]}})", d24), StatusCode::kDataLoss,
                   "tensor 'w': missing string 'dtype'"});
  cases.push_back({"unknown dtype", file(R"({"w":{"dtype":"F12","shape":[6],"data_offsets":[0,24]}})", d24),
                   StatusCode::kUnimplemented, "tensor 'w': unknown safetensors dtype 'F12'"});
  cases.push_back({"no shape", file(R"({"w":{"dtype":"F32","data_offsets":[0,24]}})", d24), StatusCode::kDataLoss,
                   "tensor 'w': missing array 'shape'"});
  cases.push_back({"dtype not a string", file(R"({"w":{"dtype":5,"shape":[6],"data_offsets":[0,24]}})", d24),
                   StatusCode::kDataLoss, "tensor 'w': 'dtype' has type number, expected a string"});
  cases.push_back({"shape not an array", file(R"({"w":{"dtype":"F32","shape":6,"data_offsets":[0,24]}})", d24),
                   StatusCode::kDataLoss, "tensor 'w': 'shape' has type number, expected an array"});
  cases.push_back({"negative dim", file(R"({"w":{"dtype":"F32","shape":[-6],"data_offsets":[0,24]}})", d24),
                   StatusCode::kDataLoss, "shape entry -6 is not a non-negative integer"});
  cases.push_back({"float dim", file(R"({"w":{"dtype":"F32","shape":[6.0],"data_offsets":[0,24]}})", d24),
                   StatusCode::kDataLoss, "is not a non-negative integer"});
  cases.push_back({"too many dims", file(R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})",
                                         std::vector<uint8_t>(4)),
                   StatusCode::kDataLoss, "9 dimensions"});
  cases.push_back({"shape overflow",
                   file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,24]}})", d24),
                   StatusCode::kDataLoss, "element count overflows"});
  cases.push_back({"byte size overflow",
                   file(R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,24]}})", d24),
                   StatusCode::kDataLoss, "byte size overflows"});
  cases.push_back({"no offsets", file(R"({"w":{"dtype":"F32","shape":[6]}})", d24), StatusCode::kDataLoss,
                   "'data_offsets' must be an array [begin, end]"});
  cases.push_back({"three offsets", file(R"({"w":{"dtype":"F32","shape":[6],"data_offsets":[0,24,48]}})", d24),
                   StatusCode::kDataLoss, "'data_offsets' must be an array [begin, end]"});
  cases.push_back({"begin > end", file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[24,0]}})", d24),
                   StatusCode::kDataLoss, "data_offsets [24, 0] have begin > end"});
  cases.push_back({"size mismatch", file(R"({"w":{"dtype":"F32","shape":[5],"data_offsets":[0,24]}})", d24),
                   StatusCode::kDataLoss, "hold 24 bytes, but F32 [5] needs 20 bytes"});
  cases.push_back({"end past data", file(R"({"w":{"dtype":"F32","shape":[6],"data_offsets":[0,24]}})",
                                         std::vector<uint8_t>(20)),
                   StatusCode::kDataLoss, "tensor 'w' data_offsets [0, 24] extend past the 20-byte data section"});
  cases.push_back({"huge offsets", file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615]}})", {}),
                   StatusCode::kDataLoss, "are not non-negative integers"});
  cases.push_back({"overlap",
                   file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", d24),
                   StatusCode::kDataLoss, "tensor 'b' data_offsets [8, 24] overlap tensor 'a' [0, 16]"});
  cases.push_back({"same range twice",
                   file(R"({"a":{"dtype":"F32","shape":[6],"data_offsets":[0,24]},"b":{"dtype":"F32","shape":[6],"data_offsets":[0,24]}})", d24),
                   StatusCode::kDataLoss, "overlap tensor 'a'"});
  cases.push_back({"gap",
                   file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})", d24),
                   StatusCode::kDataLoss, "data bytes [8, 16) before tensor 'b' belong to no tensor"});
  cases.push_back({"trailing bytes", file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", d24),
                   StatusCode::kDataLoss, "data bytes [16, 24) at the end of the file belong to no tensor"});
  cases.push_back({"duplicate name",
                   file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"a":{"dtype":"F32","shape":[3],"data_offsets":[12,24]}})", d24),
                   StatusCode::kDataLoss, "header names 'a' twice"});
  return cases;
}

TEST(Safetensors, CorruptFilesGiveClearErrors) {
  for (const auto& c : bad_cases()) {
    auto f = parse_bytes(c.bytes);
    ASSERT_FALSE(f.ok()) << c.what;
    EXPECT_EQ(f.status().code(), c.code) << c.what << ": " << f.status().to_string();
    EXPECT_THAT(f.status().message(), HasSubstr(c.message)) << c.what;
  }
}

TEST(Safetensors, OpenPrefixesErrorsWithThePath) {
  const auto dir = std::filesystem::temp_directory_path() / ("pagoda_st_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "bad.safetensors").string();
  {
    auto bytes = make_file(R"({"w":{"dtype":"F32","shape":[5],"data_offsets":[0,24]}})", std::vector<uint8_t>(24));
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  auto f = SafetensorsFile::open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), HasSubstr(path + ": tensor 'w'"));
  auto missing = SafetensorsFile::open((dir / "nope.safetensors").string());
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagoda
