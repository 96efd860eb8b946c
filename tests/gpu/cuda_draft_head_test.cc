// Draft heads (EAGLE-3, MiMo MTP) on a CUDA target: the hidden-state capture inside decode and
// verification graphs (the rows against the CPU executor's and the same step run eagerly), and the
// MTP module's logits through the target's output head on the device against the host head's;
// the heads' device runner against the host runner.
// The engine-level greedy identity is CudaEngine.DraftHeadsKeepGreedyOutput. Skips with a message
// when no GPU is present.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "draft_head_test_util.h"
#include "gpu_test_util.h"
#include "model/draft_head.h"
#include "model/model_loader.h"
#include "runtime/draft_head_forward.h"
#include "runtime/forward_batch.h"
#include "runtime/model_executor.h"
#include "test_paths.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kBlock = 16;
const int32_t kPromptLen[3] = {40, 23, 61};

std::vector<int32_t> table_of(int s) {
  std::vector<int32_t> t;
  for (int b = 0; b < 8; ++b) t.push_back(1 + 16 * s + b);
  return t;
}
int32_t token(int64_t i, int64_t vocab) { return static_cast<int32_t>(3 + (i * 37) % std::min<int64_t>(500, vocab - 3)); }

// Steps replayed from verification graphs so far (the executor's profile_report line).
int64_t verify_replays(const ModelExecutor& ex) {
  const std::string r = ex.profile_report();
  const size_t at = r.find("verification graphs:");
  if (at == std::string::npos) return 0;
  const size_t p = r.find("), ", at);
  return p == std::string::npos ? -1 : std::stoll(r.substr(p + 3));
}

std::vector<float> captured_rows(const ModelExecutor& ex, int64_t T, int64_t width) {
  const Tensor* t = ex.captured_hidden();
  EXPECT_NE(t, nullptr);
  if (t == nullptr) return {};
  EXPECT_EQ(t->dim(0), T);
  EXPECT_EQ(t->dim(1), width);
  return {t->data_as<const float>(), t->data_as<const float>() + t->numel()};
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::abs(static_cast<double>(x)));
  return m;
}
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double w = 0;
  for (size_t i = 0; i < a.size(); ++i) w = std::max(w, std::abs(static_cast<double>(a[i]) - b[i]));
  return w;
}

KvCacheSpec f32_cache(int64_t num_blocks) {
  KvCacheSpec spec;
  spec.num_blocks = num_blocks;
  spec.block_size = kBlock;
  spec.dtype = DType::kF32;
  return spec;
}

CudaExecutorOptions f32_options(int64_t max_num_seqs, bool batch_invariant) {
  CudaExecutorOptions co;
  co.dtype = "f32";
  co.max_num_tokens = 256;
  co.max_num_seqs = max_num_seqs;
  co.max_model_len = 128;
  co.batch_invariant = batch_invariant;
  return co;
}

// The prompt of the head tests and the target's captured rows over it ([T, n Dt] f32, the layers
// `after`), from the CPU executor (blocks 1 and 2 of `spec`'s cache).
const std::vector<int32_t> kHeadPrompt = {1, 17, 300, 45, 9, 211, 77, 500, 3, 128, 64, 256, 33, 411, 2, 90, 12, 7};
std::vector<float> prompt_features(const Model& target, const KvCacheSpec& spec, const std::vector<int64_t>& after,
                                   ThreadPool& pool) {
  auto cpu = make_cpu_executor(target, spec, pool);
  EXPECT_TRUE(cpu->set_hidden_capture(after));
  ForwardBatch b;
  b.add_sequence(kHeadPrompt, static_cast<int32_t>(kHeadPrompt.size()), {1, 2}, kBlock, true, true);
  cpu->forward(b);
  const Tensor* fx = cpu->captured_hidden();
  EXPECT_NE(fx, nullptr);
  return fx == nullptr ? std::vector<float>{} : test::floats_of(*fx);
}

