#include "engine/engine.h"

#include <atomic>
#include <filesystem>
#include <future>
#include <random>
#include <thread>
#include <unordered_map>

#include "engine/engine_core.h"
#include "engine/engine_plan.h"
#include "engine/device_spec.h"
#include "engine/stop_matcher.h"
#include "common/log.h"
#include "common/startup_profile.h"
#include "grammar/constraint.h"
#include "template/chat_template.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

// ---- RequestStream ----

void RequestStream::push(RequestOutput out) {
  std::function<void()> notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(out));
    notify = notify_;
  }
  cv_.notify_all();
  if (notify) notify();
}

void RequestStream::set_notify(std::function<void()> fn) {
  bool pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    notify_ = fn;
    pending = !queue_.empty();
  }
  if (pending && fn) fn();
}

std::optional<RequestOutput> RequestStream::try_next() {
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.empty()) return std::nullopt;
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  if (out.finished) --remaining_;
  return out;
}

std::optional<RequestOutput> RequestStream::next() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !queue_.empty() || remaining_ == 0; });
  if (queue_.empty()) return std::nullopt;
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  if (out.finished) --remaining_;
  return out;
}

std::optional<RequestOutput> RequestStream::next_for(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || remaining_ == 0; })) return std::nullopt;
  if (queue_.empty()) return std::nullopt;
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  if (out.finished) --remaining_;
  return out;
}

bool RequestStream::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return remaining_ == 0 && queue_.empty();
}

std::string EngineConfig::to_string() const {
  return fmt::format(
      "model {} | quantization {} | load format {} | threads {} | max_model_len {} | block {} | kv {} | kv memory {} | memory util {} | kv tiers {} | prefix "
      "cache {} | max_num_seqs {} | max_num_batched_tokens {} | chunked prefill {} | policy {} | queue delay {} us | "
      "device {} | dtype {} | cuda graphs {} | batch-invariant {} | n_gpu_layers {} | tensor_parallel_size {} | {} | speculative {}",
      model, weight_quantization_name(quantization), load_format_name(load_format), threads, max_model_len, block_size, dtype_name(kv_dtype), kv_cache_memory, memory_utilization, kv_tiers.to_string(),
      enable_prefix_caching, scheduler.max_num_seqs, scheduler.max_num_batched_tokens, scheduler.chunked_prefill,
      scheduler.policy, max_queue_delay_us, device, dtype, cuda_graphs, batch_invariant,
      n_gpu_layers < 0 ? std::string("all") : std::to_string(n_gpu_layers), tensor_parallel_size, tuning.to_string(),
      speculative.to_string());
}

Status tensor_parallel_supported(int size) {
  if (size < 1 || size > 64) return invalid_argument("--tensor-parallel-size must be 1..64, got {}", size);
  return {};
}

Result<EngineConfig> resolve_layer_split(const EngineConfig& config) {
  PAGODA_RETURN_IF_ERROR(tensor_parallel_supported(config.tensor_parallel_size));
  PAGODA_ASSIGN_OR_RETURN(const DeviceSpec dev, parse_device(config.device));
  if (config.n_gpu_layers < -1)
    return invalid_argument("--n-gpu-layers must be >= 0 (or -1: every layer on the GPU), got {}", config.n_gpu_layers);
  EngineConfig out = config;
  if (dev.type != Device::kCuda) {
    if (config.n_gpu_layers > 0)
      return invalid_argument("--n-gpu-layers {} puts layers on a GPU: it needs --device cuda (the device is {})",
                              config.n_gpu_layers, config.device);
    return out;
  }
  if (config.n_gpu_layers == 0) {
    log_info("engine", "--n-gpu-layers 0: every layer on the CPU (the CPU backend, as --device cpu)");
    out.device = "cpu";
  }
  return out;
}

// ---- EngineLoop: the engine thread and text output ----

class EngineLoop {
 public:
  EngineLoop(EngineConfig config, std::unique_ptr<ThreadPool> pool, std::unique_ptr<EngineCore> core,
             std::shared_ptr<const Tokenizer> tok, std::optional<ChatTemplate> chat_template)
      : config_(std::move(config)), pool_(std::move(pool)), core_(std::move(core)), tok_(std::move(tok)),
        chat_template_(std::move(chat_template)) {
    thread_ = std::thread([this] { run(); });
  }
  ~EngineLoop() { shutdown(); }

