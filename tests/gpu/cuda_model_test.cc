// Models on the CUDA backend (the GPU column of the model tier):
//   - every f32 reference set (testdata/reference: tiny Llama-3 / Qwen2 / Qwen3 / Mistral / MQA
//     models from HF directories and GGUF files, f16 and quantized GGUFs dequantized exactly,
//     stories260K) through the f32 path, against transformers with the exact tolerance, prefill
//     and greedy decode (paged KV cache, CUDA graphs); and CPU vs CUDA agreement;
//   - the bf16 path against transformers on random-weight Llama-3 / Qwen2 / Qwen3-shaped models
//     made on the GPU machine (tools/make_gpu_references.py; PAGODA_GPU_REF_DIR), with the bf16
//     bound that tool derives;
// (The engine on CUDA: cuda_engine_test.cc.)
// Every test skips with a message when no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/engine_config.h"
#include "model/model_config.h"
#include "runtime/memory_plan.h"
#include "common/dtype.h"
#include "engine/engine_core.h"
#include "gpu_test_util.h"
#include "model/model_loader.h"
#include "engine_test_util.h"
#include "prompt_logprobs_reference.h"
#include "reference_data.h"
#include "test_paths.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::argmax;
using test::read_f32;
using test::read_json;

struct RunResult {
  std::vector<float> logits;  // [T, V]
  std::vector<int32_t> greedy;
};

// Prefill with every position's logits, then `steps` greedy decode steps, on `ex`.
RunResult run_executor(ModelExecutor& ex, const ModelConfig& cfg, const std::vector<int32_t>& prompt, int steps,
                       int64_t nblocks) {
  const int64_t bs = 16;
  std::vector<int32_t> table;  // scrambled, descending, distinct blocks
  for (int64_t b = 0; b < nblocks; ++b) table.push_back(static_cast<int32_t>(nblocks + 2 - b));
  ForwardBatch batch;
  batch.add_sequence(prompt, static_cast<int32_t>(prompt.size()), table, bs, true, /*want_all_logits=*/true);
  const Tensor& l0 = ex.forward(batch);
  RunResult r;
  const int64_t V = cfg.vocab_size;
  r.logits.assign(l0.data_as<float>(), l0.data_as<float>() + l0.numel());
  int32_t next = argmax(r.logits.data() + (prompt.size() - 1) * V, V);
  int32_t ctx = static_cast<int32_t>(prompt.size());
  for (int s = 0; s < steps; ++s) {
    r.greedy.push_back(next);
    if (s + 1 == steps) break;  // the last token's own logits are not used (and may lie past the context)
    batch.clear();
    batch.add_sequence({next}, ++ctx, table, bs);
    const Tensor& l = ex.forward(batch);
    next = argmax(l.data_as<float>(), V);
  }
  return r;
}

Result<std::unique_ptr<ModelExecutor>> cuda_executor_for(const LoadedModel& m, int64_t prompt_len, int steps,
                                                         const std::string& dtype, DType kv, int64_t* nblocks) {
  const int64_t bs = 16;
  *nblocks = (prompt_len + steps + bs - 1) / bs + 1;
  KvCacheSpec spec;
  spec.num_blocks = *nblocks + 3;
  spec.block_size = bs;
  spec.dtype = kv;
  CudaExecutorOptions co;
  co.dtype = dtype;
  co.max_num_tokens = std::max<int64_t>(prompt_len, 16);
  co.max_num_seqs = 4;
  co.max_model_len = (*nblocks + 1) * bs;
  return make_cuda_executor(*m.model, spec, co);
}

