// Writes a safetensors file (layout in loader/safetensors.h) whose tensors are produced one at a
// time, so a checkpoint larger than memory can be written: the header (names, dtypes, shapes,
// offsets) is laid out first from the declared sizes, then each tensor's bytes are asked for in
// file order and appended.
//
// Contract: tensors are written sorted by name (the order of the header and the data section); the
// header is padded with spaces to a multiple of 8 bytes (the data section stays 8-byte aligned, as
// the reference writer does); `metadata` becomes "__metadata__". A producer whose bytes differ in
// size from its entry's nbytes, or that fails, aborts the write with an error naming the tensor;
// the file is written to PATH.tmp and renamed over PATH only when complete.
//
// Thread-safety: a function of its arguments; producers are called on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace pagoda {

struct SafetensorsEntry {
  std::string name;
  std::string dtype_name;       // "F32", "F16", "BF16", "I32", "I64", "U8", "F8_E4M3", ...
  std::vector<int64_t> shape;   // outermost first
  uint64_t nbytes = 0;          // numel x element size of dtype_name (loader/safetensors.h)
  std::function<Result<std::vector<uint8_t>>()> produce;
};

Status write_safetensors(const std::string& path, std::vector<SafetensorsEntry> entries,
                         const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace pagoda