  Result<std::shared_ptr<RequestStream>> submit(GenerateRequest g);
  void cancel(const std::string& id);
  EngineStats stats() const;
  void shutdown();

  const EngineConfig& config() const { return config_; }
  const EngineCore& core() const { return *core_; }
  const Tokenizer& tokenizer() const { return *tok_; }
  std::shared_ptr<const Tokenizer> tokenizer_ptr() const { return tok_; }
  const std::optional<ChatTemplate>& chat_template() const { return chat_template_; }
  void set_step_observer(std::function<void(int64_t)> fn) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    step_observer_ = std::move(fn);
  }

 private:
  // Per sample (child request) output state; touched only by the loop thread.
  struct Tracked {
    std::shared_ptr<RequestStream> stream;
    std::string parent_id;
    int32_t index = 0;
    int32_t logprobs = -1;
    std::unique_ptr<StreamingDetokenizer> detok;
    std::unique_ptr<StopMatcher> stop;
    double arrival = 0, first_token = 0;
    bool done = false;
  };
  struct Incoming {
    std::unique_ptr<Request> req;
    Tracked tracked;
  };

  void run();
  void drain_inbox();
  void emit(const CoreOutput& o);

  EngineConfig config_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<EngineCore> core_;
  std::shared_ptr<const Tokenizer> tok_;
  std::optional<ChatTemplate> chat_template_;
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Incoming> inbox_;
  std::vector<std::string> cancels_;
  bool stopping_ = false;
  uint64_t next_id_ = 0;
  uint64_t next_seq_ = 0;
  std::unordered_map<std::string, std::vector<std::string>> children_;  // parent id -> child ids (under mu_)
  std::unordered_map<std::string, Tracked> tracked_;                    // loop thread only
  std::mt19937_64 seed_rng_{std::random_device{}()};

  std::atomic<int64_t> pending_{0};
  mutable std::mutex stats_mu_;
  EngineStats stats_;
  std::function<void(int64_t)> step_observer_;  // under stats_mu_
};

Result<std::shared_ptr<RequestStream>> EngineLoop::submit(GenerateRequest g) {
  if (g.n < 1 || g.n > 128) return invalid_argument("n must be in [1, 128], got {}", g.n);
  PAGODA_RETURN_IF_ERROR(g.sampling.validate());
  std::vector<int32_t> prompt = g.prompt_ids;
  if (prompt.empty()) {
    EncodeOptions eo;
    eo.add_special = g.add_special_tokens;
    eo.parse_special = g.parse_special_tokens;
    prompt = tok_->encode(g.prompt, eo);
  }
  const int64_t max_len = core_->max_model_len();
  const int64_t vocab = core_->model_config().vocab_size;
  // Validate here too (the core re-checks): errors must reach the caller synchronously.
  if (prompt.empty()) return invalid_argument("the prompt is empty");
  for (int32_t t : prompt)
    if (t < 0 || t >= vocab) return invalid_argument("prompt token id {} is outside the vocabulary [0, {})", t, vocab);
  const int64_t plen = static_cast<int64_t>(prompt.size());
  if (plen >= max_len)
    return out_of_range("the prompt has {} tokens, but this model's maximum length is {} tokens (prompt plus at least one generated token)", plen, max_len);
  if (g.stop.max_tokens > 0 && plen + g.stop.max_tokens > max_len)
    return out_of_range("this model's maximum length is {} tokens, but {} were requested ({} in the prompt, {} to generate)",
                        max_len, plen + g.stop.max_tokens, plen, g.stop.max_tokens);
  if (g.stop.max_tokens == 0) return invalid_argument("max_tokens must be at least 1");
  if (g.stop.min_tokens < 0 || (g.stop.max_tokens > 0 && g.stop.min_tokens > g.stop.max_tokens))
    return invalid_argument("min_tokens must be in [0, max_tokens], got {}", g.stop.min_tokens);
  for (int32_t t : g.stop.stop_token_ids)
    if (t < 0 || t >= vocab) return invalid_argument("stop token id {} is outside the vocabulary", t);

  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) return make_status(StatusCode::kCancelled, "the engine is shutting down");
  std::string id = g.request_id.empty() ? fmt::format("req-{}", next_id_++) : g.request_id;
  if (children_.count(id)) return invalid_argument("request id '{}' is already in use", id);
  auto stream = std::make_shared<RequestStream>(id, g.n);
  const uint64_t base_seed = g.sampling.seed ? *g.sampling.seed : seed_rng_();
  std::vector<int32_t> eos = tok_->stop_ids();
  std::vector<std::string> child_ids;
  for (int32_t i = 0; i < g.n; ++i) {
    auto r = std::make_unique<Request>();
    r->id = g.n == 1 ? id : fmt::format("{}#{}", id, i);
    r->prompt = prompt;
    r->sampling = g.sampling;
    r->stop = g.stop;
    r->eos_token_ids = eos;
    r->priority = g.priority;
    r->arrival_seq = next_seq_++;
    r->seed = base_seed + static_cast<uint64_t>(i);
    if (i > 0) r->prefill_leader = fmt::format("{}#0", id);
    Tracked t;
    t.stream = stream;
    t.parent_id = id;
    t.index = i;
    t.logprobs = g.sampling.logprobs;
    t.detok = std::make_unique<StreamingDetokenizer>(tok_, g.skip_special_tokens);
    t.stop = std::make_unique<StopMatcher>(g.stop.stop, g.stop.include_stop_str_in_output);
    child_ids.push_back(r->id);
    inbox_.push_back({std::move(r), std::move(t)});
  }
  children_[id] = std::move(child_ids);
  pending_ += g.n;
  lock.unlock();
  cv_.notify_all();
  return stream;
}

