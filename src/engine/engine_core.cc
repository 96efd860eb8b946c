#include "engine/engine_core.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>

#include <xxhash.h>

#include "common/log.h"
#include "common/startup_profile.h"
#include "core/kv_window.h"
#include "engine/draft_model_proposer.h"
#include "engine/draft_head_proposer.h"
#include "engine/tensor_parallel_executor.h"
#include "runtime/cuda_executor.h"
#include "engine/device_spec.h"
#include "model/layer_linears.h"
#include "runtime/ngram_proposer.h"
#include "runtime/split_executor.h"
#include "runtime/weight_offload_plan.h"

namespace pagoda {
namespace {
double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
constexpr int64_t kCpuDefaultKvMemory = int64_t{2} << 30;

// The disk tier's namespace: the backend, the model file (path, size, modification time), the KV
// geometry, dtype and block size. Another model, a rewritten file or another cache layout never reads the
// same directory's blocks.
uint64_t kv_tier_namespace(const EngineConfig& config, const ModelConfig& mc, bool cuda) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path path = fs::absolute(config.model, ec);
  int64_t size = 0, mtime = 0;
  fs::path file = path;
  if (fs::is_directory(path, ec)) file = path / "config.json";
  size = static_cast<int64_t>(fs::file_size(file, ec));
  if (ec) size = 0;
  mtime = static_cast<int64_t>(fs::last_write_time(file, ec).time_since_epoch().count());
  // The executors lay a block's bytes out differently (the CPU keeps K transposed).
  std::string key = fmt::format("{}|{}|{}|{}|{}|L{}|H{}|D{}|{}|bs{}", cuda ? "cuda" : "cpu", path.string(), size, mtime, mc.arch_name,
                                mc.num_layers, mc.num_kv_heads, mc.head_dim, dtype_name(config.kv_dtype), config.block_size);
  // Random weights' KV blocks are not a real load's of the same path.
  if (config.load_format == LoadFormat::kDummy) key += "|dummy";
  return XXH3_64bits(key.data(), key.size());
}
}  // namespace

// The executor's host blocks as the KV cache manager's disk tier moves them.
class EngineCore::HostBlockIo final : public KvHostBlockIo {
 public:
  explicit HostBlockIo(ModelExecutor& executor) : executor_(executor) {}
  int64_t host_block_bytes() const override { return executor_.host_block_bytes(); }
  void read_host_block(BlockId block, std::span<uint8_t> dst) override { executor_.read_host_block(block, dst); }
  void write_host_block(BlockId block, std::span<const uint8_t> src) override { executor_.write_host_block(block, src); }

 private:
  ModelExecutor& executor_;
};

EngineCore::~EngineCore() = default;

double EngineCore::now() const { return steady_seconds() - t0_; }

MemoryPlanInput memory_plan_input(const EngineConfig& config, const ModelConfig& mc, int64_t weight_bytes) {
  MemoryPlanInput in;
  in.config = mc;
  in.weight_bytes = weight_bytes;
  in.max_model_len = config.max_model_len > 0 ? config.max_model_len : mc.max_position_embeddings;
  in.max_num_seqs = config.scheduler.max_num_seqs;
  in.max_num_batched_tokens = config.scheduler.max_num_batched_tokens;
  in.block_size = config.block_size;
  in.kv_dtype = config.kv_dtype;
  in.device_memory = host_memory_bytes();
  in.memory_utilization = config.memory_utilization;
  in.kv_cache_memory = config.kv_cache_memory;
  in.kv_host_tier_bytes = config.kv_tiers.host_bytes;
  in.kv_disk_tier_bytes = config.kv_tiers.disk_dir.empty() ? 0 : config.kv_tiers.disk_bytes;
  in.kv_window_eviction = config.sliding_window_eviction;
  auto dev = parse_device(config.device);
  if (!(dev.ok() && dev->type == Device::kCuda) && in.kv_cache_memory <= 0 && in.memory_utilization <= 0) {
    // CPU default: enough KV for every sequence at full length (whole blocks, plus one block of
    // lookahead each), and the null block, capped at 2 GiB.
    const int64_t window = kv_eviction_window(in);
    const int64_t bs = config.block_size;
    const int64_t seq_tokens =
        window > 0 ? kv_window_blocks_held(window, bs, in.max_model_len, in.max_num_batched_tokens) * bs : in.max_model_len;
    const int64_t blocks = in.max_num_seqs * ((seq_tokens + bs - 1) / bs + 1) + 1;
    const int64_t want = blocks * bs * mc.kv_bytes_per_token(config.kv_dtype);
    in.kv_cache_memory = std::min(want, kCpuDefaultKvMemory);
  }
  return in;
}

// The draft model's executor options: the target's, its weights all resident and every layer on
// the device (the offload and the layer split the target's options ask for are the target's).
CudaExecutorOptions draft_options(CudaExecutorOptions co) {
  co.cpu_offload_bytes = 0;
  co.layers = {};
  return co;
}

