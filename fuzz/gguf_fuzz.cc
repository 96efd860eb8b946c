// Fuzz target: GgufFile::parse on arbitrary bytes. On success, touches every metadata value
// (recursively through arrays) and every byte of every tensor's data range, builds the
// WeightSource views and the ModelConfig, and checks the views agree with the tensor infos.
// Findings are crashes, sanitizer reports and violated invariants (abort).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "loader/gguf.h"
#include "loader/weight_source.h"
#include "model/model_config.h"

namespace {

volatile uint64_t g_sink = 0;

void touch(const pagoda::GgufArray& a) {
  uint64_t acc = a.size();
  for (int64_t v : a.ints) acc += static_cast<uint64_t>(v);
  for (uint64_t v : a.uints) acc += v;
  for (double v : a.floats) acc += v == v ? 1 : 0;
  for (const auto& s : a.strings) acc += s.size() ? static_cast<uint8_t>(s.back()) : 0;
  for (const auto& sub : a.arrays) touch(sub);
  g_sink = g_sink + acc;
}

void touch(const pagoda::GgufValue& v) {
  uint64_t acc = 0;
  if (auto i = v.as_int()) acc += static_cast<uint64_t>(*i);
  if (auto f = v.as_float()) acc += *f == *f ? 1 : 0;
  if (auto b = v.as_bool()) acc += *b;
  if (const auto* s = v.as_string()) acc += s->size() ? static_cast<uint8_t>(s->front()) : 0;
  if (const auto* a = v.as_array()) touch(*a);
  g_sink = g_sink + acc;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = pagoda::GgufFile::parse(std::span<const uint8_t>(data, size), nullptr, "fuzz.gguf");
  if (!parsed.ok()) return 0;
  std::shared_ptr<const pagoda::GgufFile> gguf = std::move(parsed).value();
  for (const auto& [key, value] : gguf->metadata()) {
    g_sink = g_sink + key.size();
    touch(value);
  }
  const auto file = gguf->file_bytes();
  for (const auto& t : gguf->tensors()) {
    const uint8_t* p = gguf->tensor_data(t);
    if (t.nbytes > 0 && (p < file.data() || p + t.nbytes > file.data() + file.size())) std::abort();
    uint64_t acc = 0;
    for (uint64_t i = 0; i < t.nbytes; ++i) acc += p[i];
    g_sink = g_sink + acc;
  }
  auto source = pagoda::make_weight_source(gguf);
  if (source.ok()) {
    for (const auto& name : (*source)->names()) {
      const pagoda::Tensor* t = (*source)->find(name);
      const pagoda::GgufTensorInfo* info = gguf->find_tensor(name);
      if (t == nullptr || info == nullptr) std::abort();
      if (static_cast<uint64_t>(t->nbytes()) != info->nbytes) std::abort();
      if (t->numel() != info->num_elements()) std::abort();
    }
  }
  auto config = pagoda::model_config_from_gguf(*gguf);
  if (config.ok()) g_sink = g_sink + config->summary().size() + config->kv_bytes_per_token(pagoda::DType::kF16);
  return 0;
}