// Expects the device's drafts to equal the host's wherever a host logits row ([rows, vocab] f32)
// has its top two further apart than `tie` (a near tie: either draft is right); returns how many
// rows were compared.
int expect_same_drafts(const std::vector<float>& host_logits, int64_t vocab, const std::vector<int32_t>& host_drafts,
                       const std::vector<int32_t>& device_drafts, double tie, const std::string& what) {
  int compared = 0;
  for (size_t i = 0; i < host_drafts.size(); ++i) {
    std::vector<float> row(host_logits.begin() + static_cast<int64_t>(i) * vocab, host_logits.begin() + static_cast<int64_t>(i + 1) * vocab);
    std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
    if (row[0] - row[1] <= tie) continue;
    EXPECT_EQ(host_drafts[i], device_drafts.at(i)) << what << " row " << i;
    ++compared;
  }
  return compared;
}

// The prompts of three sequences, then verification steps (sequence s gets fresh[s] tokens, logits
// at each) and one-token decode steps, each run through the graphs (capture on), eagerly, and on
// the CPU executor: the captured rows [T, 3 D] (layers 1, 0, 1 of the tiny llama) of the graph
// step within 1e-3 x max|row| of the CPU's (CudaLayerSplit's f32 bound; a row in the wrong place
// or a missing copy is O(1) off), bitwise equal to the eager step's in batch-invariant mode; the verification steps replay
// a graph while capturing.
TEST(CudaDraftHeads, HiddenCaptureInsideGraphsMatchesTheCpu) {
  PAGODA_REQUIRE_GPU();
  const std::string tiny = test::models_dir() + "/tiny/llama3/model-f32.gguf";
  if (!fs::exists(tiny)) GTEST_SKIP() << "no tiny model (tools/make_tiny_models.py)";
  const std::vector<int64_t> layers = {1, 0, 1};
  auto cpu_model = load_model(tiny);
  ASSERT_TRUE(cpu_model.ok()) << cpu_model.status().to_string();
  const int64_t V = cpu_model->config.vocab_size, D = cpu_model->config.hidden_size, W = 3 * D;
  const KvCacheSpec spec = f32_cache(3 * 16 + 2);
  ThreadPool pool(2);
  for (bool invariant : {true, false}) {
    for (const char* capture : {"lazy", "start"}) {
      const std::string label = fmt::format("invariant {} capture {}", invariant, capture);
      SCOPED_TRACE(label);
      ModelLoadOptions lo;
      lo.cpu_kernels = false;
      auto m = load_model(tiny, lo);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      CudaExecutorOptions co = f32_options(32, invariant);
      co.tuning.graph_capture = capture;
      auto ex = make_cuda_executor(*m->model, spec, co);
      ASSERT_TRUE(ex.ok()) << ex.status().to_string();
      ModelExecutor& e = **ex;
      ASSERT_TRUE(e.set_hidden_capture(layers));
      auto cpu = make_cpu_executor(*cpu_model->model, spec, pool);
      ASSERT_TRUE(cpu->set_hidden_capture(layers));

      auto check = [&](const ForwardBatch& b, const std::string& what, bool verification) {
        const int64_t T = b.num_tokens();
        ASSERT_TRUE(e.set_graphs_enabled(true));
        const int64_t before = verify_replays(e);
        e.forward(b);
        if (verification) {
          EXPECT_EQ(verify_replays(e), before + 1) << what << ": no verification graph replayed";
        }
        const std::vector<float> g = captured_rows(e, T, W);
        e.set_graphs_enabled(false);
        e.forward(b);
        const std::vector<float> x = captured_rows(e, T, W);
        cpu->forward(b);
        const std::vector<float> c = captured_rows(*cpu, T, W);
        ASSERT_EQ(g.size(), c.size());
        ASSERT_EQ(x.size(), c.size());
        const double scale = std::max(1.0, max_abs(c));
        EXPECT_LE(max_abs_diff(g, c), 1e-3 * scale) << what << ": graph rows vs the CPU's";
        EXPECT_LE(max_abs_diff(x, c), 1e-3 * scale) << what << ": eager rows vs the CPU's";
        if (invariant) {
          EXPECT_EQ(0, std::memcmp(g.data(), x.data(), g.size() * 4)) << what << ": graph vs eager";
        }
        // Columns: layer 1, layer 0, layer 1.
        for (int64_t t = 0; t < T; ++t) {
          const float* r = g.data() + t * W;
          EXPECT_EQ(0, std::memcmp(r, r + 2 * D, static_cast<size_t>(D) * 4)) << what << " row " << t;
          EXPECT_NE(0, std::memcmp(r, r + D, static_cast<size_t>(D) * 4)) << what << " row " << t;
        }
        std::printf("[capture-graph] %s %s: max|graph - cpu| %.2e, max|row| %.2e\n", label.c_str(), what.c_str(),
                    max_abs_diff(g, c), scale);
      };

      ForwardBatch pre;
      for (int s = 0; s < 3; ++s) {
        std::vector<int32_t> ids;
        for (int i = 0; i < kPromptLen[s]; ++i) ids.push_back(token(100 * s + i, V));
        pre.add_sequence(ids, kPromptLen[s], table_of(s), kBlock);
      }
      check(pre, "prompts", false);
      const std::vector<std::vector<int>> steps = {{5, 5, 5}, {5, 1, 3}, {0, 0, 5}, {2, 0, 0}};
      for (const std::vector<int>& fresh : steps) {
        ForwardBatch b;
        for (int s = 0; s < 3; ++s) {
          if (fresh[s] == 0) continue;
          std::vector<int32_t> ids;
          for (int j = 0; j < fresh[s]; ++j) ids.push_back(token(1000 + 10 * s + j, V));
          b.add_sequence(ids, kPromptLen[s] + fresh[s], table_of(s), kBlock, true, true);
        }
        check(b, fmt::format("verification {{{},{},{}}}", fresh[0], fresh[1], fresh[2]), true);
      }
      for (int n : {3, 1}) {  // decode graphs of buckets 4 (3 padded) and 1
        ForwardBatch d;
        for (int s = 0; s < n; ++s) d.add_sequence({token(2000 + s, V)}, kPromptLen[s] + 6, table_of(s), kBlock);
        check(d, fmt::format("decode x{}", n), false);
      }
    }
  }
}

