// libFuzzer target: bytes -> a tensor-parallel step plan (core/step_plan_codec.h). Any bytes: a
// clear error or a plan whose token counts add up and that re-encodes, with its constraints put
// back where the flags say, to exactly the input (the format is canonical). Findings are crashes,
// sanitizer reports (an over-read, a huge allocation from a count) and failed checks.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>

#include "core/step_plan_codec.h"
#include "core/token_constraint.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
struct OpaqueConstraint final : pagoda::TokenConstraintSpec {
  std::unique_ptr<pagoda::TokenConstraint> start() const override { return nullptr; }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto d = pagoda::decode_step_plan(std::span<const uint8_t>(data, size));
  if (!d.ok()) {
    check(!d.status().message().empty());
    return 0;
  }
  int64_t sum = 0;
  for (const auto& s : d->plan.num_scheduled_tokens) sum += s.num_tokens;
  check(sum == d->plan.total_num_scheduled_tokens);
  check(d->constrained.size() == d->plan.new_requests.size());
  for (size_t i = 0; i < d->constrained.size(); ++i)
    if (d->constrained[i]) d->plan.new_requests[i].sampling.constraint = std::make_shared<OpaqueConstraint>();
  const std::vector<uint8_t> again = pagoda::encode_step_plan(d->plan);
  check(again.size() == size && std::equal(again.begin(), again.end(), data));
  return 0;
}
