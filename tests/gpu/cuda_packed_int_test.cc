// GPTQ, AWQ, compressed-tensors and FP8 checkpoints (models/tiny/quant, tools/make_quantized_checkpoint.py)
// on CUDA (act-order: the activations gathered into the weight's column order on the device; FP8:
// bf16 weights, (b) only): the loader's native rows (Q4_0 / Q4_1 / Q8_0) are uploaded as the device's planar blocks
// and run by the int8 GEMV (6-token prompt and every decode step) and the dequantize + cuBLASLt
// path (41-token prompt), against
//   (a) the same checkpoint on CUDA with its weights dequantized to bf16 at upload (the kernels), and
//   (b) the CPU backend's forward of the same checkpoint (its own repacked integer kernels);
// with the bounds of CudaParity.NativeQuantizedWeightsStayNearTheirDequantizedForward for (a), and
// for (b) the first greedy token equal, top-1 at >= 80 % of positions and logits within 0.1 of the
// range (bf16 activations on the device, q8 on the CPU). Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "cpu_greedy_run.h"
#include "gpu_test_util.h"
#include "model/model_loader.h"
#include "runtime/cuda_executor.h"
#include "test_paths.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

struct DeviceRun {
  std::vector<float> logits;  // [T, V]
  std::vector<int32_t> greedy;
  int64_t weight_bytes = 0;
  std::string describe;
};

Result<DeviceRun> run_on_cuda(const LoadedModel& m, const std::vector<int32_t>& prompt, int steps, bool native) {
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
  DeviceRun r;
  PAGODA_ASSIGN_OR_RETURN(auto terms, cuda_memory_terms(*m.model, co));
  r.weight_bytes = terms.weights;
  PAGODA_ASSIGN_OR_RETURN(auto ex, make_cuda_executor(*m.model, spec, co));
  r.describe = ex->describe();
  std::vector<int32_t> table;
  for (int64_t b = 0; b < nblocks; ++b) table.push_back(static_cast<int32_t>(nblocks + 2 - b));
  ForwardBatch batch;
  batch.add_sequence(prompt, static_cast<int32_t>(prompt.size()), table, bs, true, /*want_all_logits=*/true);
  const Tensor& l0 = ex->forward(batch);
  const int64_t V = m.config.vocab_size;
  r.logits.assign(l0.data_as<float>(), l0.data_as<float>() + l0.numel());
  int32_t next = test::argmax(r.logits.data() + (prompt.size() - 1) * V, V);
  int32_t ctx = static_cast<int32_t>(prompt.size());
  for (int s = 0; s < steps; ++s) {
    r.greedy.push_back(next);
    if (s + 1 == steps) break;
    batch.clear();
    batch.add_sequence({next}, ++ctx, table, bs);
    const Tensor& l = ex->forward(batch);
    next = test::argmax(l.data_as<float>(), V);
  }
  return r;
}

struct Agreement {
  int top1 = 0;
  double worst = 0, range = 0;
  int greedy_equal = 0;
};

Agreement compare(const std::vector<float>& ref, const std::vector<int32_t>& ref_greedy, const std::vector<float>& got,
                  const std::vector<int32_t>& got_greedy, int64_t T, int64_t V) {
  Agreement a;
  double lo = INFINITY, hi = -INFINITY;
  for (int64_t t = 0; t < T; ++t) a.top1 += test::argmax(ref.data() + t * V, V) == test::argmax(got.data() + t * V, V);
  for (int64_t i = 0; i < T * V; ++i) {
    a.worst = std::max(a.worst, std::abs(static_cast<double>(ref[i]) - got[i]));
    lo = std::min<double>(lo, ref[i]);
    hi = std::max<double>(hi, ref[i]);
  }
  a.range = hi - lo;
  while (a.greedy_equal < static_cast<int>(ref_greedy.size()) && ref_greedy[a.greedy_equal] == got_greedy[a.greedy_equal]) ++a.greedy_equal;
  return a;
}