void EngineLoop::cancel(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_all();
}

EngineStats EngineLoop::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void EngineLoop::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::drain_inbox() {
  std::vector<Incoming> inbox;
  std::vector<std::string> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox.swap(inbox_);
    cancels.swap(cancels_);
    if (stopping_) {
      // Cancel everything still in flight.
      for (const auto& [parent, kids] : children_) cancels.push_back(parent);
    }
  }
  const double now = core_->now();
  for (auto& in : inbox) {
    in.req->arrival_time = now;
    in.tracked.arrival = now;
    const std::string id = in.req->id;
    Status st = core_->add_request(std::move(in.req));
    tracked_[id] = std::move(in.tracked);
    if (!st.ok()) {
      CoreOutput o;
      o.id = id;
      o.finished = true;
      o.status = RequestStatus::kFinishedError;
      o.error = st.message();
      emit(o);
    }
  }
  for (const auto& parent : cancels) {
    std::vector<std::string> kids;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = children_.find(parent);
      if (it != children_.end()) kids = it->second;
    }
    for (const auto& k : kids) core_->finish(k, RequestStatus::kFinishedAborted);
  }
}

void EngineLoop::emit(const CoreOutput& o) {
  auto it = tracked_.find(o.id);
  if (it == tracked_.end() || it->second.done) return;
  Tracked& t = it->second;
  RequestOutput out;
  out.request_id = t.parent_id;
  out.index = t.index;
  out.num_prompt_tokens = o.num_prompt_tokens;
  out.num_cached_tokens = o.num_cached_tokens;
  out.num_output_tokens = o.num_output_tokens;
  out.arrival_time = t.arrival;
  out.first_scheduled_time = o.first_scheduled_time;
  out.time = core_->now();
  bool stopped_by_string = false;
  if (o.has_token) {
    if (t.first_token == 0) t.first_token = out.time;
    TokenOutput tok;
    tok.token = o.sample.token;
    tok.logprob = o.sample.logprob;
    tok.top = o.sample.top;
    out.tokens.push_back(std::move(tok));
    out.prompt_logprobs = o.prompt_logprobs;
    try {
      StopMatcher::Step s = t.stop->push(t.detok->push(o.sample.token));
      out.text = std::move(s.emit);
      if (s.stopped && !o.finished) {
        stopped_by_string = true;
        out.stop_reason = s.matched;
        core_->finish(o.id, RequestStatus::kFinishedStopped);
      } else if (s.stopped) {
        stopped_by_string = true;
        out.stop_reason = s.matched;
      }
    } catch (const std::exception& e) {
      core_->finish(o.id, RequestStatus::kFinishedError, e.what());
      out.finished = true;
      out.finish_reason = "error";
      out.error = fmt::format("output processing failed: {}", e.what());
    }
  }
  out.first_token_time = t.first_token;
  if (!out.finished) {
    if (stopped_by_string) {
      out.finished = true;
      out.finish_reason = "stop";
    } else if (o.finished) {
      out.finished = true;
      out.finish_reason = finish_reason_name(o.status);
      out.error = o.error;
      if (o.status != RequestStatus::kFinishedError && o.status != RequestStatus::kFinishedAborted)
        out.text += t.stop->push(t.detok->flush()).emit + t.stop->flush();
    }
  }
  if (out.finished) {
    t.done = true;
    --pending_;
  }
  auto stream = t.stream;
  if (out.finished) {
    const std::string parent = t.parent_id;
    tracked_.erase(it);
    std::lock_guard<std::mutex> lock(mu_);
    auto c = children_.find(parent);
    if (c != children_.end()) {
      std::erase(c->second, o.id);
      if (c->second.empty()) children_.erase(c);
    }
  }
  stream->push(std::move(out));
}

