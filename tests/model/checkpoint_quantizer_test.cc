// `pagoda quantize` (model/checkpoint_quantizer.h, loader/packed_int_writer.h) against the Python
// tool that writes the test checkpoints exactly as GPTQModel / AutoAWQ / compressed-tensors do
// (tools/make_quantized_checkpoint.py; its outputs are models/tiny/quant/<variant>):
//   1. the C++ writer's tensors are byte-identical to the tool's for every round-to-nearest
//      variant (same names, dtypes, shapes, bytes), and config.json means the same (the source
//      config plus an equal quantization_config). FP8 differs by design in the activation scheme:
//      the tool writes a static input_scale, the writer FP8_DYNAMIC (per-token scales, no
//      input_scale, nothing to calibrate);
//   2. Pagoda loads what it wrote: the model's logits equal those of the same source quantized on
//      line where the mappings coincide (w8a16 channel with f16 scales = --quantization int8, fp8 =
//      fp8; int4 is ggml's Q4_0 rule, no checkpoint format's), and every variant's KL against the unquantized forward
//      is bounded;
//   3. refusals: an already-quantized input, a group that does not divide a linear's inputs, a
//      non-empty output directory, invalid specs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cpu_greedy_run.h"
#include "reference_data.h"
#include "loader/hf_model_dir.h"
#include "loader/safetensors.h"
#include "model/checkpoint_quantizer.h"
#include "model/model_loader.h"
#include "test_paths.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using Format = PackedIntSpec::Format;

struct Variant {
  const char* name;    // models/tiny/quant/<name>, written by the Python tool
  const char* source;  // models/tiny/<source>
  PackedIntSpec spec;
};

PackedIntSpec spec(Format f, int bits, int64_t group, bool sym, bool v2 = false,
                   quant::ScaleRounding sc = quant::ScaleRounding::kBf16) {
  PackedIntSpec s;
  s.format = f;
  s.bits = bits;
  s.group = group;
  s.symmetric = sym;
  s.gptq_v2 = v2;
  s.ct_scale = sc;
  return s;
}

const Variant kVariants[] = {
    {"llama3-gptq-w4g128", "llama3", spec(Format::kGptq, 4, 128, true)},
    {"llama3-gptq-w4g32-asym", "llama3", spec(Format::kGptq, 4, 32, false)},
    {"llama3-gptq-w4g64-asym-v2", "llama3", spec(Format::kGptq, 4, 64, false, true)},
    {"llama3-gptq-w4-channel", "llama3", spec(Format::kGptq, 4, -1, true)},
    {"llama3-gptq-w8g128", "llama3", spec(Format::kGptq, 8, 128, true)},
    {"qwen2-gptq-w4g32", "qwen2", spec(Format::kGptq, 4, 32, true)},
    {"llama3-awq-w4g128", "llama3", spec(Format::kAwq, 4, 128, false)},
    {"llama3-awq-w4g32", "llama3", spec(Format::kAwq, 4, 32, false)},
    {"llama3-ct-w4a16-g128", "llama3", spec(Format::kCompressedTensors, 4, 128, true)},
    {"llama3-ct-w4a16-g64-asym", "llama3",
     spec(Format::kCompressedTensors, 4, 64, false, false, quant::ScaleRounding::kFp16)},
    {"llama3-ct-w8a16-channel", "llama3", spec(Format::kCompressedTensors, 8, -1, true)},
    {"llama3-ct-fp8-channel", "llama3", spec(Format::kFp8, 8, -1, true)},
};

std::string models(const std::string& rel) { return test::models_dir() + "/" + rel; }

fs::path scratch_root() { return fs::temp_directory_path() / ("pagoda-quantize-test-" + std::to_string(::getpid())); }

// The written checkpoints go when the test binary exits.
struct ScratchCleanup {
  ~ScratchCleanup() {
    std::error_code ec;
    fs::remove_all(scratch_root(), ec);
  }
} scratch_cleanup;

std::string scratch(const std::string& name) {
  const std::string d = (scratch_root() / name).string();
  fs::remove_all(d);
  return d;
}