// A CPU + GPU layer split (EngineConfig::n_gpu_layers, resolved by resolve_layer_split): the number
// of layers on the device when the split is on (0 < N < layers), else 0.
int64_t split_device_layers(const EngineConfig& config, const ModelConfig& mc) {
  auto dev = parse_device(config.device);
  if (!dev.ok() || dev->type != Device::kCuda) return 0;
  return config.n_gpu_layers > 0 && config.n_gpu_layers < mc.num_layers ? config.n_gpu_layers : 0;
}

// The CPU part of a split reads layers [first, L) and the output head through the CPU kernels: the
// model must have been loaded with them prepared (ModelLoadOptions::cpu_kernels_from_layer).
Status check_cpu_part_weights(const Model& model, int64_t first) {
  const LayerLinears ll = layer_linears(model);
  std::vector<LinearId> ids = ll.outside;
  for (size_t l = static_cast<size_t>(first); l < ll.layers.size(); ++l) ids.insert(ids.end(), ll.layers[l].begin(), ll.layers[l].end());
  for (LinearId id : ids)
    if (model.weights().linear(id).cpu == nullptr)
      return invalid_argument("--n-gpu-layers {}: weight '{}' of the CPU part was loaded without CPU kernels (load the model "
                              "with ModelLoadOptions::cpu_kernels_from_layer = {})",
                              first, model.weights().linear(id).name, first);
  return {};
}

int64_t draft_lookahead_blocks(const EngineConfig& config) {
  const int64_t bs = config.block_size;
  return int64_t{config.scheduler.max_num_seqs} * ((config.speculative.num_speculative_tokens + bs - 1) / bs + 1);
}

DraftHeadDeviceMemory device_draft_head_memory(const DraftHead& h, const Tensor& target_embedding, DType act,
                                               const EngineConfig& config) {
  const int64_t seqs = config.scheduler.max_num_seqs;
  const int64_t rows = std::max<int64_t>(config.scheduler.max_num_batched_tokens, seqs);
  return draft_head_device_memory(h, act, h.embedding.data() == target_embedding.data(), rows, seqs);
}

void add_device_draft_head(MemoryPlanInput& in, const DraftHeadDeviceMemory& m, const EngineConfig& config) {
  in.draft_kv_bytes_per_token = m.kv_bytes_per_token;
  in.draft_fixed_bytes =
      m.weights + m.pass_buffers + (draft_lookahead_blocks(config) + 1) * m.kv_bytes_per_token * config.block_size;
  in.draft_label = "draft head";
}

namespace {
// The EAGLE-3 head or MTP module of config.speculative for `target`, with a RoPE table of max_len
// positions; an MTP module shares the target's CPU output head where the target has one.
Result<std::unique_ptr<DraftHead>> load_speculative_head(const EngineConfig& config, const LoadedModel& target,
                                                         int64_t max_len) {
  const SpeculativeConfig& sc = config.speculative;
  const ModelWeights& tw = target.model->weights();
  auto head = sc.method == "eagle3"
                  ? load_eagle3_head(sc.model, target.config, tw.token_embd, max_len)
                  : load_mimo_mtp_head(sc.model.empty() ? config.model : sc.model, target.config, tw.token_embd,
                                       tw.linear(tw.output).cpu, max_len);
  if (!head.ok())
    return invalid_argument("cannot load the {}: {}", sc.method == "eagle3" ? "EAGLE-3 head" : "MTP module",
                            head.status().to_string());
  return std::move(*head);
}
}  // namespace

int64_t kv_host_tier_blocks(const EngineConfig&, const MemoryPlan& plan) {
  return std::min<int64_t>(plan.host_tier_blocks, std::numeric_limits<int32_t>::max() - 1);
}

Status precheck_memory_plan(const EngineConfig& config, const ModelConfig& mc, int64_t weight_bytes) {
  PAGODA_ASSIGN_OR_RETURN(const DeviceSpec dev, parse_device(config.device));
  MemoryPlanInput in = memory_plan_input(config, mc, weight_bytes);
  if (dev.type == Device::kCuda) {
    // The device's own terms (weights in the compute dtype, workspace) need the built model:
    // here only the KV cache counts (weights 0), a lower bound of what the full plan needs, so
    // this refuses nothing the full plan would accept.
    auto info = cuda_memory_info(dev.index);
    if (!info.ok()) return Status();  // the executor's own set-up reports it
    in.weight_bytes = 0;
    in.device_memory = info->total;
    in.device_reserved = info->total - info->free;
    if (in.kv_cache_memory <= 0 && in.memory_utilization <= 0) in.memory_utilization = 0.9;
    set_layer_split(in, split_device_layers(config, mc));
  }
  return plan_memory(in).status();
}