// Checks one reference prompt; returns false when the checkpoint's logits are off.
void check_prompt(const RunResult& got, const json& ref, const std::vector<float>& ref_logits, const json& tol, int64_t V,
                  const std::string& label) {
  const double max_abs = tol["max_abs_diff"].get<double>();
  const auto exempt = tol["top1_exempt_positions"].get<std::vector<int64_t>>();
  const int64_t greedy_prefix = tol["greedy_must_match_prefix"].get<int64_t>();
  const auto positions = ref["logits_positions"].get<std::vector<int64_t>>();
  const auto top1 = ref["top1"].get<std::vector<int32_t>>();
  const auto greedy_ref = ref["greedy"]["ids"].get<std::vector<int32_t>>();
  double worst = 0;
  for (size_t r = 0; r < positions.size(); ++r)
    for (int64_t v = 0; v < V; ++v)
      worst = std::max(worst, std::abs(static_cast<double>(got.logits[positions[r] * V + v]) - ref_logits[r * V + v]));
  EXPECT_LE(worst, max_abs) << label << ": max |logit diff| " << worst << " (bound " << max_abs << ")";
  for (size_t p = 0; p < top1.size(); ++p) {
    if (std::find(exempt.begin(), exempt.end(), static_cast<int64_t>(p)) != exempt.end()) continue;
    EXPECT_EQ(argmax(got.logits.data() + p * V, V), top1[p]) << label << ": top-1 differs at position " << p;
  }
  int64_t matched = 0;
  for (; matched < static_cast<int64_t>(greedy_ref.size()) && got.greedy[matched] == greedy_ref[matched]; ++matched) {
  }
  EXPECT_GE(matched, std::min<int64_t>(greedy_prefix, static_cast<int64_t>(greedy_ref.size())))
      << label << ": greedy token " << matched << " differs";
  const double range = ref["logit_range"].get<double>();
  std::printf("[gpu-parity] %-34s max|diff| %.2e = %.2e x range (bound %.1e x range), greedy %lld/%zu (must %lld)\n",
              label.c_str(), worst, worst / range, max_abs / range, static_cast<long long>(matched), greedy_ref.size(),
              static_cast<long long>(greedy_prefix));
}

TEST(CudaParity, F32PathMatchesTransformersOnEveryReferenceSet) {
  PAGODA_REQUIRE_GPU();
  const std::string index_path = test::testdata_dir() + "/reference/index.json";
  ASSERT_TRUE(fs::exists(index_path));
  json index = read_json(index_path);
  int checked = 0;
  std::set<std::string> checked_sets, refused_sets;
  for (auto& [set, s] : index["sets"].items()) {
    for (auto& cp : s["checkpoints"]) {
      const std::string root = cp["root"] == "shared" ? test::shared_dir() : test::models_dir();
      const std::string path = root + "/" + cp["path"].get<std::string>();
      if (!fs::exists(path)) {
        std::printf("[gpu-parity] %s: %s not present here, skipped\n", set.c_str(), path.c_str());
        continue;
      }
      ModelLoadOptions lo;
      lo.cpu_kernels = false;
      lo.max_model_len = cp.value("max_model_len", int64_t{0});  // LongRoPE's short regime
      auto loaded = load_model(path, lo);
      ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
      for (const auto& prompt_name : s["prompts"]) {
        const std::string base = test::testdata_dir() + "/reference/" + set + "/" + prompt_name.get<std::string>();
        json ref = read_json(base + ".json");
        const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
        const int64_t V = ref["vocab_size"].get<int64_t>();
        const auto positions = ref["logits_positions"].get<std::vector<int64_t>>();
        const int steps = static_cast<int>(ref["greedy"]["ids"].size());
        int64_t nblocks = 0;
        // f32 compute: weights converted (f16, bf16) or dequantized (q8_0, q4_0, q4_1) exactly, f32
        // activations and KV: the exact regime for every set.
        auto ex = cuda_executor_for(*loaded, static_cast<int64_t>(prompt.size()), steps, "f32", DType::kF32, &nblocks);
        // A family or variant the CUDA backend does not run would be refused at load with the
        // reason cuda_supports_model gives, never run wrongly (every reference set runs today).
        if (const Status support = cuda_supports_model(loaded->config); !support.ok()) {
          ASSERT_FALSE(ex.ok()) << set;
          EXPECT_EQ(ex.status().code(), StatusCode::kUnimplemented) << ex.status().to_string();
          EXPECT_EQ(ex.status().message(), support.message());
          std::printf("[gpu-parity] %s: refused as expected: %s\n", set.c_str(), ex.status().message().c_str());
          refused_sets.insert(set);
          break;
        }
        ASSERT_TRUE(ex.ok()) << ex.status().to_string();
        RunResult got = run_executor(**ex, loaded->config, prompt, steps, nblocks);
        check_prompt(got, ref, read_f32(base + ".f32", positions.size() * V), ref["tolerance"], V,
                     set + "/" + prompt_name.get<std::string>() + " " + path.substr(path.rfind('/') + 1));
        ++checked;
        checked_sets.insert(set);
      }
    }
  }
  EXPECT_GT(checked, 20);
  EXPECT_TRUE(checked_sets.count("gemma3")) << "the Gemma 3 set (sliding windows, two RoPE tables, post-norms, GeGLU) did not run";
  for (const char* phi : {"phi3", "phi3-short", "phi4-mini", "phi4-mini-short", "phi4"})
    EXPECT_TRUE(checked_sets.count(phi)) << "the " << phi << " set (fused qkv / gate_up, LongRoPE, partial rotary) did not run";
  EXPECT_TRUE(checked_sets.count("gemma2")) << "the Gemma 2 set (attention and final soft-capping) did not run";
  // The MoE sets (backend/cuda/moe.cu): routing with and without renormalisation, a shared expert
  // (Qwen2-MoE), q/k norms, GGUF stacked experts from f16 / q8_0 / q4_0 files dequantized exactly;
  // the prompts run the grouped SIMT GEMM (prefill) and the grouped GEMV (short prompts, decode).
  for (const char* moe : {"mixtral", "mixtral-q8_0", "mixtral-q4_0", "qwen2-moe", "qwen3-moe", "qwen3-moe-f16", "olmoe"})
    EXPECT_TRUE(checked_sets.count(moe)) << "the " << moe << " set (mixture of experts) did not run";
  EXPECT_TRUE(refused_sets.empty()) << "a reference set was refused: " << *refused_sets.begin();
}