TEST(CudaPackedInt, GptqAwqAndCompressedTensorsRunNativeAndAgreeWithTheCpu) {
  PAGODA_REQUIRE_GPU();
  const struct {
    const char* name;
    DType format;
  } variants[] = {{"llama3-gptq-w4g128", DType::kQ4_0},
                  {"llama3-gptq-w4g32-asym", DType::kQ4_1},
                  {"llama3-awq-w4g128", DType::kQ4_1},
                  {"llama3-ct-w8a16-channel", DType::kQ8_0},
                  {"llama3-gptq-w4g32-actorder", DType::kQ4_0},  // the device gathers the inputs first
                  {"llama3-fp8-block128", DType::kBF16}};  // FP8 dequantized to bf16 at load: (b) only
  ThreadPool pool(2);
  for (const auto& v : variants) {
    const std::string dir = test::models_dir() + "/tiny/quant/" + v.name;
    SCOPED_TRACE(dir);
    ASSERT_TRUE(fs::exists(dir)) << "no " << dir << " (scripts/make_test_models.sh writes it)";
    auto cpu = load_model(dir);
    ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
    ModelLoadOptions lo;
    lo.cpu_kernels = false;
    auto dev = load_model(dir, lo);
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    const int64_t V = dev->config.vocab_size;
    for (const int len : {6, 41}) {
      std::vector<int32_t> prompt = {1};
      for (int i = 1; i < len; ++i) prompt.push_back(3 + (i * 37) % static_cast<int>(V - 3));
      const int steps = 12;
      const int64_t T = len;
      auto native = run_on_cuda(*dev, prompt, steps, true);
      ASSERT_TRUE(native.ok()) << native.status().to_string();
      auto deq = run_on_cuda(*dev, prompt, steps, false);
      ASSERT_TRUE(deq.ok()) << deq.status().to_string();
      EXPECT_NE(native->describe.find(std::string(dtype_name(v.format)) + " "), std::string::npos)
          << "the packed linears stay " << dtype_name(v.format) << " on the device: " << native->describe;
      const bool blocks = v.format != DType::kBF16;
      if (blocks) {
        EXPECT_LT(native->weight_bytes, deq->weight_bytes) << "native blocks take fewer bytes than bf16";
      }
      const auto cpu_run = test::cpu_greedy_run(cpu->config, *cpu->model, prompt, steps, pool);
      // (a) the kernels: native vs dequantized-to-bf16 on the device
      const Agreement a = compare(deq->logits, deq->greedy, native->logits, native->greedy, T, V);
      if (blocks) {
        EXPECT_GE(a.top1, T * 8 / 10);
        EXPECT_LE(a.worst, 0.05 * a.range);
        EXPECT_GE(a.greedy_equal, 1);
      }
      // (b) the backends: CUDA native vs the CPU
      const Agreement b = compare(cpu_run.logits, cpu_run.greedy, native->logits, native->greedy, T, V);
      EXPECT_GE(b.top1, T * 8 / 10);
      EXPECT_LE(b.worst, 0.1 * b.range);
      EXPECT_GE(b.greedy_equal, 1);
      std::printf("[cuda-packed-int] %-26s prompt %d: vs bf16-dequantized top-1 %d/%lld max|diff| %.3g x range greedy "
                  "%d/%d; vs CPU top-1 %d/%lld max|diff| %.3g x range greedy %d/%d; weights %.3f vs %.3f MiB\n",
                  v.name, len, a.top1, static_cast<long long>(T), a.worst / a.range, a.greedy_equal, steps, b.top1,
                  static_cast<long long>(T), b.worst / b.range, b.greedy_equal, steps, native->weight_bytes / 1048576.0,
                  deq->weight_bytes / 1048576.0);
      if (len == 6) std::printf("[cuda-packed-int] %s: %s\n", v.name, native->describe.c_str());
    }
  }
}

}  // namespace
}  // namespace pagoda