nlohmann::json read_json(const std::string& path) {
  auto j = read_json_file(path);
  PAGODA_CHECK(j.ok(), "{}", j.status().to_string());
  return *j;
}

TEST(CheckpointQuantizer, TensorsAreByteIdenticalToThePythonTools) {
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    const std::string want_dir = models(std::string("tiny/quant/") + v.name);
    ASSERT_TRUE(fs::exists(want_dir)) << "run scripts/make_test_models.sh (tools/make_quantized_checkpoint.py)";
    const std::string out = scratch(v.name);
    auto report = quantize_checkpoint(models(std::string("tiny/") + v.source), out, v.spec);
    ASSERT_TRUE(report.ok()) << report.status().to_string();
    auto want = SafetensorsFile::open(want_dir + "/model.safetensors");
    auto got = SafetensorsFile::open(out + "/model.safetensors");
    ASSERT_TRUE(want.ok() && got.ok());
    int compared = 0;
    for (const auto& w : (*want)->tensors()) {
      const auto* g = (*got)->find_tensor(w.name);
      if (w.name.ends_with(".input_scale")) {  // FP8: the tool's static activation scale; the writer's are dynamic
        EXPECT_EQ(g, nullptr) << w.name;
        continue;
      }
      ASSERT_NE(g, nullptr) << w.name << " is missing";
      EXPECT_EQ(g->dtype_name, w.dtype_name) << w.name;
      EXPECT_EQ(g->shape, w.shape) << w.name;
      const auto wb = (*want)->tensor_bytes(w), gb = (*got)->tensor_bytes(*g);
      ASSERT_EQ(gb.size(), wb.size()) << w.name;
      size_t first = 0;
      while (first < wb.size() && wb[first] == gb[first]) ++first;
      EXPECT_EQ(first, wb.size()) << w.name << ": bytes differ from offset " << first;
      ++compared;
    }
    for (const auto& g : (*got)->tensors()) EXPECT_NE((*want)->find_tensor(g.name), nullptr) << g.name << " is extra";
    // config.json: the source's plus an equal quantization_config (FP8: the activation scheme aside).
    nlohmann::json wc = read_json(want_dir + "/config.json"), gc = read_json(out + "/config.json");
    nlohmann::json wq = wc["quantization_config"], gq = gc["quantization_config"];
    wc.erase("quantization_config");
    gc.erase("quantization_config");
    EXPECT_EQ(gc, wc);
    if (v.spec.format == Format::kFp8) {
      auto& ga = gq["config_groups"]["group_0"]["input_activations"];
      EXPECT_EQ(ga["dynamic"], true);
      EXPECT_EQ(ga["strategy"], "token");
      wq["config_groups"]["group_0"].erase("input_activations");
      gq["config_groups"]["group_0"].erase("input_activations");
    }
    EXPECT_EQ(gq, wq) << gq.dump() << "\n" << wq.dump();
    std::printf("[quantize] %-28s %d tensors byte-identical to the Python tool's (%lld linears, %.2f -> %.2f MiB)\n",
                v.name, compared, static_cast<long long>(report->linears),
                static_cast<double>(report->input_bytes) / 1048576.0, static_cast<double>(report->output_bytes) / 1048576.0);
  }
}

double mean_kl(const std::vector<float>& want, const std::vector<float>& got, int64_t V) {
  const int64_t T = static_cast<int64_t>(want.size()) / V;
  double sum = 0;
  for (int64_t p = 0; p < T; ++p) sum += test::kl_divergence(want.data() + p * V, got.data() + p * V, V);
  return sum / static_cast<double>(T);
}