// An MTP module without a host lm_head, its logits through the CUDA executor's output head
// (ModelExecutor::output_logits), against the same module with the target's CPU output head: the
// same catch-up pass and chained steps on the same captured rows give logits within 1e-4 x range
// (f32 compute) and the same drafts wherever the top two logits of the host run are further apart
// than that.
TEST(CudaDraftHeads, MtpOutputHeadOnTheDeviceMatchesTheHost) {
  PAGODA_REQUIRE_GPU();
  const std::string target = test::models_dir() + "/tiny/qwen2/model-f32.gguf";
  const std::string mimo = test::models_dir() + "/tiny/mimo-mtp";
  if (!fs::exists(target) || !fs::exists(mimo)) GTEST_SKIP() << "tools/make_tiny_models.py and tools/make_draft_heads.py";
  auto host_model = load_model(target);
  ASSERT_TRUE(host_model.ok()) << host_model.status().to_string();
  ModelLoadOptions lo;
  lo.cpu_kernels = false;
  auto dev_model = load_model(target, lo);
  ASSERT_TRUE(dev_model.ok()) << dev_model.status().to_string();
  const ModelWeights& tw = host_model->model->weights();
  const ModelWeights& dw = dev_model->model->weights();
  ASSERT_EQ(dw.linear(dw.output).cpu, nullptr);
  auto host_head = load_mimo_mtp_head(mimo, host_model->config, tw.token_embd, tw.linear(tw.output).cpu, 256);
  ASSERT_TRUE(host_head.ok()) << host_head.status().to_string();
  auto dev_head = load_mimo_mtp_head(mimo, dev_model->config, dw.token_embd, nullptr, 256);
  ASSERT_TRUE(dev_head.ok()) << dev_head.status().to_string();
  ASSERT_EQ((*dev_head)->lm_head, nullptr);

  const KvCacheSpec spec = f32_cache(8);
  auto ex = make_cuda_executor(*dev_model->model, spec, f32_options(8, false));
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  ModelExecutor& e = **ex;
  int64_t calls = 0;
  DraftOutputHead device_head = [&](const float* x, int64_t m, float* logits) {
    ++calls;
    ASSERT_TRUE(e.output_logits(x, m, logits));
  };

  // The target's states over a prompt, from the CPU executor (both heads read the same rows).
  ThreadPool pool(2);
  const std::vector<float> feats = prompt_features(*host_model->model, spec, (*host_head)->capture_after, pool);
  const int32_t T = static_cast<int32_t>(kHeadPrompt.size());

  DraftHeadForward hf(**host_head, 8, kBlock, DType::kF32, pool);
  DraftHeadForward df(**dev_head, 8, kBlock, DType::kF32, pool, device_head);
  const int64_t Vd = (*host_head)->draft_vocab;
  test::DraftPassBuilder passes({1, 2, 3}, kBlock);
  passes.catch_up(kHeadPrompt, feats.data(), {T - 3, T - 2});
  std::vector<float> hidden;
  int compared = 0;
  for (int32_t s = 0; s < 4; ++s) {
    if (s > 0) {  // a chained one-row step from the host run's draft and hidden output
      hidden = test::last_row(hf.out_hidden());
      passes.chained(hf.drafts().back(), T - 2 + s, hidden.data());
    }
    hf.forward(passes.pass());
    df.forward(passes.pass());
    const int64_t m = static_cast<int64_t>(passes.pass().logits_rows.size());
    ASSERT_EQ(hf.logits().numel(), m * Vd);
    ASSERT_EQ(df.logits().numel(), m * Vd);
    const std::vector<float> hl = test::floats_of(hf.logits()), dl = test::floats_of(df.logits());
    const auto [lo_it, hi_it] = std::minmax_element(hl.begin(), hl.end());
    const double range = static_cast<double>(*hi_it) - *lo_it, diff = max_abs_diff(hl, dl);
    EXPECT_LE(diff, 1e-4 * range) << "step " << s;
    compared += expect_same_drafts(hl, Vd, hf.drafts(), df.drafts(), 2e-4 * range, fmt::format("step {}", s));
    std::printf("[mtp-device-head] step %d: max|device - host| logits %.2e of range %.2e\n", s, diff, range);
  }
  EXPECT_EQ(calls, 4);
  EXPECT_GE(compared, 3);
}