Result<std::unique_ptr<EngineCore>> EngineCore::create(const EngineConfig& config, LoadedModel model, ThreadPool& pool,
                                                      const ExecutorDecorator& decorate) {
  std::unique_ptr<EngineCore> core(new EngineCore());
  core->t0_ = steady_seconds();
  core->config_ = config;
  core->pool_ = &pool;
  const ModelConfig& mc = model.config;
  PAGODA_ASSIGN_OR_RETURN(const DeviceSpec dev, parse_device(config.device));
  const bool cuda = dev.type == Device::kCuda;
  PAGODA_RETURN_IF_ERROR(config.speculative.validate());
  // A CPU + GPU layer split: the first N layers on the device, the rest and the head on the CPU.
  const int64_t gpu_layers = split_device_layers(config, mc);
  {
    PAGODA_ASSIGN_OR_RETURN(const EngineConfig resolved, resolve_layer_split(config));
    if (resolved.device != config.device)
      return invalid_argument("--n-gpu-layers 0 with a CUDA device is the CPU device: resolve_layer_split() first");
  }
  if (gpu_layers > 0) {
    if (config.cpu_offload_bytes > 0)
      return invalid_argument("--n-gpu-layers and --cpu-offload-gb both keep weights off the GPU: use one of them");
    if (config.kv_tiers.host_bytes > 0 || !config.kv_tiers.disk_dir.empty())
      return unimplemented("--n-gpu-layers: the KV host and disk tiers (and swap preemption) are not supported with a "
                           "CPU + GPU layer split");
    if (config.speculative.enabled() && config.speculative.method == "eagle3")
      return unimplemented("--n-gpu-layers: speculative method eagle3 reads the target's hidden states, which a CPU + GPU "
                           "layer split does not capture (use ngram or draft)");
    PAGODA_RETURN_IF_ERROR(check_cpu_part_weights(*model.model, gpu_layers));
    log_info("engine", "layer split: layers [0, {}) on {}, layers [{}, {}) and the output head on the CPU", gpu_layers,
             config.device, gpu_layers, mc.num_layers);
  }
  // Tensor parallelism: `model` is rank 0's shards (the other ranks are started below).
  const TensorParallelPart& part = model.tensor_parallel;
  if (part.size != config.tensor_parallel_size)
    return invalid_argument("the model was loaded for {} tensor-parallel ranks but the engine runs {} "
                            "(ModelLoadOptions::tensor_parallel_size)", part.size, config.tensor_parallel_size);
  if (part.size > 1) {
    if (gpu_layers > 0) return unimplemented("--tensor-parallel-size with --n-gpu-layers: a CPU + GPU layer split is one GPU's");
    if (config.speculative.enabled() && config.speculative.method != "ngram")
      return unimplemented("--tensor-parallel-size: speculative method {} needs the target's hidden states, output head or "
                           "a second model on one device; ngram runs", config.speculative.method);
    if (!config.kv_tiers.disk_dir.empty())
      return unimplemented("--tensor-parallel-size: the KV disk tier (--kv-disk-dir) stores one process's blocks");
    if (config.cpu_offload_bytes > 0) return unimplemented("--tensor-parallel-size with weight offload (--cpu-offload-gb)");
  }
  // The planner's KV bytes a token are a rank's (its KV heads) under tensor parallelism.
  const ModelConfig& plan_mc = part.size > 1 ? model.model->config() : mc;
  // The memory planner refuses dtypes no cache stores; the FP8 cache is the CUDA backend's only.
  if (!cuda && config.kv_dtype == DType::kF8E4M3)
    return invalid_argument("KV cache dtype f8_e4m3 needs --device cuda: the CPU backend stores f16, bf16 or f32");
  CudaExecutorOptions co;
  co.device = dev.index;
  co.dtype = config.dtype;
  co.max_num_tokens = config.scheduler.max_num_batched_tokens;
  co.max_num_seqs = config.scheduler.max_num_seqs;
  co.cuda_graphs = config.cuda_graphs;
  co.batch_invariant = config.batch_invariant;
  co.tuning = config.tuning;
  std::unique_ptr<TensorParallelGroup> tp_group;
  if (part.size > 1) {
    // The other ranks start loading their shards; CUDA: co gets rank 0's communicator (NCCL: once
    // every rank has loaded and joined).
    TensorParallelSetup ts;
    ts.device_index = dev.index;
    ts.model = config.model;
    ts.load_format = config.load_format;
    ts.quantization = config.quantization;
    ts.threads = config.threads;
    PAGODA_ASSIGN_OR_RETURN(tp_group, start_tensor_parallel(ts, model, cuda ? &co : nullptr));
  }

  int64_t weight_bytes = 0;
  for (const auto& name : model.weights->names())
    if (const Tensor* t = model.weights->find(name)) weight_bytes += t->nbytes();
  MemoryPlanInput in = memory_plan_input(config, plan_mc, weight_bytes);
  // A draft model (speculative method "draft") is loaded first: on a GPU its share of the device
  // memory comes out of the same plan.
  if (config.speculative.enabled() && config.speculative.method == "draft") {
    ModelLoadOptions lo;
    lo.max_model_len = in.max_model_len;
    lo.cpu_kernels = !cuda;
    auto draft = load_model(config.speculative.model, lo);
    if (!draft.ok()) return invalid_argument("cannot load the speculative draft model: {}", draft.status().to_string());
    if (draft->config.vocab_size != mc.vocab_size)
      return invalid_argument("the draft model {} has a vocabulary of {} tokens but the target model has {}: a draft model "
                              "must share the target's tokenizer",
                              config.speculative.model, draft->config.vocab_size, mc.vocab_size);
    core->draft_model_ = std::move(*draft);
  }
  // An EAGLE-3 head or MTP module too: on a GPU with --spec-device-head the plan counts it.
  if (config.speculative.enabled() && (config.speculative.method == "eagle3" || config.speculative.method == "mtp")) {
    PAGODA_ASSIGN_OR_RETURN(core->draft_head_, load_speculative_head(config, model, in.max_model_len));
  }
  if (cuda) {
    // Device memory: the CUDA executor's own terms (weights in its compute dtype, workspace,
    // logits + sampling scratch); the budget is a fraction of the GPU (cudaMemGetInfo), less what
    // is already in use there.
    co.cpu_offload_bytes = std::max<int64_t>(0, config.cpu_offload_bytes);
    if (gpu_layers > 0) co.layers = {0, gpu_layers};
    PAGODA_ASSIGN_OR_RETURN(CudaMemoryTerms terms, cuda_memory_terms(*model.model, co));
    if (core->draft_model_.model) {
      // The draft's executor terms, its lookahead and null blocks, and a block per target block.
      PAGODA_RETURN_IF_ERROR(cuda_supports_model(core->draft_model_.config));
      PAGODA_ASSIGN_OR_RETURN(const CudaMemoryTerms dt, cuda_memory_terms(*core->draft_model_.model, draft_options(co)));
      in.draft_kv_bytes_per_token = core->draft_model_.config.kv_bytes_per_token(config.kv_dtype);
      in.draft_fixed_bytes = dt.weights + dt.workspace + dt.logits + dt.overhead +
                             (draft_lookahead_blocks(config) + 1) * in.draft_kv_bytes_per_token * config.block_size;
    }
    if (core->draft_head_ != nullptr && config.speculative.device_head) {
      add_device_draft_head(in,
                            device_draft_head_memory(*core->draft_head_, model.model->weights().token_embd,
                                                     terms.compute_dtype, config),
                            config);
    }
    PAGODA_ASSIGN_OR_RETURN(const CudaMemoryInfo info, cuda_memory_info(dev.index));
    in.workspace_bytes = terms.workspace;
    in.logits_bytes = terms.logits;
    in.overhead_bytes = terms.overhead;
    in.device_memory = info.total;
    in.device_reserved = info.total - info.free;
    if (in.kv_cache_memory <= 0 && in.memory_utilization <= 0) in.memory_utilization = 0.9;
    // The staged communicator's ranks share this GPU: each plans its share of the fraction.
    if (tp_group != nullptr && tp_group->setup().comm == "staged") {
      in.memory_utilization /= part.size;
      in.kv_cache_memory /= part.size;
    }
    set_layer_split(in, split_device_layers(config, mc));
    if (config.cpu_offload_bytes == EngineConfig::kAutoOffload && in.kv_cache_memory <= 0 && gpu_layers == 0 &&
        tp_group == nullptr) {
      // Auto offload: the fewest streamed layers that leave room for one sequence of the
      // max_model_len asked for, or of at most kAutoOffloadKvTokens tokens when it is the model's
      // own context (a long context's KV is the planner's error to report, with its advice, not a
      // reason to stream more).
      const int64_t kv_tokens = config.max_model_len > 0
                                    ? in.max_model_len
                                    : std::min<int64_t>(in.max_model_len, EngineConfig::kAutoOffloadKvTokens);
      const int64_t one_sequence = (kv_tokens + config.block_size - 1) / config.block_size + 2;  // + null block
      const int64_t kv_min = one_sequence * config.block_size *
                             (mc.kv_bytes_per_token(config.kv_dtype) + in.draft_kv_bytes_per_token);
      const int64_t budget = static_cast<int64_t>(in.memory_utilization * static_cast<double>(info.total));
      const int64_t weight_budget =
          budget - terms.workspace - terms.logits - terms.overhead - in.device_reserved - in.draft_fixed_bytes - kv_min;
      if (terms.weights > weight_budget) {
        PAGODA_ASSIGN_OR_RETURN(const CudaLayerWeightBytes lb, cuda_layer_weight_bytes(*model.model, co));
        const WeightOffloadPlan fit = plan_weight_offload_to_fit(lb.layers, lb.outside, weight_budget);
        if (fit.num_streamed() > 0) {
          co.cpu_offload_bytes = fit.streamed_bytes;
          PAGODA_ASSIGN_OR_RETURN(terms, cuda_memory_terms(*model.model, co));
          log_info("engine", "the model's weights ({:.2f} GB on the device) do not fit the budget with one sequence of {} "
                   "tokens: weight offload chosen ({}); --cpu-offload-gb 0 refuses instead",
                   (terms.weights + terms.offloaded) / 1e9, kv_tokens, fit.summary());
        }
      }
    }
    in.weight_bytes = terms.weights;
    in.offloaded_weight_bytes = terms.offloaded;
    in.offload_summary = terms.offload_summary;
  }
  PAGODA_ASSIGN_OR_RETURN(core->plan_, plan_memory(in));
  core->max_model_len_ = core->plan_.max_model_len;
  if (core->max_model_len_ > model.max_model_len)
    return invalid_argument("max_model_len {} exceeds the RoPE table the model was loaded with ({})", core->max_model_len_,
                            model.max_model_len);

  const int64_t num_blocks = core->plan_.num_blocks + 1;  // + null block
  const KvTierConfig& tiers = config.kv_tiers;
  if (!tiers.disk_dir.empty() && !config.enable_prefix_caching)
    return invalid_argument("the KV disk tier (--kv-disk-dir) holds prefix-cache blocks: it needs prefix caching");
  const int32_t host_blocks = static_cast<int32_t>(kv_host_tier_blocks(config, core->plan_));
  core->kv_manager_ = std::make_unique<KvCacheManager>(static_cast<int32_t>(num_blocks), config.block_size,
                                                       config.enable_prefix_caching, host_blocks);
  core->kv_manager_->set_sliding_window(static_cast<int32_t>(core->plan_.kv_window));
  SchedulerConfig sc = config.scheduler;
  sc.max_model_len = static_cast<int32_t>(core->max_model_len_);
  if (host_blocks > 0) sc.preemption = PreemptionMode::kSwap;
  core->scheduler_ = std::make_unique<Scheduler>(sc, *core->kv_manager_);
  core->model_ = std::move(model);
  KvCacheSpec spec;
  spec.num_blocks = num_blocks;
  spec.block_size = config.block_size;
  spec.dtype = config.kv_dtype;
  spec.num_host_blocks = host_blocks > 0 ? host_blocks + 1 : 0;
  startup_profile::Scope executor_phase("engine core/executor");
  if (cuda) {
    co.max_model_len = core->max_model_len_;
    if (tp_group != nullptr) {
      PAGODA_ASSIGN_OR_RETURN(core->executor_, make_tensor_parallel_executor(std::move(tp_group), core->model_, spec, &co, pool));
    } else {
      PAGODA_ASSIGN_OR_RETURN(core->executor_, make_cuda_executor(*core->model_.model, spec, co));
    }
    if (gpu_layers > 0)
      core->executor_ = make_split_executor(std::move(core->executor_),
                                            make_cpu_executor(*core->model_.model, spec, pool, {gpu_layers, -1}),
                                            core->model_.config.num_layers);
  } else if (tp_group != nullptr) {
    PAGODA_ASSIGN_OR_RETURN(core->executor_, make_tensor_parallel_executor(std::move(tp_group), core->model_, spec, nullptr, pool));
  } else {
    core->executor_ = make_cpu_executor(*core->model_.model, spec, pool);
  }
  executor_phase.stop();
  if (decorate) core->executor_ = decorate(std::move(core->executor_));
  if (!tiers.disk_dir.empty()) {
    core->host_io_ = std::make_unique<HostBlockIo>(*core->executor_);
    PAGODA_ASSIGN_OR_RETURN(std::unique_ptr<DiskTierStore> disk,
                            DiskTierStore::open(tiers.disk_dir, kv_tier_namespace(config, mc, cuda), tiers.disk_bytes,
                                                core->executor_->host_block_bytes()));
    core->kv_manager_->set_disk_tier(std::move(disk), core->host_io_.get());
  }
  core->runner_ = std::make_unique<ModelRunner>(*core->executor_, config.block_size, pool);
  if (config.speculative.enabled()) {
    co.max_model_len = core->max_model_len_;
    PAGODA_ASSIGN_OR_RETURN(std::unique_ptr<Proposer> proposer, core->make_proposer(draft_options(co), cuda));
    core->runner_->set_speculation(config.speculative, std::move(proposer));
  }
  return core;
}

