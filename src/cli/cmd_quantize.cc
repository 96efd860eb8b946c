// `pagoda quantize IN OUT --format gptq|awq|w4a16|w8a16|fp8`: a 16-bit Hugging Face checkpoint
// written as a quantized one (model/checkpoint_quantizer.h, loader/packed_int_writer.h).
#include <iostream>

#include "cli/command.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "common/log.h"
#include "loader/hf_model_dir.h"
#include "model/checkpoint_quantizer.h"

namespace pagoda::cli {
namespace {

struct QuantizeOptions {
  std::string in, out, format;
  int bits = 0;             // 0: the format's (4; w8a16: 8)
  int64_t group = 0;        // 0: the format's default (128; w8a16: -1, per channel)
  bool asym = false;
  std::string checkpoint_format = "gptq";
  std::string scale_dtype;  // w4a16 / w8a16: bf16 | f16; empty: f16 for a float16 model, else bf16
};

Result<PackedIntSpec> spec_of(const QuantizeOptions& o) {
  PackedIntSpec s;
  if (o.format == "gptq") {
    s.format = PackedIntSpec::Format::kGptq;
    s.bits = o.bits ? o.bits : 4;
  } else if (o.format == "awq") {
    s.format = PackedIntSpec::Format::kAwq;
    if (o.bits && o.bits != 4) return invalid_argument("--format awq is 4-bit (--bits {})", o.bits);
    s.bits = 4;
  } else if (o.format == "w4a16" || o.format == "w8a16") {
    s.format = PackedIntSpec::Format::kCompressedTensors;
    s.bits = o.format == "w4a16" ? 4 : 8;
    if (o.bits && o.bits != s.bits) return invalid_argument("--format {} is {}-bit (--bits {})", o.format, s.bits, o.bits);
  } else if (o.format == "fp8") {
    s.format = PackedIntSpec::Format::kFp8;
    if (o.bits && o.bits != 8) return invalid_argument("--format fp8 is 8-bit (--bits {})", o.bits);
    if (o.asym || o.group) return invalid_argument("--format fp8 has per-channel symmetric scales (no --asym, --group-size)");
    return s;
  } else {
    return invalid_argument("--format '{}' is not one of gptq, awq, w4a16, w8a16, fp8", o.format);
  }
  s.group = o.group ? o.group : (o.format == "w8a16" ? -1 : 128);
  // AWQ always has zero points.
  s.symmetric = s.format == PackedIntSpec::Format::kAwq ? false : !o.asym;
  if (o.checkpoint_format != "gptq" && o.checkpoint_format != "gptq_v2")
    return invalid_argument("--checkpoint-format '{}' is not gptq or gptq_v2", o.checkpoint_format);
  if (o.checkpoint_format == "gptq_v2" && s.format != PackedIntSpec::Format::kGptq)
    return invalid_argument("--checkpoint-format is GPTQ's");
  s.gptq_v2 = o.checkpoint_format == "gptq_v2";
  std::string sd = o.scale_dtype;
  if (sd.empty()) {
    auto cfg = read_json_file(o.in + "/" + HfModelDir::kConfigFile);
    const std::string torch_dtype = cfg.ok() && cfg->is_object() ? cfg->value("torch_dtype", std::string()) : std::string();
    sd = torch_dtype == "float16" ? "f16" : "bf16";
  } else if (s.format != PackedIntSpec::Format::kCompressedTensors) {
    return invalid_argument("--scale-dtype is for w4a16 / w8a16 (GPTQ and AWQ scales are f16)");
  }
  if (sd != "bf16" && sd != "f16") return invalid_argument("--scale-dtype '{}' is not bf16 or f16", sd);
  s.ct_scale = sd == "f16" ? quant::ScaleRounding::kFp16 : quant::ScaleRounding::kBf16;
  PAGODA_RETURN_IF_ERROR(s.validate());
  return s;
}

int run_quantize(const QuantizeOptions& o) {
  auto spec = spec_of(o);
  if (!spec.ok()) {
    log_error("quantize", "{}", spec.status().message());
    return 2;
  }
  log_info("quantize", "{} -> {}: {}", o.in, o.out, spec->to_string());
  Progress bar("quantize", "packing linears", "linears");
  auto report = quantize_checkpoint(o.in, o.out, *spec, [&bar](int64_t done, int64_t total) { bar.update(done, total); });
  bar.finish();
  if (!report.ok()) {
    log_error("quantize", "{}", report.status().message());
    return 1;
  }
  log_info("quantize", "wrote {}: {} linears packed, {:.1f} MiB of tensors (from {:.1f} MiB)", o.out, report->linears,
           static_cast<double>(report->output_bytes) / 1048576.0, static_cast<double>(report->input_bytes) / 1048576.0);
  return 0;
}

const CommandRegistration kQuantize(
    "quantize", "Write a 16-bit Hugging Face checkpoint as a GPTQ, AWQ, compressed-tensors or FP8 one (round to nearest)",
    [](CLI::App* app) {
      auto o = std::make_shared<QuantizeOptions>();
      app->add_option("input", o->in, "Hugging Face model directory (f32 / f16 / bf16)")->required();
      app->add_option("output", o->out, "Directory to write (must not exist or be empty)")->required();
      app->add_option("--format", o->format,
                      "gptq (GPTQ, 4 or 8 bits), awq (AWQ GEMM, 4-bit), w4a16 / w8a16 (compressed-tensors "
                      "pack-quantized), fp8 (compressed-tensors FP8 W8A8, dynamic activations)")
          ->required();
      app->add_option("--bits", o->bits, "gptq: 4 or 8 (default 4)")->check(CLI::IsMember({4, 8}));
      app->add_option("--group-size", o->group, "Inputs per scale: a multiple of 32, or -1 per channel (default 128; w8a16: -1)")
          ->check(CLI::Range(int64_t{-1}, int64_t{1} << 30));
      app->add_flag("--asym", o->asym, "gptq / w4a16: zero points (asymmetric); awq always has them");
      app->add_option("--checkpoint-format", o->checkpoint_format, "gptq: gptq (v1, the common one) or gptq_v2");
      app->add_option("--scale-dtype", o->scale_dtype, "w4a16 / w8a16: bf16 or f16 (default: f16 for a float16 model, else bf16)");
      return [o] { return run_quantize(*o); };
    });

}  // namespace
}  // namespace pagoda::cli