TEST(CudaParity, CpuAndCudaAgreeOnTheF32Path) {
  PAGODA_REQUIRE_GPU();
  for (const std::string& path :
       {test::models_dir() + "/tiny/qwen2", test::models_dir() + "/tiny/gemma3/model-f32.gguf", test::stories260k_gguf(),
        test::models_dir() + "/tiny/mixtral/model-f32.gguf", test::models_dir() + "/tiny/qwen2-moe",
        test::models_dir() + "/tiny/olmoe/model-f32.gguf"}) {
    if (!fs::exists(path)) continue;
    auto cpu_model = load_model(path);  // CPU kernels (fused weights may be repacked)
    ASSERT_TRUE(cpu_model.ok());
    ModelLoadOptions dev_lo;
    dev_lo.cpu_kernels = false;
    auto dev_model = load_model(path, dev_lo);  // plain matrices for the device
    ASSERT_TRUE(dev_model.ok());
    std::vector<int32_t> prompt = {1};
    for (int i = 0; i < 60; ++i) prompt.push_back(3 + (i * 37) % 500);
    const int steps = 16;
    int64_t nblocks = 0;
    auto ex = cuda_executor_for(*dev_model, static_cast<int64_t>(prompt.size()), steps, "f32", DType::kF32, &nblocks);
    ASSERT_TRUE(ex.ok()) << ex.status().to_string();
    RunResult g = run_executor(**ex, cpu_model->config, prompt, steps, nblocks);
    ThreadPool pool(2);
    KvCacheSpec spec;
    spec.num_blocks = nblocks + 3;
    spec.dtype = DType::kF32;
    auto cpu_ex = make_cpu_executor(*cpu_model->model, spec, pool);
    RunResult c = run_executor(*cpu_ex, cpu_model->config, prompt, steps, nblocks);
    double worst = 0, lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < c.logits.size(); ++i) {
      worst = std::max(worst, std::abs(double(c.logits[i]) - g.logits[i]));
      lo = std::min<double>(lo, c.logits[i]);
      hi = std::max<double>(hi, c.logits[i]);
    }
    EXPECT_LE(worst, 1e-4 * (hi - lo)) << path;
    EXPECT_EQ(c.greedy, g.greedy) << path;
    std::printf("[cpu-vs-cuda] %s: max|diff| %.2e = %.2e x range, greedy equal %d\n", path.c_str(), worst,
                worst / (hi - lo), c.greedy == g.greedy);
  }
}