// The device runner of a head (ModelExecutor::make_draft_head_runner: the head's passes in CUDA step
// ops, its cache in device memory) against the host's DraftHeadForward on the same passes (a
// catch-up pass of a prompt's captured rows with two logits rows, then three chained one-row steps
// fed with the host run's draft and hidden output), f32 compute: logits within 1e-3 x range, hidden
// outputs within 1e-3 x max|h|, the same drafts wherever the host's top two logits are further
// apart than 2e-3 x range. The EAGLE-3 head with a draft vocabulary (d2t) on the tiny llama, the
// MTP module (the target's output head) on the tiny qwen2; batch-invariant mode off and on.
TEST(CudaDraftHeads, DeviceRunnerMatchesTheHostHead) {
  PAGODA_REQUIRE_GPU();
  struct HeadCase {
    std::string target, head;
    bool mtp;
  };
  const std::vector<HeadCase> heads = {
      {test::models_dir() + "/tiny/llama3/model-f32.gguf", test::models_dir() + "/tiny/eagle3-llama3", false},
      {test::models_dir() + "/tiny/qwen2/model-f32.gguf", test::models_dir() + "/tiny/mimo-mtp", true}};
  for (const HeadCase& hc : heads) {
    if (!fs::exists(hc.target) || !fs::exists(hc.head)) GTEST_SKIP() << "tools/make_tiny_models.py and tools/make_draft_heads.py";
    for (bool invariant : {false, true}) {
      SCOPED_TRACE(hc.head + (invariant ? " batch-invariant" : ""));
      auto host_model = load_model(hc.target);
      ASSERT_TRUE(host_model.ok()) << host_model.status().to_string();
      ModelLoadOptions lo;
      lo.cpu_kernels = false;
      auto dev_model = load_model(hc.target, lo);
      ASSERT_TRUE(dev_model.ok()) << dev_model.status().to_string();
      const ModelWeights& tw = host_model->model->weights();
      auto head = hc.mtp ? load_mimo_mtp_head(hc.head, host_model->config, tw.token_embd, tw.linear(tw.output).cpu, 256)
                         : load_eagle3_head(hc.head, host_model->config, tw.token_embd, 256);
      ASSERT_TRUE(head.ok()) << head.status().to_string();
      const DraftHead& h = **head;
      const KvCacheSpec spec = f32_cache(8);
      auto ex = make_cuda_executor(*dev_model->model, spec, f32_options(8, invariant));
      ASSERT_TRUE(ex.ok()) << ex.status().to_string();
      std::string why;
      std::unique_ptr<DraftHeadRunner> dev = (*ex)->make_draft_head_runner(h, 8, kBlock, why);
      ASSERT_NE(dev, nullptr) << why;
      ThreadPool pool(2);
      DraftHeadForward host(h, 8, kBlock, DType::kF32, pool);

      const std::vector<float> feats = prompt_features(*host_model->model, spec, h.capture_after, pool);
      ASSERT_FALSE(feats.empty());
      const int32_t T = static_cast<int32_t>(kHeadPrompt.size());
      const int64_t Vd = h.draft_vocab, D = h.config.hidden_size;
      test::DraftPassBuilder passes({1, 2, 3}, kBlock);
      passes.catch_up(kHeadPrompt, feats.data(), {T - 3, T - 2});
      std::vector<float> hidden;
      int compared = 0;
      for (int s = 0; s < 4; ++s) {
        if (s > 0) {
          hidden = test::last_row(host.out_hidden());
          passes.chained(host.drafts().back(), T - 2 + s, hidden.data());
        }
        host.forward(passes.pass());
        dev->forward(passes.pass());
        const int64_t m = static_cast<int64_t>(passes.pass().logits_rows.size());
        ASSERT_EQ(dev->logits().dim(0), m);
        ASSERT_EQ(dev->logits().dim(1), Vd);
        ASSERT_EQ(dev->out_hidden().dim(0), m);
        ASSERT_EQ(dev->out_hidden().dim(1), D);
        const std::vector<float> hl = test::floats_of(host.logits()), dl = test::floats_of(dev->logits());
        const std::vector<float> hh = test::floats_of(host.out_hidden()), dh = test::floats_of(dev->out_hidden());
        const auto [lo_it, hi_it] = std::minmax_element(hl.begin(), hl.end());
        const double range = static_cast<double>(*hi_it) - *lo_it;
        const double ldiff = max_abs_diff(hl, dl), hdiff = max_abs_diff(hh, dh), hmax = std::max(1.0, max_abs(hh));
        EXPECT_LE(ldiff, 1e-3 * range) << "pass " << s;
        EXPECT_LE(hdiff, 1e-3 * hmax) << "pass " << s;
        compared += expect_same_drafts(hl, Vd, host.drafts(), dev->drafts(), 2e-3 * range, fmt::format("pass {}", s));
        std::printf("[device-head] %s pass %d: max|device - host| logits %.2e of range %.2e, hidden %.2e of %.2e\n",
                    hc.head.c_str(), s, ldiff, range, hdiff, hmax);
      }
      EXPECT_GE(compared, 3);
    }
  }
}

}  // namespace
}  // namespace pagoda
