// `pagoda generate`: stream one continuation to stdout (text, or token ids with --ids); timing
// statistics go to stderr. Runs through the same Engine as the server.
#include <chrono>
#include <limits>
#include <cstdio>
#include <iostream>

#include "cli/command.h"
#include "cli/options.h"
#include "cli/progress.h"
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/engine_config.h"
#include "runtime/memory_plan.h"
#include "common/dtype.h"
#include "common/startup_profile.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {
namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt;
  int n = 128;
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  int64_t seed = -1;
  bool ids = false;
  bool chat = false;
  bool ignore_eos = false;
  int threads = 0;
  std::string kv_dtype = "f16";
  int64_t max_model_len = 0;
  std::string device = "auto";
  WeightQuantization quantization = WeightQuantization::kNone;
  LoadFormat load_format = LoadFormat::kAuto;
  std::string tokenizer;  // empty: the model's
  std::string dtype = "auto";
  bool cuda_graphs = true;
  double memory_utilization = 0.0;
  std::string cpu_offload;
  int64_t n_gpu_layers = -1;
  int tensor_parallel_size = 1;
  bool verbose = false;
  bool profile_startup = false;
  std::string plan_cache;
  TuningFlags tuning;
  SpeculativeOptions spec;
};

int run_generate(GenerateOptions& o) {
  if (!check_tensor_parallel_option(o.tensor_parallel_size, "generate")) return 2;
  if (!resolve_device_option(o.device, "generate", o.model)) return 2;
  if (!check_max_model_len("generate", o.model, o.max_model_len)) return 2;
  EngineConfig cfg;
  cfg.model = o.model;
  cfg.threads = o.threads;
  cfg.scheduler.max_num_seqs = 1;
  cfg.max_model_len = o.max_model_len;
  cfg.device = o.device;
  cfg.quantization = o.quantization;
  cfg.load_format = o.load_format;
  cfg.tokenizer = o.tokenizer;
  cfg.dtype = o.dtype;
  cfg.cuda_graphs = o.cuda_graphs;
  cfg.memory_utilization = o.memory_utilization;
  if (!resolve_cpu_offload_option(o.cpu_offload, cfg.cpu_offload_bytes, "generate")) return 2;
  cfg.n_gpu_layers = o.n_gpu_layers;
  cfg.tensor_parallel_size = o.tensor_parallel_size;
  cfg.plan_cache = o.plan_cache;
  if (!resolve_speculative_options(o.spec, cfg.speculative, "generate")) return 2;
  auto tuning = resolve_tuning(o.tuning);
  if (!tuning.ok()) {
    std::cerr << "pagoda generate: " << tuning.status().to_string() << "\n";
    return 2;
  }
  cfg.tuning = *tuning;
  // Settings that leave the default path are always shown (the full configuration with -v).
  if (!o.verbose && cfg.tuning.to_string() != TuningConfig{}.to_string())
    std::cerr << "pagoda generate: tuning: " << cfg.tuning.to_string() << "\n";
  auto kv = dtype_from_name(o.kv_dtype);
  if (!kv) {
    std::cerr << "pagoda generate: unknown --kv-dtype '" << o.kv_dtype << "'\n";
    return 2;
  }
  cfg.kv_dtype = *kv;
  const auto t_load = std::chrono::steady_clock::now();
  auto engine = [&] {
    Progress progress("generate", "loading weights", "B");
    cfg.load_progress = [&progress](int64_t done, int64_t total) { progress.update(done, total); };
    auto created = Engine::create(cfg);
    cfg.load_progress = nullptr;
    return created;
  }();
  if (!engine.ok()) {
    std::cerr << "pagoda generate: " << engine.status().to_string() << "\n";
    return 1;
  }
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  if (o.verbose) {
    std::cerr << "config: " << cfg.to_string() << "\n" << (*engine)->memory_plan().to_string() << "\n";
  }

  GenerateRequest req;
  req.prompt = o.prompt;
  if (o.chat) {
    // The model's chat template around one user message; the rendered text already holds the
    // special tokens it needs (BOS, role markers), so none are added and they are parsed.
    auto tmpl = load_chat_template(o.tokenizer.empty() ? o.model : o.tokenizer);
    if (!tmpl.ok()) {
      std::cerr << "pagoda generate: --chat: " << tmpl.status().to_string() << "\n";
      return 1;
    }
    ChatTemplateOptions opts;
    opts.add_generation_prompt = true;
    auto rendered = tmpl->render(nlohmann::json::array({{{"role", "user"}, {"content", o.prompt}}}), opts);
    if (!rendered.ok()) {
      std::cerr << "pagoda generate: --chat: " << rendered.status().to_string() << "\n";
      return 1;
    }
    req.prompt = *rendered;
    req.add_special_tokens = false;
    req.parse_special_tokens = true;
  }
  req.sampling.temperature = o.temperature;
  req.sampling.top_k = o.top_k;
  req.sampling.top_p = o.top_p;
  req.sampling.min_p = o.min_p;
  req.sampling.repetition_penalty = o.repetition_penalty;
  if (o.seed >= 0) req.sampling.seed = static_cast<uint64_t>(o.seed);
  req.stop.max_tokens = o.n;
  req.stop.ignore_eos = o.ignore_eos;
  const double submitted = startup_profile::now_s();
  auto stream = (*engine)->submit(std::move(req));
  if (!stream.ok()) {
    std::cerr << "pagoda generate: " << stream.status().to_string() << "\n";
    return 1;
  }
  bool first_id = true;
  bool first_out = true;
  RequestOutput last;
  while (auto out = (*stream)->next()) {
    if (first_out && !out->tokens.empty()) {
      first_out = false;
      const double now = startup_profile::now_s();
      startup_profile::record("first token (tokenize, prefill step, sample)", submitted, now - submitted);
      startup_profile::record("launch to first token", 0, now);
    }
    if (o.ids) {
      for (const auto& t : out->tokens) {
        std::printf(first_id ? "%d" : " %d", t.token);
        first_id = false;
      }
    } else {
      std::fwrite(out->text.data(), 1, out->text.size(), stdout);
    }
    std::fflush(stdout);
    last = std::move(*out);
  }
  if (o.ids) std::printf("\n");
  std::fflush(stdout);
  if (last.finish_reason == "error") {
    std::cerr << "pagoda generate: " << last.error << "\n";
    return 1;
  }
  const double ttft = last.first_token_time - last.arrival_time;
  const double decode_s = last.time - last.first_token_time;
  const int decoded = std::max(0, last.num_output_tokens - 1);
  std::cerr << fmt::format("\n[load {:.2f} s | prompt {} tokens in {:.1f} ms ({:.1f} tok/s) | generated {} tokens, {:.1f} tok/s | finish {}]\n",
                           load_s, last.num_prompt_tokens, 1000 * ttft, last.num_prompt_tokens / std::max(ttft, 1e-9),
                           last.num_output_tokens, decoded / std::max(decode_s, 1e-9), last.finish_reason);
  if (o.profile_startup) std::cerr << startup_profile::report();
  const EngineStats st = (*engine)->stats();
  if (const std::string spec = speculative_summary(st.spec_num_drafts, st.spec_num_draft_tokens, st.spec_num_accepted_tokens,
                                                   st.spec_accepted_per_position);
      !spec.empty())
    std::cerr << "[speculative " << cfg.speculative.to_string() << ": " << spec << "]\n";
  return 0;
}

