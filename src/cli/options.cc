#include "cli/options.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "engine/device_choice.h"
#include "engine/engine_config.h"
#include "model/model_loader.h"

namespace pagoda::cli {

bool resolve_device_option(std::string& device, std::string_view cmd, const std::string& model) {
  std::string why;
  auto d = choose_engine_device(device, model, &why);
  if (!d.ok()) {
    log_error(cmd, "--device: {}", d.status().message());
    return false;
  }
  if (device == "auto") {
    log_info(cmd, "device auto: {} ({})", d->to_string(), why);
    device = d->to_string();
  }
  return true;
}

bool check_max_model_len(std::string_view cmd, const std::string& model, int64_t max_model_len) {
  if (max_model_len <= 0) return true;
  auto config = load_model_config(model);
  if (!config.ok()) return true;  // the load that follows reports the model's own error
  const int64_t ctx = config->max_position_embeddings;
  if (ctx > 0 && max_model_len > ctx) {
    log_error(cmd, "--max-model-len {} exceeds the model's context length {} (max_position_embeddings of {}); "
                   "use at most {}", max_model_len, ctx, model, ctx);
    return false;
  }
  return true;
}

void add_log_level_option(CLI::App* app) {
  app->add_option_function<std::string>(
         "--log-level", [](const std::string& name) { set_log_level(*parse_log_level(name)); },
         "Log level: debug, info, warn, error")
      ->check(CLI::IsMember({"debug", "info", "warn", "warning", "error"}))
      ->default_str("info");
}

void add_kv_tier_options(CLI::App* app, KvTierOptions* o) {
  app->add_option("--kv-host-gb", o->host_gb,
                  "KV host tier in GiB: evicted prefix-cache blocks and preempted requests are kept there (0: none)")
      ->check(CLI::Range(0.0, 1048576.0));
  app->add_option("--swap-space", o->swap_space, "KV host tier in bytes (the larger of this and --kv-host-gb)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--kv-disk-dir", o->disk_dir, "KV disk tier: a local directory for blocks evicted from the host tier");
  app->add_option("--kv-disk-gb", o->disk_gb, "Cap of the KV disk tier in GiB")->check(CLI::Range(0.001, 1048576.0));
}

KvTierConfig resolve_kv_tier_options(const KvTierOptions& o) {
  KvTierConfig c;
  c.host_bytes = std::max(o.swap_space, static_cast<int64_t>(o.host_gb * 1073741824.0));
  c.disk_dir = o.disk_dir;
  c.disk_bytes = static_cast<int64_t>(o.disk_gb * 1073741824.0);
  return c;
}

void add_cpu_offload_option(CLI::App* app, std::string* o) {
  app->add_option("--cpu-offload-gb", *o,
                  "CUDA: GiB of weights (whole layers) kept in pinned host memory and streamed to the GPU every forward "
                  "pass; auto: only when the model does not fit; 0: never")
      ->default_str("auto");
}

bool resolve_cpu_offload_option(const std::string& o, int64_t& bytes, std::string_view cmd) {
  if (o.empty() || o == "auto") {
    bytes = EngineConfig::kAutoOffload;
    return true;
  }
  char* end = nullptr;
  const double gb = std::strtod(o.c_str(), &end);
  if (end == o.c_str() || *end != '\0' || !(gb >= 0) || gb > 1e6) {
    std::cerr << "pagoda " << cmd << ": --cpu-offload-gb must be a number of GiB >= 0 or auto, got '" << o << "'\n";
    return false;
  }
  bytes = static_cast<int64_t>(gb * 1073741824.0);
  return true;
}

void add_n_gpu_layers_option(CLI::App* app, int64_t* n) {
  app->add_option("--n-gpu-layers", *n,
                  "CPU + GPU layer split (llama.cpp's -ngl): with --device cuda the first N layers run on the GPU, the "
                  "rest and the output head on the CPU; -1: all on the GPU; 0: all on the CPU")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 20));
}

void add_tensor_parallel_option(CLI::App* app, int* n) {
  app->add_option("--tensor-parallel-size", *n,
                  "Ranks the model is split over (tensor parallelism): one process a GPU over NCCL with --device cuda, "
                  "processes over shared memory with --device cpu")
      ->check(CLI::Range(1, 1024));
}

bool check_tensor_parallel_option(int n, std::string_view cmd) {
  const Status s = tensor_parallel_supported(n);
  if (!s.ok()) std::cerr << "pagoda " << cmd << ": " << s.message() << "\n";
  return s.ok();
}

