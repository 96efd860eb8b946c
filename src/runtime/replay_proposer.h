// ReplayProposer: a benchmark proposer whose acceptance is set by construction (`pagoda bench
// spec`; no SpeculativeConfig method selects it, so the serving product never runs it).
//
// It drafts each request's recorded greedy continuation (from a plain run of the same prompts),
// with each draft replaced by a wrong token with probability 1 - acceptance. Wrongness is a fixed
// function of (seed, request id, output position), so every position is judged once: a position
// is verified only while the drafts before it were accepted, is then kept (right) or replaced by
// the target's own token (wrong), and never drafted again. Under greedy verification a draft is
// thus accepted with probability `acceptance` given that the drafts before it were (the
// per-token acceptance a of docs/speculative_decoding.md), as long as the target reproduces the
// record. A request whose verified output departs from its record (the target computed a
// different greedy token: rounding in another kernel) gets no more drafts; num_diverged() counts
// them.
//
// An inner proposer (a draft model) may run first for its cost: its drafts are computed and
// discarded, and its draft_cost() is reported as this proposer's.
// Thread-safety: engine-core thread only (as every proposer).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "runtime/proposer.h"

namespace pagoda {

class ReplayProposer final : public Proposer {
 public:
  // records: request id -> the request's prompt followed by its recorded greedy output.
  // acceptance in [0, 1]; vocab >= 2 (wrong tokens are other ids of [0, vocab)).
  ReplayProposer(std::unordered_map<std::string, std::vector<int32_t>> records, double acceptance, int64_t vocab,
                 uint64_t seed, std::unique_ptr<Proposer> inner = nullptr);
  std::string name() const override { return "replay"; }
  double draft_cost() const override { return inner_ ? inner_->draft_cost() : 0.0; }
  void propose(std::span<const ProposeRequest> reqs, std::vector<std::vector<int32_t>>& drafts) override;
  void forget(const std::string& id) override;

  // Whether the draft at token index `pos` (prompt included) of request `id` is made wrong.
  bool corrupted(const std::string& id, int64_t pos) const;
  // Requests whose verified tokens left their record.
  int64_t num_diverged() const { return static_cast<int64_t>(diverged_.size()); }
  // The inner proposer back (the bench runs plain decoding with it set aside).
  std::unique_ptr<Proposer> release_inner() { return std::move(inner_); }

 private:
  std::unordered_map<std::string, std::vector<int32_t>> records_;
  double acceptance_;
  int64_t vocab_;
  uint64_t seed_;
  std::unique_ptr<Proposer> inner_;
  std::unordered_set<std::string> diverged_;
  std::vector<std::vector<int32_t>> inner_drafts_;
};

}  // namespace pagoda