Result<std::unique_ptr<Proposer>> EngineCore::make_proposer(const CudaExecutorOptions& co, bool cuda) {
  const SpeculativeConfig& sc = config_.speculative;
  if (sc.method == "ngram") return std::unique_ptr<Proposer>(std::make_unique<NgramProposer>(sc.ngram_min, sc.ngram_max));
  if (sc.method == "eagle3" || sc.method == "mtp") {
    // On CUDA the head runs on the host (its weights and cache in host memory, the engine's
    // threads), reading the target's states the CUDA executor copies back each step, or with
    // --spec-device-head on the device (in the memory plan's draft share); an MTP module's logits
    // go through the target's output head on the device (no host copy of it).
    const ModelWeights& tw = model_.model->weights();
    std::shared_ptr<const LinearWeight> target_output = tw.linear(tw.output).cpu;
    DraftOutputHead output_head;
    if (sc.method == "mtp" && target_output == nullptr) {
      ModelExecutor* ex = executor_.get();
      if (!ex->output_logits(nullptr, 0, nullptr))
        return unimplemented("the MTP module reads the target's output head, which the {} executor does not offer",
                             ex->device_name());
      output_head = [ex](const float* x, int64_t m, float* logits) {
        PAGODA_CHECK(ex->output_logits(x, m, logits), "the target's output head on {}", ex->device_name());
      };
    }
    PAGODA_CHECK(draft_head_ != nullptr, "speculative method '{}' without a loaded head", sc.method);
    std::unique_ptr<DraftHead> head = std::move(draft_head_);
    if (!executor_->set_hidden_capture(head->capture_after))
      return unimplemented("the {} executor cannot capture the target's hidden states an EAGLE-3 head reads",
                           executor_->device_name());
    int64_t target_bytes = 0;
    for (const auto& name : model_.weights->names())
      if (const Tensor* t = model_.weights->find(name)) target_bytes += t->nbytes();
    const double cost = static_cast<double>(head->weight_bytes) / static_cast<double>(std::max<int64_t>(1, target_bytes));
    // The head's cache holds a row per target token plus every sequence's lookahead.
    const int64_t blocks = plan_.num_blocks + draft_lookahead_blocks(config_) + 1;
    DraftHeadProposer::RunnerFactory runner;
    if (sc.device_head) {
      if (!cuda) return invalid_argument("--spec-device-head needs a CUDA target (device {})", config_.device);
      ModelExecutor* ex = executor_.get();
      const int64_t bs = config_.block_size;
      runner = [ex, blocks, bs, method = sc.method](const DraftHead& h) -> std::unique_ptr<DraftHeadRunner> {
        std::string why;
        auto r = ex->make_draft_head_runner(h, blocks, bs, why);
        if (!r) log_warn("engine", "the {} head runs on the host: {}", method, why);
        return r;
      };
    }
    auto proposer = std::make_unique<DraftHeadProposer>(
        std::move(head), static_cast<int32_t>(blocks), static_cast<int32_t>(config_.block_size),
        config_.kv_dtype == DType::kF8E4M3 ? DType::kF16 : config_.kv_dtype,  // the head's cache is a host one
        cost,
        *pool_, static_cast<int32_t>(max_model_len_), config_.scheduler.max_num_batched_tokens, std::move(output_head),
        runner);
    if (proposer->device_runner()) log_info("engine", "the {} head runs on {}", sc.method, executor_->device_name());
    return std::unique_ptr<Proposer>(std::move(proposer));
  }
  PAGODA_CHECK(draft_model_.model != nullptr, "speculative method 'draft' without a loaded draft model");
  // The draft cache holds as many tokens as the target's, plus every sequence's lookahead.
  const int64_t bs = config_.block_size;
  const int64_t blocks = plan_.num_blocks + draft_lookahead_blocks(config_) + 1;
  KvCacheSpec spec;
  spec.num_blocks = blocks;
  spec.block_size = bs;
  spec.dtype = config_.kv_dtype;
  // A decode step reads the weights once: a draft pass costs about the ratio of weight bytes.
  auto weight_bytes = [](const LoadedModel& m) {
    int64_t n = 0;
    for (const auto& name : m.weights->names())
      if (const Tensor* t = m.weights->find(name)) n += t->nbytes();
    return static_cast<double>(std::max<int64_t>(1, n));
  };
  const double cost = weight_bytes(draft_model_) / weight_bytes(model_);
  std::unique_ptr<ModelExecutor> ex;
  if (cuda) {
    // On the target's device, in the share the memory plan set aside (plan_.draft_*).
    auto r = make_cuda_executor(*draft_model_.model, spec, co);
    if (!r.ok()) return invalid_argument("the speculative draft model on CUDA: {}", r.status().to_string());
    ex = std::move(*r);
  } else {
    ex = make_cpu_executor(*draft_model_.model, spec, *pool_);
  }
  return std::unique_ptr<Proposer>(std::make_unique<DraftModelProposer>(
      std::move(ex), static_cast<int32_t>(blocks), static_cast<int32_t>(bs), cost, static_cast<int32_t>(max_model_len_),
      config_.scheduler.max_num_batched_tokens));
}

