// Fuzz target: SafetensorsFile::parse on arbitrary bytes. On success, checks the parser's
// promises (ranges tile the data section in order, sizes match shapes), touches every byte of
// every tensor and builds each Tensor view (or its unsupported-dtype error).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "loader/safetensors.h"
#include "loader/weight_source.h"

namespace {
volatile uint64_t g_sink = 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = pagoda::SafetensorsFile::parse(std::span<const uint8_t>(data, size), nullptr, "fuzz.safetensors");
  if (!parsed.ok()) {
    g_sink = g_sink + parsed.status().message().size();
    return 0;
  }
  std::shared_ptr<const pagoda::SafetensorsFile> file = std::move(parsed).value();
  uint64_t expect_begin = 0;
  for (const auto& t : file->tensors()) {
    if (t.begin != expect_begin || t.end < t.begin) std::abort();
    expect_begin = t.end;
    if (static_cast<uint64_t>(t.num_elements()) * t.element_bytes != t.nbytes()) std::abort();
    if (file->find_tensor(t.name) != &t) std::abort();
    auto bytes = file->tensor_bytes(t);
    uint64_t acc = 0;
    for (uint8_t b : bytes) acc += b;
    g_sink = g_sink + acc;
    auto tensor = file->to_tensor(t);
    if (tensor.ok()) {
      if (static_cast<uint64_t>(tensor->nbytes()) != t.nbytes()) std::abort();
      if (t.nbytes() > 0) g_sink = g_sink + tensor->data_as<uint8_t>()[t.nbytes() - 1];
    } else if (t.dtype) {
      std::abort();  // a supported dtype must always give a view
    }
  }
  if (expect_begin != size - file->data_offset()) std::abort();
  for (const auto& [k, v] : file->metadata()) g_sink = g_sink + k.size() + v.size();
  auto source = pagoda::make_weight_source(file);
  if (!source.ok() || (*source)->names().size() != file->tensors().size()) std::abort();
  return 0;
}