void EngineLoop::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      const bool idle = !core_->has_unfinished();
      if (idle && inbox_.empty() && cancels_.empty() && !stopping_) {
        cv_.wait(lock, [&] { return !inbox_.empty() || !cancels_.empty() || stopping_; });
        if (config_.max_queue_delay_us > 0 && !stopping_) {
          // Dynamic batching delay: gather more arrivals before the first step.
          cv_.wait_for(lock, std::chrono::microseconds(config_.max_queue_delay_us), [&] { return stopping_; });
        }
      }
    }
    drain_inbox();
    std::vector<CoreOutput> outs;
    const int64_t steps_before = core_->stats().steps;
    try {
      outs = core_->step();  // a failed step finishes its requests with the error itself
    } catch (...) {
      // Only if failing the requests failed as well: every stream still open ends with an error.
      outs.clear();
      std::vector<std::string> ids;
      for (const auto& [id, t] : tracked_) ids.push_back(id);
      for (const auto& id : ids) {
        CoreOutput o;
        o.id = id;
        o.finished = true;
        o.status = RequestStatus::kFinishedError;
        o.error = "engine step failed, and so did finishing its requests";
        emit(o);
      }
    }
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      const auto& sch = core_->scheduler();
      const auto& kv = core_->kv_manager();
      stats_.num_running = static_cast<int64_t>(sch.num_running());
      stats_.num_waiting = static_cast<int64_t>(sch.num_waiting());
      stats_.kv_cache_usage = kv.usage();
      stats_.prefix_cache_queries = kv.prefix_stats().queries;
      stats_.prefix_cache_hits = kv.prefix_stats().hits;
      stats_.kv_tier = kv.tier_stats();
      stats_.kv_host_tier_blocks = kv.num_host_blocks();
      stats_.kv_host_tier_free_blocks = kv.num_free_host_blocks();
      stats_.kv_disk_tier_bytes = kv.disk_tier() ? kv.disk_tier()->bytes_used() : 0;
      stats_.num_preemptions = sch.num_preemptions();
      stats_.prompt_tokens_total = core_->stats().prompt_tokens;
      stats_.generation_tokens_total = core_->stats().generation_tokens;
      stats_.steps = core_->stats().steps;
      stats_.spec_num_drafts = core_->stats().spec_num_drafts;
      stats_.spec_num_draft_tokens = core_->stats().spec_num_draft_tokens;
      stats_.spec_num_accepted_tokens = core_->stats().spec_num_accepted_tokens;
      stats_.spec_accepted_per_position = core_->stats().spec_accepted_per_position;
      stats_.num_kv_blocks = kv.pool().num_usable_blocks();
      stats_.free_kv_blocks = kv.num_free_blocks();
      const int64_t used_blocks = stats_.num_kv_blocks - stats_.free_kv_blocks;
      if (core_->stats().steps != steps_before && sch.num_running() > 0 && used_blocks > 0) {
        ++stats_.kv_util_steps;
        stats_.kv_tokens_held_sum += static_cast<double>(sch.num_running_cached_tokens());
        stats_.kv_tokens_allocated_sum += static_cast<double>(used_blocks) * config_.block_size;
      }
      if (stats_.device_memory_total == 0 || core_->stats().steps % 64 == 0) {
        const DeviceMemoryStats dm = core_->executor().device_memory();
        stats_.device_memory_used = dm.used;
        stats_.device_memory_total = dm.total;
      }
      if (step_observer_ && core_->stats().steps != steps_before) step_observer_(core_->stats().last_step_tokens);
    }
    // Outputs go out after the stats are updated: a client that sees its final output also sees
    // its blocks freed.
    for (const auto& o : outs) emit(o);
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && inbox_.empty() && !core_->has_unfinished() && tracked_.empty()) break;
  }
}