void add_speculative_options(CLI::App* app, SpeculativeOptions* o) {
  app->add_option("--speculative-config", o->json,
                  "Speculative decoding as JSON, e.g. '{\"method\": \"ngram\", \"num_speculative_tokens\": 4}'");
  app->add_option("--spec-method", o->method, "Speculative decoding: ngram (prompt lookup), draft (--spec-model), eagle3 (--spec-model HEAD_DIR) or "
                  "mtp (the checkpoint's MTP layers, MiMo layout; --spec-model DIR, default the target's directory)");
  app->add_option("--spec-model", o->model, "Draft model (same vocabulary as the target) for --spec-method draft, or the EAGLE-3 head's directory "
                  "(config.json + model.safetensors) for --spec-method eagle3, or the directory with the MTP layers for mtp");
  app->add_option("--spec-tokens", o->tokens, "Most draft tokens per request per step (default 4)")->check(CLI::Range(1, 16));
  app->add_option("--spec-ngram-min", o->ngram_min, "Prompt lookup: shortest n-gram matched (default 1)")->check(CLI::Range(1, 16));
  app->add_option("--spec-ngram-max", o->ngram_max, "Prompt lookup: longest n-gram matched (default 4)")->check(CLI::Range(1, 16));
  app->add_option("--spec-disable-batch-size", o->disable_batch_size,
                  "No drafts in steps with more decoding requests than this (0: never off; default 32)")
      ->check(CLI::NonNegativeNumber);
  app->add_flag("--spec-no-adaptive", o->no_adaptive, "Fixed draft length (default: follows each request's acceptance)");
  app->add_flag("--spec-device-head", o->device_head,
                "eagle3 / mtp on CUDA: the head's passes on the device instead of the host (default off)");
}

bool resolve_speculative_options(const SpeculativeOptions& o, SpeculativeConfig& out, std::string_view cmd) {
  SpeculativeConfig c;
  if (!o.json.empty()) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(o.json);
    } catch (const std::exception& e) {
      log_error(cmd, "--speculative-config is not valid JSON: {}", e.what());
      return false;
    }
    if (!j.is_object()) {
      log_error(cmd, "--speculative-config must be a JSON object");
      return false;
    }
    try {
      for (const auto& [key, v] : j.items()) {
        if (key == "method") c.method = v.get<std::string>() == "draft_model" ? "draft" : v.get<std::string>();
        else if (key == "model") c.model = v.get<std::string>();
        else if (key == "num_speculative_tokens") c.num_speculative_tokens = v.get<int32_t>();
        else if (key == "prompt_lookup_min") c.ngram_min = v.get<int32_t>();
        else if (key == "prompt_lookup_max") c.ngram_max = v.get<int32_t>();
        else if (key == "disable_by_batch_size") c.disable_by_batch_size = v.get<int32_t>();
        else if (key == "adaptive") c.adaptive = v.get<bool>();
        else if (key == "device_head") c.device_head = v.get<bool>();
        else {
          log_error(cmd, "--speculative-config: unknown key '{}' (known: method, model, num_speculative_tokens, "
                         "prompt_lookup_min, prompt_lookup_max, disable_by_batch_size, adaptive, device_head)", key);
          return false;
        }
      }
    } catch (const nlohmann::json::exception& e) {
      log_error(cmd, "--speculative-config: {}", e.what());
      return false;
    }
  }
  if (!o.method.empty()) c.method = o.method == "draft_model" ? "draft" : o.method;
  if (!o.model.empty()) c.model = o.model;
  if (c.method.empty() && !c.model.empty()) c.method = "draft";
  if (o.tokens > 0) c.num_speculative_tokens = o.tokens;
  if (o.ngram_min > 0) c.ngram_min = o.ngram_min;
  if (o.ngram_max > 0) c.ngram_max = o.ngram_max;
  if (o.disable_batch_size >= 0) c.disable_by_batch_size = o.disable_batch_size;
  if (o.no_adaptive) c.adaptive = false;
  if (o.device_head) c.device_head = true;
  if (c.method.empty() && (o.tokens > 0 || o.ngram_min > 0 || o.ngram_max > 0)) {
    log_error(cmd, "--spec-* options need --spec-method (ngram, draft, eagle3 or mtp) or --speculative-config");
    return false;
  }
  if (const Status st = c.validate(); !st.ok()) {
    log_error(cmd, "{}", st.message());
    return false;
  }
  out = c;
  return true;
}

std::string speculative_summary(int64_t drafts, int64_t draft_tokens, int64_t accepted, const std::vector<int64_t>& per_pos) {
  if (drafts <= 0) return {};
  std::string pos;
  for (int64_t v : per_pos) pos += fmt::format(" {:.2f}", static_cast<double>(v) / static_cast<double>(drafts));
  return fmt::format("acceptance {:.2f} ({}/{} draft tokens accepted, per position{}), {:.2f} tokens per verification",
                     static_cast<double>(accepted) / std::max<int64_t>(1, draft_tokens), accepted, draft_tokens, pos,
                     1.0 + static_cast<double>(accepted) / static_cast<double>(drafts));
}

}  // namespace pagoda::cli
