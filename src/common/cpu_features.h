// Run-time CPU feature detection (CPUID + OS support via XGETBV, AMX permission via arch_prctl).
// Kernels are compiled per ISA level and chosen once at start-up from these flags.
#pragma once

#include <string>

namespace pagoda {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool avx512fp16 = false;
  bool avxvnni = false;
  bool amx_tile = false;   // usable: CPU has it and the OS granted the tile state
  bool amx_int8 = false;
  bool amx_bf16 = false;
  std::string brand;

  std::string summary() const;  // "avx2 fma f16c avx512f ... amx-int8"
};

// Detected once (thread-safe), cached. Honors the config override that caps the ISA level
// (see isa.h) only through the dispatcher; this struct always reports the hardware.
const CpuFeatures& cpu_features();

// The ISA levels kernels are compiled for, best last.
enum class IsaLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Vnni = 3, kAmx = 4 };
const char* isa_level_name(IsaLevel level);
// Best level this machine supports.
IsaLevel detect_isa_level();
// The level kernels dispatch to: detect_isa_level(), lowered by the cap. The cap is process-wide
// configuration (set once at start-up from --isa, or by tests that compare levels); it must not
// change while kernels run.
IsaLevel active_isa_level();
void set_isa_level_cap(IsaLevel cap);
// "scalar", "avx2", "avx512", "avx512-vnni", "amx" -> level.
bool parse_isa_level(const std::string& name, IsaLevel* out);

}  // namespace pagoda