// GGUF quantized files on the bf16 path with their weights kept in blocks (the int8 GEMV at one
// row, dequantized into the scratch for the prompt) against the same file dequantized to bf16 at
// load: the int8 activations are the only difference, so top-1 agrees almost everywhere and the
// logits stay within a small fraction of their range; the native weights take fewer bytes.
TEST(CudaParity, NativeQuantizedWeightsStayNearTheirDequantizedForward) {
  PAGODA_REQUIRE_GPU();
  const std::string d = test::models_dir();
  int checked = 0;
  for (const std::string& path : {d + "/tiny/llama-mqa/model-q4_0.gguf", d + "/tiny/llama-mqa/model-q8_0.gguf",
                                  d + "/tiny/qwen2/model-q4_0.gguf", d + "/tiny/llama3/model-q8_0.gguf",
                                  d + "/SmolLM2-135M-Instruct.Q4_1.gguf",
                                  // MoE: the experts in blocks too (the grouped int8 GEMV for the short
                                  // prompt and the steps, the grouped tensor-core GEMM for the long one)
                                  d + "/tiny/mixtral/model-q4_0.gguf", d + "/tiny/mixtral/model-q8_0.gguf"}) {
    if (!fs::exists(path)) continue;
    ModelLoadOptions lo;
    lo.cpu_kernels = false;
    auto m = load_model(path, lo);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    // A short prompt (its logits from the int8 GEMV) and a long one (dequantized for cuBLASLt);
    // every greedy step after them is a one-row GEMV.
    for (const int len : {6, 41}) {
      std::vector<int32_t> prompt = {1};
      for (int i = 1; i < len; ++i) prompt.push_back(3 + (i * 37) % std::min<int>(500, m->config.vocab_size - 3));
      const int steps = 12;
      RunResult runs[2];
      int64_t bytes[2] = {0, 0};
      for (int native = 0; native < 2; ++native) {
        const int64_t bs = 16;
        const int64_t nblocks = (static_cast<int64_t>(prompt.size()) + steps + bs - 1) / bs + 1;
        KvCacheSpec spec;
        spec.num_blocks = nblocks + 3;
        spec.block_size = bs;
        spec.dtype = DType::kBF16;
        CudaExecutorOptions co;
        co.dtype = "bf16";
        co.max_num_tokens = 64;
        co.max_num_seqs = 4;
        co.max_model_len = (nblocks + 1) * bs;
        co.tuning.quant_weights = native ? "native" : "dequantize";
        auto terms = cuda_memory_terms(*m->model, co);
        ASSERT_TRUE(terms.ok());
        bytes[native] = terms->weights;
        auto ex = make_cuda_executor(*m->model, spec, co);
        ASSERT_TRUE(ex.ok()) << ex.status().to_string();
        runs[native] = run_executor(**ex, m->config, prompt, steps, nblocks);
        if (native && len == 6) std::printf("[cuda-quant] %s: %s\n", path.c_str(), (*ex)->describe().c_str());
      }
      const int64_t V = m->config.vocab_size;
      const auto& ref = runs[0].logits;
      const auto& got = runs[1].logits;
      double worst = 0, lo_v = INFINITY, hi_v = -INFINITY;
      int agree = 0, greedy_equal = 0;
      const int64_t T = static_cast<int64_t>(prompt.size());
      for (int64_t t = 0; t < T; ++t) agree += argmax(ref.data() + t * V, V) == argmax(got.data() + t * V, V);
      for (size_t i = 0; i < ref.size(); ++i) {
        worst = std::max(worst, std::abs(double(ref[i]) - got[i]));
        lo_v = std::min<double>(lo_v, ref[i]);
        hi_v = std::max<double>(hi_v, ref[i]);
      }
      for (; greedy_equal < steps && runs[0].greedy[greedy_equal] == runs[1].greedy[greedy_equal]; ++greedy_equal) {
      }
      // Random tiny models are full of near-ties: the continuations may part after their first
      // token (the H200 run: 2 of 12 for llama-mqa q8_0), the prompt's top-1 may not (6/6, 5/6, 41/41).
      EXPECT_GE(agree, T * 8 / 10) << path << ": top-1 agreement " << agree << "/" << T;
      EXPECT_LE(worst, 0.05 * (hi_v - lo_v)) << path;
      if (len == 6) EXPECT_GT(worst, 0.0) << path << ": the int8 GEMV ran (its activations are rounded)";
      EXPECT_GE(greedy_equal, 1) << path << ": the first greedy token differs";
      EXPECT_LT(bytes[1], bytes[0]) << path << ": native blocks take fewer bytes than bf16";
      std::printf("[cuda-quant] %s prompt %d: top-1 %d/%lld, max|diff| %.3g = %.3g x range, greedy %d/%d equal, weights "
                  "%.2f vs %.2f MiB bf16\n",
                  path.c_str(), len, agree, static_cast<long long>(T), worst, worst / (hi_v - lo_v), greedy_equal, steps,
                  bytes[1] / 1048576.0, bytes[0] / 1048576.0);
    }
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no quantized GGUF test models under " << d;
}

// One prompt of a transformers reference set (tools/make_gpu_references.py, random BF16 models).
struct GpuRefPrompt {
  std::string label;  // set/prompt
  std::string base;   // its files without the extension (.json, .f32)
  json ref;
  std::vector<int32_t> prompt;
  int64_t vocab = 0;
  std::vector<int64_t> positions;  // the scored positions
  int steps = 0;                   // greedy continuation length
};
// The reference directory (PAGODA_GPU_REF_DIR) when it has an index.json, else "" (the tests skip).
std::string gpu_reference_index_dir() {
  const std::string dir = test::gpu_ref_dir();
  return !dir.empty() && fs::exists(dir + "/index.json") ? dir : std::string();
}
constexpr const char* kNoGpuReferences =
    "PAGODA_GPU_REF_DIR unset or without index.json: run tools/make_gpu_references.py on the GPU machine";
// Calls fn(loaded model, prompt) for every prompt of every set of the reference directory; returns
// how many prompts there were.
int for_each_gpu_reference(const std::string& dir, const std::function<void(const LoadedModel&, const GpuRefPrompt&)>& fn) {
  json index = read_json(dir + "/index.json");
  int count = 0;
  for (auto& [set, s] : index["sets"].items()) {
    ModelLoadOptions lo;
    lo.cpu_kernels = false;
    auto loaded = load_model(dir + "/" + s["checkpoint"].get<std::string>(), lo);
    EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
    if (!loaded.ok()) continue;
    for (const auto& prompt_name : s["prompts"]) {
      GpuRefPrompt p;
      p.label = set + "/" + prompt_name.get<std::string>();
      p.base = dir + "/" + p.label;
      p.ref = read_json(p.base + ".json");
      p.prompt = p.ref["prompt_ids"].get<std::vector<int32_t>>();
      p.vocab = p.ref["vocab_size"].get<int64_t>();
      p.positions = p.ref["logits_positions"].get<std::vector<int64_t>>();
      p.steps = static_cast<int>(p.ref["greedy"]["ids"].size());
      fn(*loaded, p);
      ++count;
    }
  }
  return count;
}
// The prompt and its greedy continuation on a bf16 CUDA executor with a KV cache of type kv.
RunResult run_gpu_reference(const LoadedModel& loaded, const GpuRefPrompt& p, DType kv) {
  int64_t nblocks = 0;
  auto ex = cuda_executor_for(loaded, static_cast<int64_t>(p.prompt.size()), p.steps, "bf16", kv, &nblocks);
  EXPECT_TRUE(ex.ok()) << ex.status().to_string();
  if (!ex.ok()) return {};
  return run_executor(**ex, loaded.config, p.prompt, p.steps, nblocks);
}

TEST(CudaParity, Bf16PathMatchesTransformersOnRandomModels) {
  PAGODA_REQUIRE_GPU();
  const std::string dir = gpu_reference_index_dir();
  if (dir.empty()) GTEST_SKIP() << kNoGpuReferences;
  const int checked = for_each_gpu_reference(dir, [&](const LoadedModel& loaded, const GpuRefPrompt& p) {
    for (DType kv : {DType::kBF16, DType::kF16}) {
      RunResult got = run_gpu_reference(loaded, p, kv);
      if (got.logits.empty()) continue;
      check_prompt(got, p.ref, read_f32(p.base + ".f32", p.positions.size() * p.vocab), p.ref["tolerance"], p.vocab,
                   p.label + " kv " + std::string(dtype_name(kv)));
    }
  });
  EXPECT_GT(checked, 0);
}

// The FP8 E4M3 KV cache (--kv-dtype f8_e4m3) on the bf16 path: each key and value keeps 3 mantissa
// bits, so the logits may move further from transformers' fp32 run than the bf16 path's bound.
// Bounds: 4x the bf16 path's max |logit diff| and the top-1 token at 17 of 20 scored positions or
// more. Measured on the H200 (Llama-3, Qwen2, Qwen3 shapes, prompts of 1 to 300 tokens): max
// |diff| 1.4-3.0e-2 x range against bounds of 4-6e-2; top-1 at 271 of 300 (0.90) or more.
TEST(CudaParity, Fp8KvCacheStaysNearTransformers) {
  PAGODA_REQUIRE_GPU();
  const std::string dir = gpu_reference_index_dir();
  if (dir.empty()) GTEST_SKIP() << kNoGpuReferences;
  const int checked = for_each_gpu_reference(dir, [&](const LoadedModel& loaded, const GpuRefPrompt& p) {
    RunResult got = run_gpu_reference(loaded, p, DType::kF8E4M3);
    if (got.logits.empty()) return;
    const int64_t V = p.vocab;
    const auto top1 = p.ref["top1"].get<std::vector<int32_t>>();
    const auto ref_logits = read_f32(p.base + ".f32", p.positions.size() * V);
    const double bound = 4 * p.ref["tolerance"]["max_abs_diff"].get<double>();
    double worst = 0;
    for (size_t r = 0; r < p.positions.size(); ++r)
      for (int64_t v = 0; v < V; ++v)
        worst = std::max(worst, std::abs(static_cast<double>(got.logits[p.positions[r] * V + v]) - ref_logits[r * V + v]));
    size_t same_top1 = 0;
    for (size_t q = 0; q < top1.size(); ++q) same_top1 += argmax(got.logits.data() + q * V, V) == top1[q];
    const std::string label = p.label + " kv f8_e4m3";
    // The bounds were measured on the dense shapes; in a mixture of experts the FP8 keys' noise
    // also moves tokens across the router's top-k boundary, a discrete change those bounds do not
    // describe: the MoE sets' figures are printed (the "moe" tag), not bounded.
    const bool moe = loaded.config.is_moe();
    if (!moe) {
      EXPECT_LE(worst, bound) << label << ": max |logit diff| " << worst;
      EXPECT_GE(20 * same_top1, 17 * top1.size()) << label << ": top-1 agrees at " << same_top1 << " of " << top1.size();
    }
    const double range = p.ref["logit_range"].get<double>();
    std::printf("[gpu-parity] %-34s max|diff| %.2e = %.2e x range (bound %.1e x range%s), top-1 %zu/%zu\n", label.c_str(),
                worst, worst / range, bound / range, moe ? ", moe: not asserted" : "", same_top1, top1.size());
  });
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace pagoda
