// CudaExecutor::forward_sample: one step launched, the caller's before_sampling while the device
// computes it, then the sampling arguments of every row (penalties, blocked ids, logit_bias
// entries, allowed-token masks of structured outputs, the plain-greedy decision) packed into
// pinned memory, copied, and sampled on the device in chunks of the sampler's capacity. Masks are
// written straight into pinned memory at the widest row's width (a tokenizer's vocabulary
// shorter than the model's: only its words cross, the kernel disallows the ids past them).

#include "backend/cuda/cuda_executor_impl.h"

namespace pagoda::cuda_impl {

void CudaExecutor::forward_sample(const ForwardBatch& batch, std::span<const SampleSpec> specs,
                                  std::vector<SampleResult>& results, const std::function<void()>& before_sampling) {
  PAGODA_CHECK(!partial(), "forward_sample() on the CUDA part of a layer split: its logits come from the CPU part");
  using Clock = cuda::StepTimer::Clock;
  const auto t_start = Clock::now();
  run_step(batch);
  const auto t_launched = Clock::now();
  const double launch_s = cuda::StepTimer::seconds(t_start, t_launched);
  if (before_sampling) before_sampling();
  double sampling_s = cuda::StepTimer::seconds(t_launched, Clock::now()), wait_s = 0;
  results.assign(specs.size(), SampleResult{});
  const int64_t cap = caps_.seqs;
  for (size_t c0 = 0; c0 < specs.size(); c0 += static_cast<size_t>(cap)) {
    const auto t_chunk = Clock::now();
    const size_t n = std::min(specs.size() - c0, static_cast<size_t>(cap));
    auto* prm = sample_params_host_.as<cuda::SampleRowParams>();
    std::vector<cuda::PenaltyEntry> pens;
    std::vector<int32_t> blocked;
    std::vector<cuda::BiasEntry> biases;
    std::vector<int32_t> toks, outs;
    std::vector<int32_t> mask_rows;  // logits rows with an allowed-token mask
    // Words per mask row: the widest mask of the chunk, at most the vocabulary's.
    int64_t mask_words = 0;
    for (size_t i = 0; i < n; ++i)
      mask_words = std::max<int64_t>(mask_words, static_cast<int64_t>(specs[c0 + i].allowed_mask.size()));
    mask_words = std::min<int64_t>(mask_words, (d_.V + 31) / 32);
    if (mask_words > 0) {
      int64_t num_masked = 0;
      for (size_t i = 0; i < n; ++i) num_masked += specs[c0 + i].allowed_mask.empty() ? 0 : 1;
      const size_t bytes = static_cast<size_t>(num_masked * mask_words) * sizeof(uint32_t);
      if (token_masks_host_.bytes() < bytes) {
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        token_masks_host_.reset(bytes * 2);
        token_masks_dev_.reset(bytes * 2);
      }
    }
    bool plain_greedy = true;  // every row greedy, no penalty entries, blocked ids, biases or logprobs
    for (size_t i = 0; i < n; ++i) {
      const SampleSpec& sp = specs[c0 + i];
      const SamplingParams& P = *sp.params;
      PAGODA_CHECK(sp.logits_row >= 0 && sp.logits_row < last_logits_rows_, "sample row {} of {}", sp.logits_row,
                   last_logits_rows_);
      cuda::SampleRowParams& r = prm[i];
      r.logits_row = static_cast<int32_t>(sp.logits_row);
      r.top_k = P.top_k;
      r.temperature = P.temperature;
      r.top_p = P.top_p;
      r.min_p = P.min_p;
      r.repetition_penalty = P.repetition_penalty;
      r.presence_penalty = P.presence_penalty;
      r.frequency_penalty = P.frequency_penalty;
      r.logprobs = P.logprobs;
      r.uniform = sp.uniform;
      r.pen_begin = static_cast<int32_t>(pens.size());
      const bool rep = P.repetition_penalty != 1.0f, pf = P.presence_penalty != 0.0f || P.frequency_penalty != 0.0f;
      if (rep || pf) {
        outs.assign(sp.history.output.begin(), sp.history.output.end());
        std::sort(outs.begin(), outs.end());
        toks = outs;
        if (rep) toks.insert(toks.end(), sp.history.prompt.begin(), sp.history.prompt.end());
        std::sort(toks.begin(), toks.end());
        toks.erase(std::unique(toks.begin(), toks.end()), toks.end());
        for (int32_t t : toks) {
          const auto range = std::equal_range(outs.begin(), outs.end(), t);
          pens.push_back({t, static_cast<int32_t>(range.second - range.first)});
        }
      }
      r.pen_count = static_cast<int32_t>(pens.size()) - r.pen_begin;
      r.block_begin = static_cast<int32_t>(blocked.size());
      blocked.insert(blocked.end(), sp.blocked_ids.begin(), sp.blocked_ids.end());
      r.block_count = static_cast<int32_t>(blocked.size()) - r.block_begin;
      r.bias_begin = static_cast<int32_t>(biases.size());
      for (const auto& [token, bias] : P.logit_bias) biases.push_back({token, bias});
      r.bias_count = static_cast<int32_t>(biases.size()) - r.bias_begin;
      if (!sp.allowed_mask.empty()) {
        uint32_t* dst = token_masks_host_.as<uint32_t>() + static_cast<int64_t>(mask_rows.size()) * mask_words;
        const int64_t w = std::min<int64_t>(static_cast<int64_t>(sp.allowed_mask.size()), mask_words);
        std::memcpy(dst, sp.allowed_mask.data(), static_cast<size_t>(w) * sizeof(uint32_t));
        if (w < mask_words) std::memset(dst + w, 0, static_cast<size_t>(mask_words - w) * sizeof(uint32_t));
        mask_rows.push_back(r.logits_row);
      }
      plain_greedy = plain_greedy && P.greedy() && r.pen_count == 0 && r.block_count == 0 && r.bias_count == 0 &&
                     P.logprobs < 0;
    }
    CUDA_CHECK(cudaMemcpyAsync(sample_params_dev_.get(), prm, n * sizeof(cuda::SampleRowParams), cudaMemcpyHostToDevice,
                               stream_));
    auto stage = [&](auto& vec, PinnedBuffer& host, DeviceBuffer& dev) {
      using T = typename std::decay_t<decltype(vec)>::value_type;
      const size_t bytes = vec.size() * sizeof(T);
      if (bytes == 0) return;
      if (host.bytes() < bytes) {
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        host.reset(bytes * 2);
        dev.reset(bytes * 2);
      }
      std::memcpy(host.get(), vec.data(), bytes);
      CUDA_CHECK(cudaMemcpyAsync(dev.get(), host.get(), bytes, cudaMemcpyHostToDevice, stream_));
    };
    stage(pens, penalties_host_, penalties_dev_);
    stage(blocked, blocked_host_, blocked_dev_);
    stage(biases, biases_host_, biases_dev_);
    if (!mask_rows.empty()) {
      stage(mask_rows, token_mask_rows_host_, token_mask_rows_dev_);
      CUDA_CHECK(cudaMemcpyAsync(token_masks_dev_.get(), token_masks_host_.get(),
                                 mask_rows.size() * static_cast<size_t>(mask_words) * sizeof(uint32_t), cudaMemcpyHostToDevice,
                                 stream_));
      cuda::apply_token_masks(logits_.as<float>(), d_.V, token_mask_rows_dev_.as<int32_t>(), token_masks_dev_.as<uint32_t>(),
                              mask_words, static_cast<int64_t>(mask_rows.size()), stream_);
    }
    cuda::sample_rows(logits_.as<float>(), d_.V, sample_params_dev_.as<cuda::SampleRowParams>(), static_cast<int64_t>(n),
                      penalties_dev_.as<cuda::PenaltyEntry>(), blocked_dev_.as<int32_t>(), sample_work_.as<float>(),
                      sample_mask_.as<uint8_t>(), sample_out_dev_.as<cuda::SampleOutput>(), stream_, plain_greedy,
                      biases.empty() ? nullptr : biases_dev_.as<cuda::BiasEntry>());
    CUDA_CHECK(cudaMemcpyAsync(sample_out_host_.get(), sample_out_dev_.get(), n * sizeof(cuda::SampleOutput),
                               cudaMemcpyDeviceToHost, stream_));
    profiler_.mark("sampling", stream_);
    const auto t_wait = Clock::now();
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    wait_s += cuda::StepTimer::seconds(t_wait, Clock::now());
    sampling_s += cuda::StepTimer::seconds(t_chunk, t_wait);
    const auto* so = sample_out_host_.as<cuda::SampleOutput>();
    for (size_t i = 0; i < n; ++i) {
      SampleResult& res = results[c0 + i];
      const SamplingParams& P = *specs[c0 + i].params;
      res.token = so[i].token;
      if (P.logprobs >= 0) {
        res.logprob = so[i].logprob;
        const int k = std::min<int>({P.logprobs, cuda::kMaxTopLogprobs, static_cast<int>(d_.V)});
        for (int j = 0; j < k && so[i].top_ids[j] >= 0; ++j) res.top.push_back({so[i].top_ids[j], so[i].top_logprobs[j]});
      }
    }
  }
  profiler_.end();
  if (specs.empty()) CUDA_CHECK(cudaStreamSynchronize(stream_));
  step_timer_.end_step();
  step_timer_.add_host(launch_s, sampling_s, wait_s);
  finish_capture(batch.num_tokens());
}

void CudaExecutor::row_logprobs(std::span<const RowLogprobSpec> rows, std::vector<RowLogprobs>& out) {
  PAGODA_CHECK(!partial(), "row_logprobs() on the CUDA part of a layer split: its logits come from the CPU part");
  out.assign(rows.size(), RowLogprobs{});
  if (rows.empty()) return;
  CUDA_CHECK(cudaSetDevice(opt_.device));
  const size_t n = rows.size();
  // Layout of one output slot: the SampleOutput, then the rank (both copied back in one transfer).
  const size_t out_bytes = n * sizeof(cuda::SampleOutput) + n * sizeof(int32_t);
  const size_t row_bytes = n * sizeof(cuda::RowLogprobRow);
  if (row_lp_rows_host_.bytes() < row_bytes) {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    row_lp_rows_host_.reset(row_bytes * 2);
    row_lp_rows_dev_.reset(row_bytes * 2);
  }
  if (row_lp_out_host_.bytes() < out_bytes) {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    row_lp_out_host_.reset(out_bytes * 2);
    row_lp_out_dev_.reset(out_bytes * 2);
  }
  auto* rh = row_lp_rows_host_.as<cuda::RowLogprobRow>();
  for (size_t i = 0; i < n; ++i) {
    const RowLogprobSpec& r = rows[i];
    PAGODA_CHECK(r.logits_row >= 0 && r.logits_row < last_logits_rows_ && r.token >= 0 && r.token < d_.V &&
                     r.top_n >= 0 && r.top_n <= cuda::kMaxTopLogprobs,
                 "row_logprobs: row {} of {}, token {} of {}, top {}", r.logits_row, last_logits_rows_, r.token, d_.V,
                 r.top_n);
    rh[i] = {static_cast<int32_t>(r.logits_row), r.token, r.top_n};
  }
  CUDA_CHECK(cudaMemcpyAsync(row_lp_rows_dev_.get(), rh, row_bytes, cudaMemcpyHostToDevice, stream_));
  auto* outs_dev = row_lp_out_dev_.as<cuda::SampleOutput>();
  auto* ranks_dev = reinterpret_cast<int32_t*>(row_lp_out_dev_.as<uint8_t>() + n * sizeof(cuda::SampleOutput));
  cuda::row_logprobs(logits_.as<float>(), d_.V, row_lp_rows_dev_.as<cuda::RowLogprobRow>(), static_cast<int64_t>(n),
                     outs_dev, ranks_dev, stream_);
  CUDA_CHECK(cudaMemcpyAsync(row_lp_out_host_.get(), row_lp_out_dev_.get(), out_bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  const auto* so = row_lp_out_host_.as<cuda::SampleOutput>();
  const auto* ranks = reinterpret_cast<const int32_t*>(row_lp_out_host_.as<uint8_t>() + n * sizeof(cuda::SampleOutput));
  for (size_t i = 0; i < n; ++i) {
    out[i].logprob = so[i].logprob;
    out[i].rank = ranks[i];
    for (int j = 0; j < rows[i].top_n && so[i].top_ids[j] >= 0; ++j) out[i].top.push_back({so[i].top_ids[j], so[i].top_logprobs[j]});
  }
}

}  // namespace pagoda::cuda_impl
