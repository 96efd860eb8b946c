// The step plan on the wire: a SchedulerOutput as bytes, for the ranks of a tensor-parallel model
// (docs/decisions.md D78: rank 0 schedules and sends every step's plan to the other ranks, which
// run the same step on their shards).
//
// Format (version 1), every number little-endian:
//   u32 magic "PGSP", u16 version, u16 flags (0), i32 total_num_scheduled_tokens,
//   then the lists of SchedulerOutput in declaration order, each a u32 count followed by its
//   elements; a string is a u32 length and its bytes, an int list a u32 count and its i32 values.
//   SamplingParams travel whole except `constraint` (a grammar's compiled state): only rank 0
//   samples, so a decoded plan's constraint is null and `constrained` (one byte after the params)
//   says whether rank 0's request had one.
// The encoding is canonical: a decoded plan, with a constraint put back where `constrained` says,
// encodes to the same bytes.
//
// Decoding never reads past the input and never allocates more than the input could hold (every
// count is checked against the bytes left); malformed input (bad magic or version, a count past
// the end, a bool byte other than 0 / 1, trailing bytes, token counts that do not add up to the
// total) is an invalid-argument error naming the field.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/scheduler_output.h"

namespace pagoda {

inline constexpr uint32_t kStepPlanMagic = 0x50534750;  // "PGSP"
inline constexpr uint16_t kStepPlanVersion = 1;

// A decoded plan and, per new request (same order), whether rank 0's request had a constraint.
struct DecodedStepPlan {
  SchedulerOutput plan;
  std::vector<bool> constrained;
};

std::vector<uint8_t> encode_step_plan(const SchedulerOutput& plan);
Result<DecodedStepPlan> decode_step_plan(std::span<const uint8_t> bytes);

}  // namespace pagoda
