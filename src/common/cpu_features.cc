#include "common/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace pagoda {
namespace {

uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

// Linux requires a process to ask for the AMX tile data state before using it.
bool request_amx_permission() {
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  const bool has_fma = (c >> 12) & 1;
  const bool has_f16c = (c >> 29) & 1;
  const bool has_avx = (c >> 28) & 1;
  uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;
  const bool os_amx = (xcr0 & (3ull << 17)) == (3ull << 17);

  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = has_avx && os_avx && ((b >> 5) & 1);
    f.fma = has_fma && os_avx;
    f.f16c = has_f16c && os_avx;
    f.avx512f = os_avx512 && ((b >> 16) & 1);
    f.avx512dq = f.avx512f && ((b >> 17) & 1);
    f.avx512bw = f.avx512f && ((b >> 30) & 1);
    f.avx512vl = f.avx512f && ((b >> 31) & 1);
    f.avx512vnni = f.avx512f && ((c >> 11) & 1);
    f.avx512fp16 = f.avx512f && ((d >> 23) & 1);
    const bool amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1, amx_int8 = (d >> 25) & 1;
    if (amx_tile && os_amx && request_amx_permission()) {
      f.amx_tile = true;
      f.amx_int8 = amx_int8;
      f.amx_bf16 = amx_bf16;
    }
    __cpuid_count(7, 1, a, b, c, d);
    f.avx512bf16 = f.avx512f && ((a >> 5) & 1);
    f.avxvnni = os_avx && ((a >> 4) & 1);
  }
  char brand[49] = {0};
  if (__get_cpuid_max(0x80000000, nullptr) >= 0x80000004) {
    for (unsigned i = 0; i < 3; ++i) {
      __cpuid(0x80000002 + i, a, b, c, d);
      std::memcpy(brand + 16 * i, &a, 4);
      std::memcpy(brand + 16 * i + 4, &b, 4);
      std::memcpy(brand + 16 * i + 8, &c, 4);
      std::memcpy(brand + 16 * i + 12, &d, 4);
    }
  }
  f.brand = brand;
  while (!f.brand.empty() && f.brand.front() == ' ') f.brand.erase(f.brand.begin());
  return f;
}

}  // namespace

std::string CpuFeatures::summary() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512vnni, "avx512vnni");
  add(avx512bf16, "avx512bf16");
  add(avx512fp16, "avx512fp16");
  add(avxvnni, "avxvnni");
  add(amx_tile, "amx-tile");
  add(amx_int8, "amx-int8");
  add(amx_bf16, "amx-bf16");
  return s.empty() ? "scalar" : s;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

const char* isa_level_name(IsaLevel level) {
  switch (level) {
    case IsaLevel::kScalar: return "scalar";
    case IsaLevel::kAvx2: return "avx2";
    case IsaLevel::kAvx512: return "avx512";
    case IsaLevel::kAvx512Vnni: return "avx512-vnni";
    case IsaLevel::kAmx: return "amx";
  }
  return "?";
}

IsaLevel detect_isa_level() {
  const auto& f = cpu_features();
  const bool avx512 = f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma && f.f16c;
  if (avx512 && f.avx512vnni && f.amx_int8) return IsaLevel::kAmx;
  if (avx512 && f.avx512vnni) return IsaLevel::kAvx512Vnni;
  if (avx512) return IsaLevel::kAvx512;
  if (f.avx2 && f.fma && f.f16c) return IsaLevel::kAvx2;
  return IsaLevel::kScalar;
}

namespace {
std::atomic<int> g_isa_cap{static_cast<int>(IsaLevel::kAmx)};
}  // namespace

IsaLevel active_isa_level() {
  static const IsaLevel detected = detect_isa_level();
  const int cap = g_isa_cap.load(std::memory_order_relaxed);
  return static_cast<int>(detected) < cap ? detected : static_cast<IsaLevel>(cap);
}

void set_isa_level_cap(IsaLevel cap) { g_isa_cap.store(static_cast<int>(cap), std::memory_order_relaxed); }

bool parse_isa_level(const std::string& name, IsaLevel* out) {
  for (int l = 0; l <= static_cast<int>(IsaLevel::kAmx); ++l) {
    if (name == isa_level_name(static_cast<IsaLevel>(l))) {
      *out = static_cast<IsaLevel>(l);
      return true;
    }
  }
  return false;
}

}  // namespace pagoda