void EngineCore::set_speculation(const SpeculativeConfig& config, std::unique_ptr<Proposer> proposer) {
  PAGODA_CHECK(!has_unfinished(), "set_speculation with requests in flight");
  runner_->forget_all();
  runner_->set_speculation(config, std::move(proposer));
}

std::unique_ptr<Proposer> EngineCore::release_proposer() {
  PAGODA_CHECK(!has_unfinished(), "release_proposer with requests in flight");
  runner_->forget_all();
  return runner_->release_proposer();
}

Status EngineCore::add_request(std::unique_ptr<Request> r) {
  const int64_t vocab = model_.config.vocab_size;
  if (r->prompt.empty()) return invalid_argument("the prompt is empty");
  for (int32_t t : r->prompt)
    if (t < 0 || t >= vocab) return invalid_argument("prompt token id {} is outside the vocabulary [0, {})", t, vocab);
  const int64_t plen = r->num_prompt_tokens();
  if (plen >= max_model_len_)
    return out_of_range("the prompt has {} tokens, but this model's maximum length is {} tokens (prompt plus at least one "
                        "generated token)", plen, max_model_len_);
  if (r->stop.max_tokens < 0) {
    r->stop.max_tokens = static_cast<int32_t>(max_model_len_ - plen);
  } else if (plen + r->stop.max_tokens > max_model_len_) {
    return out_of_range("this model's maximum length is {} tokens, but {} were requested ({} in the prompt, {} to generate)",
                        max_model_len_, plen + r->stop.max_tokens, plen, r->stop.max_tokens);
  }
  if (r->stop.max_tokens == 0) return invalid_argument("max_tokens must be at least 1");
  if (r->stop.min_tokens < 0 || r->stop.min_tokens > r->stop.max_tokens)
    return invalid_argument("min_tokens must be in [0, max_tokens={}], got {}", r->stop.max_tokens, r->stop.min_tokens);
  for (int32_t t : r->stop.stop_token_ids)
    if (t < 0 || t >= vocab) return invalid_argument("stop token id {} is outside the vocabulary", t);
  PAGODA_RETURN_IF_ERROR(r->sampling.validate());
  if (requests_.count(r->id)) return invalid_argument("request id '{}' is already in use", r->id);
  r->arrival_time = r->arrival_time > 0 ? r->arrival_time : now();
  Request* raw = r.get();
  requests_[r->id] = std::move(r);
  scheduler_->add_request(raw);
  return {};
}

