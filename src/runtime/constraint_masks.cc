#include "runtime/constraint_masks.h"

#include <algorithm>
#include <memory>
#include <vector>

namespace pagoda {

void fill_constraint_masks(ThreadPool& pool, std::span<ConstraintMaskRow> rows, const std::function<void(size_t)>& prepare) {
  const int64_t n = static_cast<int64_t>(rows.size());
  const bool parallel_rows = n >= kParallelMaskRows && pool.size() > 1;
  std::vector<std::shared_ptr<MaskJob>> jobs(rows.size());
  auto first = [&](int64_t k) {
    if (prepare) prepare(static_cast<size_t>(k));
    ConstraintMaskRow& r = rows[k];
    if (!r.mask.empty() && r.constraint->fill_mask_if_ready(r.mask, &jobs[k])) jobs[k].reset();
  };
  if (parallel_rows) pool.parallel_for_dynamic(n, first);
  else
    for (int64_t k = 0; k < n; ++k) first(k);

  std::vector<MaskJob*> distinct;
  for (const auto& j : jobs)
    if (j) distinct.push_back(j.get());
  if (distinct.empty()) return;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::vector<std::pair<MaskJob*, int32_t>> parts;
  for (MaskJob* j : distinct)
    for (int32_t p = 0; p < j->parts(); ++p) parts.emplace_back(j, p);
  pool.parallel_for_dynamic(static_cast<int64_t>(parts.size()), [&](int64_t i) { parts[i].first->run_part(parts[i].second); });

  auto last = [&](int64_t k) {
    if (jobs[k]) rows[k].constraint->fill_mask(rows[k].mask);
  };
  if (parallel_rows) pool.parallel_for_dynamic(n, last);
  else
    for (int64_t k = 0; k < n; ++k) last(k);
}

}  // namespace pagoda