// ---- Engine ----

Engine::Engine(std::unique_ptr<EngineLoop> loop) : loop_(std::move(loop)) {}
Engine::~Engine() { shutdown(); }

Result<std::unique_ptr<Engine>> Engine::create(const EngineConfig& requested, const ExecutorDecorator& decorate) {
  PAGODA_ASSIGN_OR_RETURN(const EngineConfig config, resolve_layer_split(requested));
  PAGODA_ASSIGN_OR_RETURN(const DeviceSpec dev, parse_device(config.device));
  ModelLoadOptions lo;
  lo.max_model_len = config.max_model_len;
  // A layer split's CPU part reads its layers' weights prepared for the CPU kernels (the device
  // part's stay views: EngineConfig::n_gpu_layers).
  lo.cpu_kernels = dev.type == Device::kCpu || config.n_gpu_layers > 0;
  lo.cpu_kernels_from_layer = dev.type == Device::kCpu ? 0 : std::max<int64_t>(0, config.n_gpu_layers);
  lo.quantization = config.quantization;
  lo.load_format = config.load_format;
  lo.progress = config.load_progress;
  lo.tensor_parallel_size = config.tensor_parallel_size;  // rank 0's shards (EngineCore::create starts the others)
  // A tensor-parallel rank's plan is checked on its own shards (EngineCore::create), not the whole model's.
  if (config.tensor_parallel_size == 1)
    lo.precheck = [&config](const ModelConfig& mc, int64_t weight_bytes, int64_t) {
      return precheck_memory_plan(config, mc, weight_bytes);
    };
  // The tokenizer and the chat template read their own copy of the file's metadata: they load on
  // a thread of their own while the weights are read (a large vocabulary takes a few hundred ms).
  // A dummy load's config.json file: the tokenizer of the directory holding it.
  std::string tok_path = config.tokenizer.empty() ? config.model : config.tokenizer;
  if (config.tokenizer.empty() && config.load_format == LoadFormat::kDummy && config.model.ends_with(".json")) {
    std::error_code ec;
    tok_path = std::filesystem::absolute(config.model, ec).parent_path().string();
  }
  struct TextSide {
    Result<std::shared_ptr<const Tokenizer>> tok = Status(StatusCode::kInternal, "not loaded");
    std::optional<ChatTemplate> chat_template;
  };
  std::future<TextSide> text_side = std::async(std::launch::async, [tok_path] {
    TextSide t;
    startup_profile::Scope phase("tokenizer and chat template");
    try {
      t.tok = Tokenizer::load(tok_path);
      // The chat template is optional (base models have none): without it only apply_chat_template fails.
      if (t.tok.ok())
        if (auto ct = load_chat_template(tok_path); ct.ok()) t.chat_template = std::move(*ct);
    } catch (const std::exception& e) {
      t.tok = Status(StatusCode::kInternal, fmt::format("loading the tokenizer failed: {}", e.what()));
    }
    return t;
  });
  startup_profile::Scope model_phase("model");
  std::unique_ptr<EnginePlan> plan = EnginePlan::open_for(config, dev.type != Device::kCpu);
  ModelLoadParams::PackedCounts packed;
  lo.packed_in = plan->in();
  lo.packed_out = plan->out();
  lo.packed_counts = &packed;
  auto loaded = load_model(config.model, lo);
  if (loaded.ok() && packed.weights > 0)
    model_phase.set_detail(fmt::format("plan {}: {} of {} packed weights mapped from it", plan->state(), packed.reused,
                                       packed.weights));
  model_phase.stop();
  TextSide text = text_side.get();  // joined on every path: the thread reads tok_path
  PAGODA_ASSIGN_OR_RETURN(LoadedModel model, std::move(loaded));
  if (!text.tok.ok() && config.load_format == LoadFormat::kDummy && config.tokenizer.empty())
    return Status(text.tok.status().code(),
                  fmt::format("--load-format dummy: {} (random weights have no tokenizer of their own: pass --tokenizer, "
                              "a model directory or tokenizer.json whose vocabulary fits the config's {} tokens)",
                              text.tok.status().message(), model.config.vocab_size));
  PAGODA_ASSIGN_OR_RETURN(auto tok, std::move(text.tok));
  if (tok->vocab_size() > model.config.vocab_size)
    return invalid_argument("tokenizer has {} tokens but the model's vocabulary is {}", tok->vocab_size(), model.config.vocab_size);
  std::optional<ChatTemplate> chat_template = std::move(text.chat_template);
  auto pool = std::make_unique<ThreadPool>(config.threads);
  startup_profile::Scope core_phase("engine core");
  PAGODA_ASSIGN_OR_RETURN(auto core, EngineCore::create(config, std::move(model), *pool, decorate));
  core_phase.stop();
  // The plan's views point into the model the core now owns: written while the engine runs,
  // joined before the core goes (Engine::shutdown).
  plan->write_async(packed.weights, packed.reused);
  auto engine = std::unique_ptr<Engine>(new Engine(
      std::make_unique<EngineLoop>(config, std::move(pool), std::move(core), std::move(tok), std::move(chat_template))));
  engine->plan_ = std::move(plan);
  return engine;
}

