#include "model/random_weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/half.h"
#include "common/thread_pool.h"
#include "model/family.h"

namespace pagoda {
namespace {

constexpr int64_t kAlign = 256;                    // every tensor's offset in the region
constexpr int64_t kPoolSlack = int64_t{64} << 20;  // offsets a pool tensor may start at: [0, slack)
constexpr double kStd = 0.02;                      // transformers' initializer_range

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t name_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, then mixed
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return splitmix64(h);
}

// Element i of the pool: N(0, kStd) approximately, from (seed, i) alone.
float pool_value(uint64_t key, uint64_t i) {
  const uint64_t h = splitmix64(key ^ (i * 0xd1b54a32d192ed03ull));
  const uint64_t sum = (h & 0xffff) + ((h >> 16) & 0xffff) + ((h >> 32) & 0xffff) + (h >> 48);
  // Four uniforms on {0, ..., 65535}: mean 4 x 32767.5, variance ~4 x 65536^2 / 12, so
  // (sum - mean) x sqrt(3) / 65536 has unit variance.
  constexpr double kMean = 4 * 32767.5, kScale = kStd * 1.7320508075688772 / 65536.0;
  return static_cast<float>((static_cast<double>(sum) - kMean) * kScale);
}

uint16_t to_half_bits(float v, DType dtype) { return dtype == DType::kF16 ? f32_to_fp16(v) : f32_to_bf16(v); }

// A shared memfd mapping (read-only once filled); unmapped when the last tensor view goes.
class Region {
 public:
  static Result<std::shared_ptr<Region>> create(size_t bytes) {
    const int fd = ::memfd_create("pagoda-random-weights", MFD_CLOEXEC);
    if (fd < 0) return io_error("random weights: memfd_create failed: {}", std::strerror(errno));
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const int e = errno;
      ::close(fd);
      return io_error("random weights: cannot size a memfd to {} bytes: {}", bytes, std::strerror(e));
    }
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int e = errno;
    ::close(fd);  // the mapping keeps the memory
    if (p == MAP_FAILED) return io_error("random weights: cannot map {} bytes: {}", bytes, std::strerror(e));
    return std::shared_ptr<Region>(new Region(static_cast<uint8_t*>(p), bytes));
  }
  ~Region() { ::munmap(data_, size_); }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  uint8_t* data() const { return data_; }
  Status seal() {
    if (::mprotect(data_, size_, PROT_READ) != 0) return io_error("random weights: mprotect failed: {}", std::strerror(errno));
    return {};
  }

 private:
  Region(uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t* data_;
  size_t size_;
};

struct Planned {
  std::vector<int64_t> shape;
  int64_t bytes = 0;
  bool ones = false;
  int64_t offset = 0;  // in the pool, or after it (ones)
};

int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

}  // namespace

DType random_weight_dtype(const nlohmann::json& config_json) {
  if (!config_json.is_object()) return DType::kBF16;
  for (const char* key : {"torch_dtype", "dtype"})
    if (auto it = config_json.find(key); it != config_json.end() && it->is_string()) {
      const std::string v = it->get<std::string>();
      if (v == "float16" || v == "torch.float16" || v == "half") return DType::kF16;
      return DType::kBF16;
    }
  return DType::kBF16;
}

Result<std::unique_ptr<WeightSource>> make_random_weight_source(const ModelConfig& config, const std::string& path,
                                                                DType dtype, uint64_t seed, int threads) {
  if (dtype != DType::kBF16 && dtype != DType::kF16)
    return invalid_argument("random weights are bf16 or f16, not {}", dtype_name(dtype));
  const int64_t elem = 2;
  // The required tensors, in Hugging Face naming, sorted by name.
  std::map<std::string, Planned> plan;
  for (const TensorDecl& d : family_of(config).tensor_table(config)) {
    if (!d.required || d.hf_name.empty()) continue;
    auto add = [&](std::string name, std::vector<int64_t> shape) {
      Planned p;
      int64_t n = 1;
      for (int64_t x : shape) n *= x;
      p.bytes = n * elem;
      p.ones = shape.size() == 1 && name.find("norm") != std::string::npos;
      p.shape = std::move(shape);
      plan[std::move(name)] = std::move(p);
    };
    if (d.experts > 0) {
      for (int64_t e = 0; e < d.experts; ++e) add(expert_tensor_name(d, e), std::vector<int64_t>(d.shape.begin() + 1, d.shape.end()));
    } else {
      add(d.hf_name, d.shape);
    }
  }
  // Offsets: pool tensors at distinct hashed slots of the slack (linear probing), ones tensors one
  // after another past the pool.
  int64_t largest = 0, pool_tensors = 0;
  for (const auto& [name, p] : plan)
    if (!p.ones) {
      largest = std::max(largest, p.bytes);
      ++pool_tensors;
    }
  const int64_t slots = std::max(kPoolSlack / kAlign, 2 * pool_tensors);
  const int64_t pool_bytes = round_up(largest + slots * kAlign, kAlign);
  std::unordered_set<int64_t> used;
  int64_t ones_end = pool_bytes;
  for (auto& [name, p] : plan) {
    if (p.ones) {
      p.offset = ones_end;
      ones_end = round_up(ones_end + p.bytes, kAlign);
      continue;
    }
    int64_t slot = static_cast<int64_t>(name_hash(name) % static_cast<uint64_t>(slots));
    while (!used.insert(slot).second) slot = (slot + 1) % slots;
    p.offset = slot * kAlign;
  }
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  PAGODA_ASSIGN_OR_RETURN(std::shared_ptr<Region> region, Region::create(static_cast<size_t>(round_up(ones_end, page))));

  // The pool, element by element from (seed, index); then the ones.
  uint16_t* pool = reinterpret_cast<uint16_t*>(region->data());
  const uint64_t key = splitmix64(seed);
  ThreadPool workers(threads);
  workers.parallel_for(pool_bytes / elem, int64_t{1} << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) pool[i] = to_half_bits(pool_value(key, static_cast<uint64_t>(i)), dtype);
  });
  const uint16_t one = to_half_bits(1.0f, dtype);
  uint16_t* ones = reinterpret_cast<uint16_t*>(region->data() + pool_bytes);
  std::fill(ones, ones + (ones_end - pool_bytes) / elem, one);
  PAGODA_RETURN_IF_ERROR(region->seal());

  const std::shared_ptr<const void> owner = region;
  std::map<std::string, Tensor> tensors;
  for (auto& [name, p] : plan) tensors.emplace(name, Tensor::view(dtype, std::move(p.shape), region->data() + p.offset, owner));
  return make_weight_source(WeightFormat::kRandom, path, std::move(tensors));
}

}  // namespace pagoda
