#include "runtime/cuda_comm.h"

namespace pagoda {

std::string NcclUniqueId::hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    s.push_back(kDigits[b >> 4]);
    s.push_back(kDigits[b & 15]);
  }
  return s;
}

Result<NcclUniqueId> NcclUniqueId::from_hex(std::string_view hex) {
  NcclUniqueId id;
  if (hex.size() != id.bytes.size() * 2)
    return invalid_argument("an NCCL unique id is {} hex digits, got {}", id.bytes.size() * 2, hex.size());
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < id.bytes.size(); ++i) {
    const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return invalid_argument("an NCCL unique id has a non-hex digit at {}", 2 * i + (hi < 0 ? 0 : 1));
    id.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return id;
}

}  // namespace pagoda