const Request* EngineCore::find(const std::string& id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

CoreOutput EngineCore::snapshot(const Request& r) const {
  CoreOutput o;
  o.id = r.id;
  o.status = r.status;
  o.finished = r.finished();
  o.num_prompt_tokens = r.num_prompt_tokens();
  o.num_cached_tokens = r.num_cached_prompt_tokens;
  o.num_output_tokens = static_cast<int32_t>(r.output.size());
  auto it = first_scheduled_.find(r.id);
  o.first_scheduled_time = it == first_scheduled_.end() ? 0 : it->second;
  return o;
}

void EngineCore::finish(const std::string& id, RequestStatus status, std::string error) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  scheduler_->finish_request(id, status);
  it->second->status = status;
  CoreOutput o = snapshot(*it->second);
  o.error = std::move(error);
  pending_finished_.push_back(std::move(o));
  first_scheduled_.erase(id);
  prompt_logprobs_.erase(id);
  requests_.erase(it);
}

std::vector<CoreOutput> EngineCore::fail_all(const std::string& error) {
  // Blocks registered in the prefix cache by the failed step may hold garbage.
  kv_manager_->reset_prefix_cache();
  std::vector<std::string> ids;
  ids.reserve(requests_.size());
  for (const auto& [id, r] : requests_) ids.push_back(id);
  for (const auto& id : ids) finish(id, RequestStatus::kFinishedError, error);
  std::vector<CoreOutput> failed = std::move(pending_finished_);
  pending_finished_.clear();
  return failed;
}