const CommandRegistration kGenerate("generate", "Generate a continuation of a prompt", [](CLI::App* app) {
  auto o = std::make_shared<GenerateOptions>();
  app->add_option("model,--model,-m", o->model, "GGUF file or Hugging Face model directory")->required();
  app->add_option("--prompt,-p", o->prompt, "Prompt text")->required();
  app->add_option("-n,--max-tokens", o->n, "Tokens to generate")->check(CLI::Range(1, 1073741824));
  app->add_option("--temperature", o->temperature, "Sampling temperature (0: greedy)")->check(CLI::Range(0.0, 100.0));
  app->add_option("--top-k", o->top_k, "Top-k (0: off)")->check(CLI::Range(0, 1073741824));
  app->add_option("--top-p", o->top_p, "Top-p nucleus")->check(CLI::Range(0.0, 1.0));
  app->add_option("--min-p", o->min_p, "Min-p")->check(CLI::Range(0.0, 1.0));
  app->add_option("--repetition-penalty", o->repetition_penalty, "Repetition penalty (1: off)")->check(CLI::Range(0.01, 100.0));
  app->add_option("--seed", o->seed, "Sampling seed (same seed, same output)")->check(CLI::Range(int64_t{-1}, std::numeric_limits<int64_t>::max()));
  app->add_flag("--ids", o->ids, "Print generated token ids instead of text");
  app->add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template as a user message");
  app->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-sequence tokens");
  app->add_option("-t,--threads", o->threads, "Threads (default: one per core)")->check(CLI::Range(0, 4096));
  app->add_option("--kv-dtype", o->kv_dtype, "KV cache element type: f16, bf16, f32, f8_e4m3 (fp8; CUDA only)");
  app->add_option("--max-model-len,-c,--ctx-size", o->max_model_len, "Maximum sequence length (default: the model's)")->check(CLI::NonNegativeNumber);
  add_device_options(app, o->device, o->dtype, o->cuda_graphs);
  add_quantization_option(app, o->quantization);
  add_load_format_option(app, o->load_format);
  app->add_option("--tokenizer", o->tokenizer, "Tokenizer (default: the model's; --load-format dummy needs one)");
  app->add_option("--gpu-memory-utilization", o->memory_utilization, "CUDA: fraction of the GPU's memory to use (0: default)")
      ->check(CLI::Range(0.0, 1.0));
  add_cpu_offload_option(app, &o->cpu_offload);
  add_n_gpu_layers_option(app, &o->n_gpu_layers);
  add_tensor_parallel_option(app, &o->tensor_parallel_size);
  add_tuning_options(app, o->tuning);
  add_speculative_options(app, &o->spec);
  app->add_flag("-v,--verbose", o->verbose, "Print the engine configuration and memory plan to stderr");
  app->add_option("--plan-cache", o->plan_cache, "Engine plan cache: a directory, or off (default: $PAGODA_PLAN_CACHE, else off). A CPU start maps the packed weights an earlier start wrote there");
  app->add_flag("--profile-startup", o->profile_startup,
                "Print where the time from launch to the first token went (model, tokenizer, executor, first step)");
  return [o] { return run_generate(*o); };
});

}  // namespace
}  // namespace pagoda::cli
