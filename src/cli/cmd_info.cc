// `pagoda info --model PATH [--json] [--quantization Q] [--load-format auto|dummy]`: what a
// checkpoint is, without running it (dummy: the random weights of a config.json's shape).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "loader/gguf.h"
#include "loader/hf_model_dir.h"
#include "loader/weight_source.h"
#include "model/model_loader.h"

namespace pagoda::cli {
namespace {

struct TokenizerFacts {
  std::string kind = "none";
  bool chat_template = false;
};

TokenizerFacts tokenizer_facts(const WeightSource& src) {
  TokenizerFacts f;
  if (const GgufFile* g = src.gguf()) {
    const auto model = g->get_string("tokenizer.ggml.model").value_or("");
    if (model == "llama") f.kind = "sentencepiece-bpe";
    else if (model == "gpt2") f.kind = "byte-level-bpe";
    else if (!model.empty()) f.kind = model;
    f.chat_template = g->get_string("tokenizer.chat_template").has_value();
    return f;
  }
  std::error_code ec;
  const std::string dir = src.hf_dir()                               ? src.hf_dir()->dir()
                          : std::filesystem::is_directory(src.path(), ec) ? src.path()  // random weights of a directory's config
                                                                       : std::filesystem::path(src.path()).parent_path().string();
  auto read_json = [&](const char* name) {
    std::ifstream in(dir + "/" + name);
    return in ? nlohmann::json::parse(in, nullptr, false) : nlohmann::json();
  };
  nlohmann::json tok = read_json("tokenizer.json");
  if (tok.is_object() && tok.contains("model") && tok["model"].is_object()) {
    const auto& m = tok["model"];
    const std::string type = m.value("type", "");
    bool byte_level = false;
    if (tok.contains("pre_tokenizer") && tok["pre_tokenizer"].is_object()) byte_level = tok["pre_tokenizer"].dump().find("ByteLevel") != std::string::npos;
    f.kind = type == "BPE" ? (byte_level ? "byte-level-bpe" : "sentencepiece-bpe") : (type.empty() ? "unknown" : type);
  } else if (std::filesystem::exists(dir + "/vocab.json") && std::filesystem::exists(dir + "/merges.txt")) {
    f.kind = "byte-level-bpe";
  } else if (std::filesystem::exists(dir + "/tokenizer.model")) {
    f.kind = "sentencepiece-bpe";
  }
  nlohmann::json cfg = read_json("tokenizer_config.json");
  f.chat_template = (cfg.is_object() && cfg.contains("chat_template")) || std::filesystem::exists(dir + "/chat_template.jinja");
  return f;
}

int run_info(const std::string& path, bool as_json, WeightQuantization quantization, LoadFormat load_format) {
  auto opened = open_checkpoint(path, load_format, 0);
  if (!opened.ok()) {
    std::error_code ec;
    const std::string config = config_json_path(path);
    const bool config_only = load_format == LoadFormat::kAuto && !config.empty() && std::filesystem::exists(config, ec);
    std::cerr << "pagoda info: " << opened.status().to_string()
              << (config_only ? " (a config.json alone: --load-format dummy describes random weights of its shape)" : "")
              << "\n";
    return 1;
  }
  Result<std::unique_ptr<WeightSource>> src = std::move(opened->weights);
  const Result<ModelConfig> cfg = std::move(opened->config);
  if (quantization != WeightQuantization::kNone) {
    // The weights as the engine would hold them: the linears quantized (reads every linear once).
    src = quantize_weight_source(std::move(*src), *cfg, quantization, 0);
    if (!src.ok()) {
      std::cerr << "pagoda info: " << src.status().to_string() << "\n";
      return 1;
    }
  }
  int64_t params = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> by_dtype;  // dtype -> (tensors, bytes)
  for (const auto& name : (*src)->names()) {
    const Tensor* t = (*src)->find(name);
    if (!t) continue;
    params += t->numel();
    auto& e = by_dtype[std::string(dtype_name(t->dtype()))];
    e.first += 1;
    e.second += t->nbytes();
  }
  int64_t total_bytes = 0;
  for (const auto& [_, e] : by_dtype) total_bytes += e.second;
  const TokenizerFacts tok = tokenizer_facts(**src);
  nlohmann::json j;
  j["path"] = path;
  j["format"] = weight_format_name((*src)->format());
  j["quantization"] = weight_quantization_name(quantization);
  j["config"] = cfg->to_json();
  j["parameters"] = params;
  const ParameterFootprint fp = checkpoint_footprint(*cfg, **src);
  j["active_parameters"] = fp.active_parameters;
  j["bytes_per_token"] = fp.bytes_per_token;
  j["weight_bytes"] = total_bytes;
  for (const auto& [dt, e] : by_dtype) j["weight_bytes_by_dtype"][dt] = {{"tensors", e.first}, {"bytes", e.second}};
  j["kv_bytes_per_token"] = {{"f16", cfg->kv_bytes_per_token(DType::kF16)}, {"f32", cfg->kv_bytes_per_token(DType::kF32)}};
  j["context_length"] = cfg->max_position_embeddings;
  j["tokenizer"] = tok.kind;
  j["chat_template"] = tok.chat_template;
  if (as_json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  auto mib = [](int64_t b) { return fmt::format("{:.2f} MiB", static_cast<double>(b) / (1 << 20)); };
  std::cout << fmt::format("model         {}\n", path);
  std::cout << fmt::format("format        {}{}\n", weight_format_name((*src)->format()),
                           quantization == WeightQuantization::kNone
                               ? std::string()
                               : fmt::format(" (linears quantized on-line: {})", weight_quantization_name(quantization)));
  std::cout << fmt::format("architecture  {} ({})\n", arch_family_name(cfg->family), cfg->arch_name);
  std::cout << fmt::format("parameters    {} ({:.1f} M)\n", params, static_cast<double>(params) / 1e6);
  if (cfg->is_moe())
    std::cout << fmt::format("active        {} ({:.1f} M) per token: {} of {} experts\n", fp.active_parameters,
                             static_cast<double>(fp.active_parameters) / 1e6, cfg->num_experts_per_tok, cfg->num_experts);
  std::cout << fmt::format("weights       {}\n", mib(total_bytes));
  std::cout << fmt::format("read/token    {} (batch-1 decode: weights once{})\n", mib(fp.bytes_per_token),
                           cfg->is_moe() ? ", the active experts only" : "");
  for (const auto& [dt, e] : by_dtype) std::cout << fmt::format("  {:<6} {:>4} tensors  {}\n", dt, e.first, mib(e.second));
  std::cout << fmt::format("hidden        {}  ffn {}  layers {}  vocab {}\n", cfg->hidden_size, cfg->intermediate_size,
                           cfg->num_layers, cfg->vocab_size);
  std::cout << fmt::format("attention     {} heads, {} kv heads, head_dim {}{}{}\n", cfg->num_heads, cfg->num_kv_heads,
                           cfg->head_dim, cfg->attention_bias ? ", qkv bias" : "", cfg->qk_norm ? ", q/k norm" : "");
  std::cout << fmt::format("rope          theta {}  {}  dims {}{}\n", cfg->rope_theta, rope_layout_name(cfg->rope_layout),
                           cfg->rope_dim,
                           cfg->rope_scaling.kind == RopeScaling::Kind::kLlama3   ? fmt::format("  llama3 x{}", cfg->rope_scaling.factor)
                           : cfg->rope_scaling.kind == RopeScaling::Kind::kLinear ? fmt::format("  linear x{}", cfg->rope_scaling.factor)
                           : cfg->rope_scaling.kind == RopeScaling::Kind::kLongRope
                               ? fmt::format("  longrope (original context {}, attention factor {:.4f}; long factors "
                                             "when the context exceeds the original)",
                                             cfg->rope_scaling.original_max_position, cfg->rope_scaling.attention_factor)
                               : "");
  if (cfg->sliding_window > 0) {
    int64_t n = cfg->num_layers;
    if (!cfg->sliding_layers.empty()) {
      n = 0;
      for (bool b : cfg->sliding_layers) n += b;
    }
    std::cout << fmt::format("sliding win   {} tokens on {} of {} layers{}\n", cfg->sliding_window, n, cfg->num_layers,
                             cfg->rope_local_theta > 0 ? fmt::format(" (rope theta {})", cfg->rope_local_theta) : "");
  }
  if (cfg->query_pre_attn_scalar > 0 || cfg->attn_logit_softcap > 0 || cfg->final_logit_softcap > 0)
    std::cout << fmt::format("gemma         query scale 1/sqrt({}), soft-cap attention {} final {}\n",
                             cfg->query_pre_attn_scalar, cfg->attn_logit_softcap, cfg->final_logit_softcap);
  if (cfg->is_moe())
    std::cout << fmt::format("experts       {} (top-{}{}), expert ffn {}{}\n", cfg->num_experts, cfg->num_experts_per_tok,
                             cfg->norm_topk_prob ? ", renormalized" : "", cfg->expert_intermediate_size,
                             cfg->shared_expert_intermediate_size > 0
                                 ? fmt::format(", shared expert ffn {}", cfg->shared_expert_intermediate_size)
                                 : std::string());
  std::cout << fmt::format("rms_norm_eps  {}\n", cfg->rms_norm_eps);
  std::cout << fmt::format("tied embed    {}\n", cfg->tie_word_embeddings ? "yes" : "no");
  std::cout << fmt::format("context       {} tokens\n", cfg->max_position_embeddings);
  std::cout << fmt::format("kv per token  {} bytes (f16), {} bytes (f32)\n", cfg->kv_bytes_per_token(DType::kF16),
                           cfg->kv_bytes_per_token(DType::kF32));
  std::cout << fmt::format("tokenizer     {}\n", tok.kind);
  std::cout << fmt::format("chat template {}\n", tok.chat_template ? "present" : "absent");
  return 0;
}

const CommandRegistration kInfo("info", "Describe a model (architecture, sizes, tokenizer) without running it", [](CLI::App* app) {
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  app->add_option("model,--model,-m", *path, "GGUF file or Hugging Face model directory (dummy: a config.json)")->required();
  app->add_flag("--json", *json, "Print JSON");
  auto quantization = std::make_shared<WeightQuantization>(WeightQuantization::kNone);
  add_quantization_option(app, *quantization);
  auto load_format = std::make_shared<LoadFormat>(LoadFormat::kAuto);
  add_load_format_option(app, *load_format);
  return [path, json, quantization, load_format] { return run_info(*path, *json, *quantization, *load_format); };
});

}  // namespace
}  // namespace pagoda::cli