std::vector<CoreOutput> EngineCore::step() {
  std::vector<CoreOutput> outputs = std::move(pending_finished_);
  pending_finished_.clear();
  // A failure outside the forward pass (scheduling, the update) leaves the scheduler's view of
  // every request unknown: they all end with the error, and the core serves new requests.
  std::string error;
  try {
    step_into(outputs);
    return outputs;
  } catch (const std::exception& e) {
    error = fmt::format("engine step failed: {}", e.what());
  } catch (...) {
    error = "engine step failed: unknown exception";
  }
  std::vector<CoreOutput> failed = fail_all(error);
  outputs.insert(outputs.end(), std::make_move_iterator(failed.begin()), std::make_move_iterator(failed.end()));
  return outputs;
}

void EngineCore::step_into(std::vector<CoreOutput>& outputs) {
  const double t_schedule = now();
  SchedulerOutput sched = scheduler_->schedule();
  if (sched.empty() && sched.finished.empty() && sched.preempted.empty() && sched.swap_out.empty()) return;
  const double t = now();
  stats_.schedule_s += t - t_schedule;
  for (const auto& st : sched.num_scheduled_tokens) first_scheduled_.try_emplace(st.id, t);
  for (const auto& st : sched.num_scheduled_tokens) {
    const Request* r = find(st.id);
    // Tokens below the prompt length are prompt tokens being computed (prefill).
    const int32_t before = r->num_computed_tokens - st.num_tokens;
    stats_.prompt_tokens += std::max(0, std::min(r->num_prompt_tokens(), before + st.num_tokens) - before);
  }
  RunnerOutput ran;
  std::string error;
  try {
    ran = runner_->execute(sched);
  } catch (const std::exception& e) {
    error = fmt::format("forward pass failed: {}", e.what());
  } catch (...) {
    error = "forward pass failed: unknown exception";
  }
  if (!error.empty()) {
    // The batch failed as a whole: fail its requests, keep the engine alive. Blocks registered in
    // the prefix cache this step may hold garbage: drop the cache.
    kv_manager_->reset_prefix_cache();
    for (const auto& st : sched.num_scheduled_tokens) finish(st.id, RequestStatus::kFinishedError, error);
    auto failed = std::move(pending_finished_);
    pending_finished_.clear();
    outputs.insert(outputs.end(), failed.begin(), failed.end());
    return;
  }
  const double t_update = now();
  stats_.execute_s += t_update - t;
  ++stats_.steps;
  stats_.last_step_tokens = ran.num_tokens;
  std::vector<SampledToken> sampled;
  sampled.reserve(ran.samples.size());
  for (const auto& s : ran.samples) sampled.push_back({s.id, s.result.token});
  // Output lengths before the update: a request's j-th token this step is output index before + j.
  std::unordered_map<std::string, int32_t> before;
  for (const auto& s : ran.samples)
    if (const Request* r = find(s.id)) before.try_emplace(s.id, static_cast<int32_t>(r->output.size()));
  StepUpdate update = scheduler_->update_from_output(sched, sampled);
  scheduler_->update_draft_tokens(ran.drafts);
  stats_.spec_num_drafts += ran.spec.num_drafts;
  stats_.spec_num_draft_tokens += ran.spec.num_draft_tokens;
  stats_.spec_num_accepted_tokens += ran.spec.num_accepted_tokens;
  stats_.spec_num_rejections += ran.spec.num_rejections;
  if (stats_.spec_accepted_per_position.size() < ran.spec.accepted_per_position.size())
    stats_.spec_accepted_per_position.resize(ran.spec.accepted_per_position.size());
  for (size_t j = 0; j < ran.spec.accepted_per_position.size(); ++j)
    stats_.spec_accepted_per_position[j] += ran.spec.accepted_per_position[j];
  for (auto& chunk : ran.prompt_logprobs) {
    const Request* r = find(chunk.id);
    if (r == nullptr) continue;
    // Delivered already (a prompt recomputed after preemption, once tokens came out): dropped.
    const auto b = before.find(chunk.id);
    if ((b != before.end() ? b->second : static_cast<int32_t>(r->output.size())) > 0) continue;
    // A prompt recomputed before its first token reports rows already gathered: kept once.
    std::vector<RowLogprobs>& got = prompt_logprobs_[chunk.id];
    const size_t first = static_cast<size_t>(chunk.first_token - 1);
    for (size_t j = 0; j < chunk.rows.size(); ++j)
      if (first + j == got.size()) got.push_back(std::move(chunk.rows[j]));
  }
  // One output per kept token, as the request stood after it; tokens past a stop are dropped.
  std::unordered_map<std::string, int32_t> seen;
  for (size_t i = 0; i < ran.samples.size(); ++i) {
    auto it = requests_.find(ran.samples[i].id);
    if (it == requests_.end()) continue;
    const Request& r = *it->second;
    const int32_t index = before[r.id] + seen[r.id]++;
    const int32_t n_out = static_cast<int32_t>(r.output.size());
    if (index >= n_out) continue;
    ++stats_.generation_tokens;
    CoreOutput o = snapshot(r);
    o.num_output_tokens = index + 1;
    if (index + 1 < n_out) {
      o.finished = false;
      o.status = RequestStatus::kRunning;
    }
    o.has_token = true;
    o.sample = std::move(ran.samples[i].result);
    if (index == 0) {
      auto lp = prompt_logprobs_.find(r.id);
      if (lp != prompt_logprobs_.end()) {
        o.prompt_logprobs = std::move(lp->second);
        prompt_logprobs_.erase(lp);
      }
    }
    outputs.push_back(std::move(o));
  }
  for (Request* r : update.finished) {
    first_scheduled_.erase(r->id);
    prompt_logprobs_.erase(r->id);
    requests_.erase(r->id);
  }
  stats_.update_s += now() - t_update;
}

}  // namespace pagoda