Result<std::shared_ptr<RequestStream>> Engine::submit(GenerateRequest request) { return loop_->submit(std::move(request)); }
void Engine::cancel(const std::string& request_id) { loop_->cancel(request_id); }
EngineStats Engine::stats() const { return loop_->stats(); }
const ModelConfig& Engine::model_config() const { return loop_->core().model_config(); }
const Tokenizer& Engine::tokenizer() const { return loop_->tokenizer(); }
std::shared_ptr<const Tokenizer> Engine::tokenizer_ptr() const { return loop_->tokenizer_ptr(); }
const MemoryPlan& Engine::memory_plan() const { return loop_->core().memory_plan(); }
const EngineConfig& Engine::config() const { return loop_->config(); }
int64_t Engine::max_model_len() const { return loop_->core().max_model_len(); }
EngineInfo Engine::info() const {
  const ModelConfig& m = model_config();
  const EngineConfig& c = config();
  return EngineInfo{.model_path = c.model,
                    .model_name = model_name(),
                    .architecture = m.arch_name,
                    .device = c.device,
                    .vocab_size = m.vocab_size,
                    .max_model_len = max_model_len(),
                    .max_num_seqs = c.scheduler.max_num_seqs};
}
std::vector<int32_t> Engine::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  EncodeOptions eo;
  eo.add_special = add_special;
  eo.parse_special = parse_special;
  return loop_->tokenizer().encode(text, eo);
}
std::string Engine::detokenize(std::span<const int32_t> ids, bool skip_special) const {
  return loop_->tokenizer().decode(ids, skip_special);
}
std::string Engine::token_piece(int32_t id) const { return loop_->tokenizer().token_bytes(id); }
bool Engine::has_chat_template() const { return loop_->chat_template().has_value(); }
std::string Engine::chat_template_source() const {
  return loop_->chat_template() ? loop_->chat_template()->source() : std::string();
}
Result<std::string> Engine::apply_chat_template(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                                const nlohmann::ordered_json& tools,
                                                const nlohmann::ordered_json& extra_context) const {
  const auto& t = loop_->chat_template();
  if (!t) return make_status(StatusCode::kUnimplemented, "this model has no chat template; use /v1/completions");
  ChatTemplateOptions o;
  o.add_generation_prompt = add_generation_prompt;
  o.tools = tools;
  if (extra_context.is_object()) o.extra_context = extra_context;
  return t->render(messages, o);
}
std::string Engine::model_name() const {
  std::string p = loop_->config().model;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.find_last_of('/');
  if (slash != std::string::npos) p = p.substr(slash + 1);
  if (p.size() > 5 && p.ends_with(".gguf")) p.resize(p.size() - 5);
  return p;
}
void Engine::set_step_observer(std::function<void(int64_t)> fn) { loop_->set_step_observer(std::move(fn)); }
void Engine::shutdown() {
  if (plan_) plan_->join();
  if (loop_) loop_->shutdown();
}

}  // namespace pagoda
