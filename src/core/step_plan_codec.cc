#include "core/step_plan_codec.h"

#include <bit>
#include <cstring>
#include <type_traits>

namespace pagoda {
namespace {

static_assert(std::endian::native == std::endian::little, "the step plan is written in the host's byte order");

class Writer {
 public:
  template <class T>
  void num(T v) {
    static_assert(std::is_arithmetic_v<T>);
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  void flag(bool b) { num<uint8_t>(b ? 1 : 0); }
  void count(size_t n) { num(static_cast<uint32_t>(n)); }
  void str(const std::string& s) {
    count(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void ints(const std::vector<int32_t>& v) {
    count(v.size());
    for (int32_t x : v) num(x);
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

// Reads from the input; the first failure sticks (later reads return zeros) and names its field.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}

  template <class T>
  T num(const char* field) {
    T v{};
    if (!take(sizeof(T), field)) return v;
    std::memcpy(&v, in_.data() + pos_ - sizeof(T), sizeof(T));
    return v;
  }
  bool flag(const char* field) {
    const uint8_t b = num<uint8_t>(field);
    if (b > 1) fail(field, "is a bool byte other than 0 or 1");
    return b == 1;
  }
  // A count of elements of at least `min_bytes` each: refused when the rest cannot hold them.
  uint32_t count(const char* field, size_t min_bytes) {
    const uint32_t n = num<uint32_t>(field);
    if (ok() && static_cast<uint64_t>(n) * min_bytes > in_.size() - pos_) {
      fail(field, "counts more elements than the bytes left hold");
      return 0;
    }
    return n;
  }
  std::string str(const char* field) {
    const uint32_t n = count(field, 1);
    if (!take(n, field)) return {};
    return std::string(reinterpret_cast<const char*>(in_.data() + pos_ - n), n);
  }
  std::vector<int32_t> ints(const char* field) {
    const uint32_t n = count(field, 4);
    std::vector<int32_t> v(n);
    for (auto& x : v) x = num<int32_t>(field);
    return v;
  }
  void fail(const char* field, const char* why) {
    if (error_.empty()) error_ = std::string(field) + " " + why;
  }
  bool ok() const { return error_.empty(); }
  bool at_end() const { return pos_ == in_.size(); }
  const std::string& error() const { return error_; }
  size_t pos() const { return pos_; }

 private:
  bool take(size_t n, const char* field) {
    if (!ok()) return false;
    if (n > in_.size() - pos_) {
      fail(field, "runs past the end of the plan");
      return false;
    }
    pos_ += n;
    return true;
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  std::string error_;
};

void write_sampling(Writer& w, const SamplingParams& s) {
  w.num(s.temperature);
  w.num(s.top_k);
  w.num(s.top_p);
  w.num(s.min_p);
  w.num(s.repetition_penalty);
  w.num(s.presence_penalty);
  w.num(s.frequency_penalty);
  w.flag(s.seed.has_value());
  w.num<uint64_t>(s.seed.value_or(0));
  w.num(s.logprobs);
  w.num(s.prompt_logprobs);
  w.count(s.logit_bias.size());
  for (const auto& [id, bias] : s.logit_bias) {
    w.num(id);
    w.num(bias);
  }
  w.flag(s.constraint != nullptr);
}

// Returns whether the request had a constraint (not carried).
bool read_sampling(Reader& r, SamplingParams& s) {
  s.temperature = r.num<float>("sampling.temperature");
  s.top_k = r.num<int32_t>("sampling.top_k");
  s.top_p = r.num<float>("sampling.top_p");
  s.min_p = r.num<float>("sampling.min_p");
  s.repetition_penalty = r.num<float>("sampling.repetition_penalty");
  s.presence_penalty = r.num<float>("sampling.presence_penalty");
  s.frequency_penalty = r.num<float>("sampling.frequency_penalty");
  const bool has_seed = r.flag("sampling.has_seed");
  const uint64_t seed = r.num<uint64_t>("sampling.seed");
  if (has_seed) s.seed = seed;
  else if (seed != 0) r.fail("sampling.seed", "is set without has_seed");
  s.logprobs = r.num<int32_t>("sampling.logprobs");
  s.prompt_logprobs = r.num<int32_t>("sampling.prompt_logprobs");
  const uint32_t n = r.count("sampling.logit_bias", 8);
  s.logit_bias.resize(n);
  for (auto& [id, bias] : s.logit_bias) {
    id = r.num<int32_t>("sampling.logit_bias");
    bias = r.num<float>("sampling.logit_bias");
  }
  return r.flag("sampling.constrained");
}

void write_copies(Writer& w, const std::vector<BlockCopy>& copies) {
  w.count(copies.size());
  for (const auto& [src, dst] : copies) {
    w.num(src);
    w.num(dst);
  }
}

std::vector<BlockCopy> read_copies(Reader& r, const char* field) {
  std::vector<BlockCopy> v(r.count(field, 8));
  for (auto& [src, dst] : v) {
    src = r.num<BlockId>(field);
    dst = r.num<BlockId>(field);
  }
  return v;
}

void write_strings(Writer& w, const std::vector<std::string>& v) {
  w.count(v.size());
  for (const auto& s : v) w.str(s);
}

std::vector<std::string> read_strings(Reader& r, const char* field) {
  std::vector<std::string> v(r.count(field, 4));
  for (auto& s : v) s = r.str(field);
  return v;
}

}  // namespace

std::vector<uint8_t> encode_step_plan(const SchedulerOutput& p) {
  Writer w;
  w.num(kStepPlanMagic);
  w.num(kStepPlanVersion);
  w.num<uint16_t>(0);
  w.num(p.total_num_scheduled_tokens);
  w.count(p.new_requests.size());
  for (const NewRequestData& n : p.new_requests) {
    w.str(n.id);
    w.ints(n.tokens);
    w.num(n.num_prompt_tokens);
    write_sampling(w, n.sampling);
    w.num(n.seed);
    w.ints(n.block_ids);
    w.num(n.num_computed_tokens);
    w.num(n.min_tokens);
    w.ints(n.min_tokens_blocked_ids);
  }
  w.count(p.cached_requests.size());
  for (const CachedRequestData& c : p.cached_requests) {
    w.str(c.id);
    w.ints(c.new_block_ids);
    w.num(c.num_computed_tokens);
    w.flag(c.replace_block_table);
  }
  w.count(p.num_scheduled_tokens.size());
  for (const ScheduledTokens& s : p.num_scheduled_tokens) {
    w.str(s.id);
    w.num(s.num_tokens);
    w.ints(s.spec_tokens);
  }
  write_strings(w, p.preempted);
  write_strings(w, p.finished);
  write_copies(w, p.swap_out);
  write_copies(w, p.swap_in);
  return w.take();
}

Result<DecodedStepPlan> decode_step_plan(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  DecodedStepPlan d;
  SchedulerOutput& p = d.plan;
  if (r.num<uint32_t>("magic") != kStepPlanMagic && r.ok()) r.fail("magic", "is not \"PGSP\"");
  if (const uint16_t v = r.num<uint16_t>("version"); v != kStepPlanVersion && r.ok())
    r.fail("version", "is not 1");
  if (r.num<uint16_t>("flags") != 0 && r.ok()) r.fail("flags", "are not 0");
  p.total_num_scheduled_tokens = r.num<int32_t>("total_num_scheduled_tokens");
  // Minimum bytes of one element of each list (its fixed fields and empty sub-lists).
  // Sampling: seven 4-byte numbers, has_seed, seed, logprobs, prompt_logprobs, the bias count, constrained.
  constexpr size_t kSamplingMin = 7 * 4 + 1 + 8 + 4 + 4 + 4 + 1;
  constexpr size_t kNewMin = 4 + 4 + 4 + kSamplingMin + 8 + 4 + 4 + 4 + 4, kCachedMin = 4 + 4 + 4 + 1,
                   kScheduledMin = 4 + 4 + 4;
  p.new_requests.resize(r.count("new_requests", kNewMin));
  d.constrained.resize(p.new_requests.size());
  for (size_t i = 0; i < p.new_requests.size(); ++i) {
    NewRequestData& n = p.new_requests[i];
    n.id = r.str("new_requests.id");
    n.tokens = r.ints("new_requests.tokens");
    n.num_prompt_tokens = r.num<int32_t>("new_requests.num_prompt_tokens");
    d.constrained[i] = read_sampling(r, n.sampling);
    n.seed = r.num<uint64_t>("new_requests.seed");
    n.block_ids = r.ints("new_requests.block_ids");
    n.num_computed_tokens = r.num<int32_t>("new_requests.num_computed_tokens");
    n.min_tokens = r.num<int32_t>("new_requests.min_tokens");
    n.min_tokens_blocked_ids = r.ints("new_requests.min_tokens_blocked_ids");
  }
  p.cached_requests.resize(r.count("cached_requests", kCachedMin));
  for (CachedRequestData& c : p.cached_requests) {
    c.id = r.str("cached_requests.id");
    c.new_block_ids = r.ints("cached_requests.new_block_ids");
    c.num_computed_tokens = r.num<int32_t>("cached_requests.num_computed_tokens");
    c.replace_block_table = r.flag("cached_requests.replace_block_table");
  }
  p.num_scheduled_tokens.resize(r.count("num_scheduled_tokens", kScheduledMin));
  int64_t sum = 0;
  for (ScheduledTokens& s : p.num_scheduled_tokens) {
    s.id = r.str("num_scheduled_tokens.id");
    s.num_tokens = r.num<int32_t>("num_scheduled_tokens.num_tokens");
    s.spec_tokens = r.ints("num_scheduled_tokens.spec_tokens");
    if (r.ok() && (s.num_tokens < 0 || static_cast<int64_t>(s.spec_tokens.size()) > s.num_tokens))
      r.fail("num_scheduled_tokens.num_tokens", "is negative or fewer than its draft tokens");
    sum += s.num_tokens;
  }
  p.preempted = read_strings(r, "preempted");
  p.finished = read_strings(r, "finished");
  p.swap_out = read_copies(r, "swap_out");
  p.swap_in = read_copies(r, "swap_in");
  if (r.ok() && sum != p.total_num_scheduled_tokens)
    r.fail("total_num_scheduled_tokens", "is not the sum of the requests' scheduled tokens");
  if (r.ok() && !r.at_end()) r.fail("plan", "has bytes after its last field");
  if (!r.ok()) return invalid_argument("step plan: {} (at byte {} of {})", r.error(), r.pos(), bytes.size());
  return d;
}

}  // namespace pagoda