TEST(CheckpointQuantizer, PagodaLoadsWhatItWrote) {
  ThreadPool pool(2);
  struct Same {
    const char* variant;
    WeightQuantization online;
  };
  // Where the written format and the on-line mode are the same weights.
  const Same same[] = {{"llama3-ct-w8a16-channel-f16", WeightQuantization::kInt8},
                       {"llama3-ct-fp8-channel", WeightQuantization::kFp8}};
  std::vector<Variant> variants(std::begin(kVariants), std::end(kVariants));
  variants.push_back({"llama3-ct-w8a16-channel-f16", "llama3",
                      spec(Format::kCompressedTensors, 8, -1, true, false, quant::ScaleRounding::kFp16)});
  // Mixtral: one packed module per expert (hidden size 64: groups of 32).
  variants.push_back({"mixtral-gptq-w4g32", "mixtral", spec(Format::kGptq, 4, 32, true)});
  variants.push_back({"mixtral-w8a16", "mixtral", spec(Format::kCompressedTensors, 8, -1, true)});
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    const std::string src = models(std::string("tiny/") + v.source);
    const std::string out = scratch(std::string("load-") + v.name);
    auto report = quantize_checkpoint(src, out, v.spec);
    ASSERT_TRUE(report.ok()) << report.status().to_string();
    auto base = load_model(src);
    auto loaded = load_model(out);
    ASSERT_TRUE(base.ok() && loaded.ok()) << loaded.status().to_string();
    const int64_t V = base->config.vocab_size;
    std::vector<int32_t> prompt = {1};
    for (int i = 1; i < 48; ++i) prompt.push_back(3 + (i * 37 + i * i) % static_cast<int>(V - 3));
    const auto want = test::cpu_greedy_run(base->config, *base->model, prompt, 8, pool);
    const auto got = test::cpu_greedy_run(loaded->config, *loaded->model, prompt, 8, pool);
    const double kl = mean_kl(want.logits, got.logits, V);
    // The on-line test's bounds per kind (online_quantization_test.cc: kl_bound).
    const bool four_bit = v.spec.format != Format::kFp8 && v.spec.bits == 4;
    EXPECT_LE(kl, four_bit ? 0.6 : v.spec.format == Format::kFp8 ? 0.08 : 0.01);
    std::string note;
    for (const Same& s : same) {
      if (std::string(s.variant) != v.name) continue;
      ModelLoadOptions lo;
      lo.quantization = s.online;
      auto online = load_model(src, lo);
      ASSERT_TRUE(online.ok());
      const auto o = test::cpu_greedy_run(online->config, *online->model, prompt, 8, pool);
      EXPECT_EQ(o.logits, got.logits) << "the written checkpoint and --quantization " << weight_quantization_name(s.online)
                                      << " are the same weights";
      EXPECT_EQ(o.greedy, got.greedy);
      note = fmt::format(", logits equal to --quantization {}", weight_quantization_name(s.online));
    }
    std::printf("[quantize-load] %-28s KL mean %.2e against the unquantized forward%s\n", v.name, kl, note.c_str());
  }
}

TEST(CheckpointQuantizer, RefusesWhatItCannotWrite) {
  auto bad = [](const std::string& in, const std::string& out, const PackedIntSpec& s, const char* needle) {
    auto r = quantize_checkpoint(in, out, s);
    ASSERT_FALSE(r.ok()) << in;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  const std::string llama = models("tiny/llama3");
  bad(models("tiny/quant/llama3-gptq-w4g128"), scratch("a"), spec(Format::kGptq, 4, 128, true), "already quantized");
  bad(models("tiny/llama3/model-f16.gguf"), scratch("b"), spec(Format::kGptq, 4, 128, true), "not a Hugging Face model directory");
  // intermediate 384 = 3 x 128: a group of 256 does not divide down_proj's inputs
  bad(llama, scratch("c"), spec(Format::kGptq, 4, 256, true), "does not divide");
  bad(llama, scratch("d"), spec(Format::kGptq, 3, 128, true), "3 bits");
  bad(llama, scratch("e"), spec(Format::kGptq, 4, 48, true), "multiple of 32");
  bad(llama, scratch("f"), spec(Format::kAwq, 4, 128, true), "zero points");
  const std::string full = scratch("g");
  fs::create_directories(full);
  std::ofstream(full + "/x") << "x";
  bad(llama, full, spec(Format::kGptq, 4, 128, true), "not an empty directory");
}

}  // namespace
}  // namespace pagoda
