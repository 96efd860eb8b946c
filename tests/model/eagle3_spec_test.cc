// Draft heads (model/draft_head.h, engine/draft_head_proposer.h): EAGLE-3 heads and a MiMo MTP
// module, random-weight, from tools/make_draft_heads.py (models/tiny/eagle3-*, mimo-mtp*, made by
// scripts/make_test_models.sh) on the tiny llama and qwen2: the head's draft logits against an independent numpy reference
// (tests/model/eagle3_reference.py, which also checks the target's hidden-state capture); clear
// errors for malformed heads and checkpoints; an MTP module through an outside output head; the target distribution kept when sampling (chi-square
// through the engine). Greedy identity with and without EAGLE-3 at several batch sizes and under
// preemption is in spec_decode_engine_test.cc with the other proposers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/draft_head_proposer.h"
#include "engine/engine_config.h"
#include "engine/engine_core.h"
#include "draft_head_test_util.h"
#include "engine_test_util.h"
#include "model/draft_head.h"
#include "model/model_loader.h"
#include "ops/linear.h"
#include "runtime/draft_head_device_memory.h"
#include "runtime/draft_head_forward.h"
#include "runtime/memory_plan.h"
#include "runtime/model_executor.h"
#include "test_paths.h"

namespace pagoda {
namespace {

std::string tiny(const std::string& name) { return test::models_dir() + "/tiny/" + name; }

template <class T>
void write_raw(const std::string& path, const T* data, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n * sizeof(T)));
}

TEST(Eagle3Head, DraftLogitsMatchAnIndependentNumpyReference) {
  const std::string root = test::testdata_dir() + "/..";
  const std::string python = root + "/.venv-test/bin/python";
  ASSERT_TRUE(std::filesystem::exists(python)) << python << " (scripts/setup_python.sh)";
  struct Case {
    std::string head, target;
  };
  for (const Case& hc : {Case{"eagle3-llama3", "llama3"}, Case{"eagle3-llama3-full", "llama3"}, Case{"mimo-mtp", "qwen2"}}) {
    const std::string& head_name = hc.head;
    SCOPED_TRACE(head_name);
    auto target = load_model(tiny(hc.target));
    ASSERT_TRUE(target.ok()) << target.status().to_string();
    const ModelWeights& tw = target->model->weights();
    auto head = head_name == "mimo-mtp"
                    ? load_mimo_mtp_head(tiny(head_name), target->config, tw.token_embd, tw.linear(tw.output).cpu, 256)
                    : load_eagle3_head(tiny(head_name), target->config, tw.token_embd, 256);
    ASSERT_TRUE(head.ok()) << head.status().to_string();
    const DraftHead& h = **head;

    // The target over a prompt, capturing the head's layers at every position.
    ThreadPool pool(2);
    KvCacheSpec ks;
    ks.num_blocks = 8;
    ks.block_size = 16;
    ks.dtype = DType::kF32;
    auto ex = make_cpu_executor(*target->model, ks, pool);
    ASSERT_TRUE(ex->set_hidden_capture(h.capture_after));
    const std::vector<int32_t> prompt = {1, 17, 300, 45, 9, 211, 77, 500, 3, 128, 64, 256, 33, 411, 2, 90, 12, 7};
    const int32_t T = static_cast<int32_t>(prompt.size());
    ForwardBatch b;
    b.add_sequence(prompt, T, {1, 2}, 16, true, true);
    const Tensor& target_logits = ex->forward(b);
    const Tensor* feats = ex->captured_hidden();
    ASSERT_NE(feats, nullptr);
    ASSERT_EQ(feats->dim(0), T);
    ASSERT_EQ(feats->dim(1), static_cast<int64_t>(h.capture_after.size()) * target->config.hidden_size);

    // The head: a catch-up pass over positions 0..T-2, then 3 chained one-row steps.
    DraftHeadForward hf(h, 8, 16, DType::kF32, pool);
    test::DraftPassBuilder passes({1, 2, 3}, 16);
    hf.forward(passes.catch_up(prompt, feats->data_as<const float>(), {T - 2}));
    std::vector<float> logits = test::floats_of(hf.logits());
    std::vector<int32_t> drafts = {hf.drafts()[0]}, chain;
    std::vector<float> hidden = test::last_row(hf.out_hidden());
    for (int32_t s = 0; s < 3; ++s) {
      chain.push_back(drafts.back());
      hf.forward(passes.chained(drafts.back(), T - 1 + s, hidden.data()));
      const std::vector<float> step = test::floats_of(hf.logits());
      logits.insert(logits.end(), step.begin(), step.end());
      drafts.push_back(hf.drafts()[0]);
      hidden = test::last_row(hf.out_hidden());
    }
    for (int32_t d : drafts) {
      EXPECT_GE(d, 0);
      EXPECT_LT(d, target->config.vocab_size);
    }

    const std::string dir = ::testing::TempDir() + "/eagle3_ref_" + head_name;
    std::filesystem::create_directories(dir);
    nlohmann::json meta;
    meta["prompt"] = prompt;
    meta["chain"] = chain;
    meta["capture_after"] = h.capture_after;
    meta["num_target_layers"] = target->config.num_layers;
    std::ofstream(dir + "/meta.json") << meta.dump();
    write_raw(dir + "/features.f32", feats->data_as<const float>(), static_cast<size_t>(feats->numel()));
    write_raw(dir + "/target_logits.f32", target_logits.data_as<const float>(), static_cast<size_t>(target_logits.numel()));
    write_raw(dir + "/logits.f32", logits.data(), logits.size());
    write_raw(dir + "/drafts.i32", drafts.data(), drafts.size());
    const std::string cmd = python + " " + root + "/tests/model/eagle3_reference.py " + dir + " " + tiny(head_name) + " " +
                            tiny(hc.target) + " 2>&1";
    FILE* pipe = popen(cmd.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string out;
    char buf[512];
    while (fgets(buf, sizeof buf, pipe)) out += buf;
    const int rc = pclose(pipe);
    EXPECT_EQ(rc, 0) << out;
    std::printf("%s", out.c_str());
  }
}

// An MTP module loaded without the target's host output head (as on CUDA, where the device holds
// it) drafts through the DraftOutputHead it is given: with one that runs the same CPU weight, the
// catch-up pass (two logits rows) and two chained steps give bit-identical logits and drafts to
// the module holding the weight, and the callback sees every logits row once per pass.
TEST(MtpModule, OutsideOutputHeadGivesTheSameDrafts) {
  auto target = load_model(tiny("qwen2"));
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  const ModelWeights& tw = target->model->weights();
  const std::shared_ptr<const LinearWeight> out = tw.linear(tw.output).cpu;
  ASSERT_NE(out, nullptr);
  auto own = load_mimo_mtp_head(tiny("mimo-mtp"), target->config, tw.token_embd, out, 256);
  ASSERT_TRUE(own.ok()) << own.status().to_string();
  auto bare = load_mimo_mtp_head(tiny("mimo-mtp"), target->config, tw.token_embd, nullptr, 256);
  ASSERT_TRUE(bare.ok()) << bare.status().to_string();
  ASSERT_EQ((*bare)->lm_head, nullptr);
  ThreadPool pool(2);
  EXPECT_DEATH(DraftHeadForward(**bare, 8, 16, DType::kF32, pool), "needs an output head");
  int64_t rows_seen = 0;
  DraftOutputHead outside = [&](const float* x, int64_t m, float* logits) {
    rows_seen += m;
    linear(*out, x, m, logits, pool);
  };
  DraftHeadForward a(**own, 8, 16, DType::kF32, pool);
  DraftHeadForward b(**bare, 8, 16, DType::kF32, pool, outside);

  KvCacheSpec ks;
  ks.num_blocks = 8;
  ks.block_size = 16;
  ks.dtype = DType::kF32;
  auto ex = make_cpu_executor(*target->model, ks, pool);
  ASSERT_TRUE(ex->set_hidden_capture((*own)->capture_after));
  const std::vector<int32_t> prompt = {1, 17, 300, 45, 9, 211, 77, 500, 3, 128, 64, 256};
  const int32_t T = static_cast<int32_t>(prompt.size());
  ForwardBatch fb;
  fb.add_sequence(prompt, T, {1, 2}, 16, true, true);
  ex->forward(fb);
  const Tensor* feats = ex->captured_hidden();
  ASSERT_NE(feats, nullptr);
  test::DraftPassBuilder passes({1, 2}, 16);
  passes.catch_up(prompt, feats->data_as<const float>(), {T - 3, T - 2});
  std::vector<float> hidden;
  for (int s = 0; s < 3; ++s) {
    if (s > 0) {
      hidden = test::last_row(a.out_hidden());
      passes.chained(a.drafts().back(), T - 2 + s, hidden.data());
    }
    const DraftHeadPass& pass = passes.pass();
    a.forward(pass);
    b.forward(pass);
    ASSERT_EQ(a.logits().numel(), b.logits().numel());
    EXPECT_EQ(0, std::memcmp(a.logits().data(), b.logits().data(), static_cast<size_t>(a.logits().nbytes()))) << "pass " << s;
    EXPECT_EQ(a.drafts(), b.drafts()) << "pass " << s;
    EXPECT_EQ(0, std::memcmp(a.out_hidden().data(), b.out_hidden().data(), static_cast<size_t>(a.out_hidden().nbytes())));
  }
  EXPECT_EQ(rows_seen, 2 + 1 + 1);
}

TEST(MtpModule, MalformedCheckpointsAreClearErrors) {
  const std::string model = tiny("qwen2/model-f32.gguf");
  const std::map<std::string, std::string> cases = {
      {"mimo-mtp-bad/no-mtp-layers", "no num_nextn_predict_layers >= 1"},
      {"mimo-mtp-bad/missing-input-proj", "tensor 'model.mtp_layers.0.input_proj.weight' is missing"},
      {"mimo-mtp-bad/q-proj-width", "'model.mtp_layers.0.self_attn.q_proj.weight' has shape [64, 32] but the config needs [64, 64]"},
      {"eagle3-llama3", "no num_nextn_predict_layers"},  // an EAGLE-3 head's directory is not a MiMo checkpoint
  };
  for (const auto& [name, want] : cases) {
    SCOPED_TRACE(name);
    EngineConfig c = test::base_engine_config(model);
    c.speculative.method = "mtp";
    c.speculative.model = tiny(name);
    auto e = Engine::create(c);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.status().message().find(want), std::string::npos) << e.status().to_string();
  }
  // Without a directory the target's own is read: a GGUF file is not a checkpoint directory.
  EngineConfig c = test::base_engine_config(model);
  c.speculative.method = "mtp";
  auto e = Engine::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("MTP module"), std::string::npos) << e.status().to_string();
}

TEST(Eagle3Head, MalformedHeadsAreClearErrors) {
  const std::string model = tiny("llama3/model-f32.gguf");
  const std::map<std::string, std::string> cases = {
      {"missing-fc", "tensor 'fc.weight' is missing"},
      {"qkv-width", "'midlayer.self_attn.q_proj.weight' has shape [128, 128] but the config needs [128, 256]"},
      {"vocab-mismatch", "vocab_size 1000 differs from the target's 512"},
      {"lm-head-rows", "'lm_head.weight' has shape [200, 128] but the config needs [256, 128]"},
      {"d2t-out-of-range", "outside the vocabulary"},
      {"missing-d2t", "tensor 'd2t' is missing"},
      {"layer-out-of-range", "captured layer 7 is not a layer of the target"},
      {"two-layers", "num_hidden_layers 2"},
  };
  for (const auto& [name, want] : cases) {
    SCOPED_TRACE(name);
    EngineConfig c = test::base_engine_config(model);
    c.speculative.method = "eagle3";
    c.speculative.model = tiny("eagle3-bad/" + name);
    auto e = Engine::create(c);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.status().message().find(want), std::string::npos) << e.status().to_string();
    EXPECT_NE(e.status().message().find("EAGLE-3 head"), std::string::npos) << e.status().to_string();
  }
  // Not a directory of a head at all; no head path.
  {
    EngineConfig c = test::base_engine_config(model);
    c.speculative.method = "eagle3";
    c.speculative.model = tiny("llama3/model-f32.gguf");
    auto e = Engine::create(c);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.status().message().find("config.json"), std::string::npos) << e.status().to_string();
    c.speculative.model.clear();
    e = Engine::create(c);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.status().message().find("needs the EAGLE-3 head's directory"), std::string::npos) << e.status().to_string();
  }
}

// softmax(logits / temperature) of the target at the end of `ctx` (f64).
std::vector<double> target_probs(ModelExecutor& ex, const std::vector<int32_t>& ctx, double temperature) {
  ForwardBatch b;
  const int32_t n = static_cast<int32_t>(ctx.size());
  std::vector<int32_t> table;
  for (int32_t i = 0; i <= n / 16; ++i) table.push_back(i + 1);
  b.add_sequence(ctx, n, table, 16);
  const Tensor& logits = ex.forward(b);
  const int64_t V = logits.dim(1);
  std::vector<double> p(static_cast<size_t>(V));
  double mx = -1e300, z = 0;
  for (int64_t v = 0; v < V; ++v) mx = std::max(mx, logits.data_as<const float>()[v] / temperature);
  for (int64_t v = 0; v < V; ++v) z += p[v] = std::exp(logits.data_as<const float>()[v] / temperature - mx);
  for (double& x : p) x /= z;
  return p;
}

// Sampling through EAGLE-3 drafts keeps the target distribution: many seeded requests of three
// tokens; the second token is verified against the echo head's draft (the target's greedy token,
// so both acceptance and rejection are common) by the rejection rule (drafts
// are capped so that all accepted cannot pass max_tokens: one draft after the first token). Given
// the most frequent first token, the second's counts are compared with the target's
// softmax(logits / temperature) by chi-square. The prompt and temperature are chosen (from the
// target's own distributions, before any sampling) so that both the first token's mode and the
// second token's spread give enough samples per bin.
// DraftHeadProposer's runner factory (how a device runner gets in): a proposer whose passes run
// through a given DraftHeadRunner (here a counting wrapper of DraftHeadForward) drafts exactly what
// the default proposer drafts from the same target rows (two requests: a catch-up pass over their
// prompts and chained drafts, then one more verified token), and every pass went through it.
TEST(Eagle3Spec, ARunnerFactoryTakesThePasses) {
  auto target = load_model(tiny("llama3/model-f32.gguf"));
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  const ModelWeights& tw = target->model->weights();
  auto load = [&] {
    auto h = load_eagle3_head(tiny("eagle3-llama3"), target->config, tw.token_embd, 256);
    EXPECT_TRUE(h.ok()) << h.status().to_string();
    return std::move(*h);
  };
  struct Counting final : DraftHeadRunner {
    DraftHeadForward inner;
    int* passes;
    Counting(const DraftHead& h, ThreadPool& pool, int* n) : inner(h, 64, 16, DType::kF32, pool), passes(n) {}
    void forward(const DraftHeadPass& p) override {
      ++*passes;
      inner.forward(p);
    }
    const Tensor& logits() const override { return inner.logits(); }
    const std::vector<int32_t>& drafts() const override { return inner.drafts(); }
    const Tensor& out_hidden() const override { return inner.out_hidden(); }
  };
  ThreadPool pool(2);
  int passes = 0;
  DraftHeadProposer plain(load(), 64, 16, DType::kF32, 0.1, pool);
  DraftHeadProposer custom(load(), 64, 16, DType::kF32, 0.1, pool, 1 << 30, 1 << 30, {},
                           [&](const DraftHead& h) { return std::make_unique<Counting>(h, pool, &passes); });
  EXPECT_FALSE(plain.device_runner());
  EXPECT_TRUE(custom.device_runner());

  KvCacheSpec ks;
  ks.num_blocks = 16;
  ks.block_size = 16;
  ks.dtype = DType::kF32;
  auto ex = make_cpu_executor(*target->model, ks, pool);
  ASSERT_TRUE(ex->set_hidden_capture(plain.hidden_layers()));
  const std::string ids[2] = {"a", "b"};
  std::vector<int32_t> toks[2] = {{1, 17, 300, 45, 9, 211, 77, 500, 3, 128}, {5, 6, 7, 8, 9, 10, 11}};
  ForwardBatch b;
  b.add_sequence(toks[0], static_cast<int32_t>(toks[0].size()), {1}, 16, true, true);
  b.add_sequence(toks[1], static_cast<int32_t>(toks[1].size()), {5}, 16, true, true);
  ex->forward(b);
  const Tensor* rows = ex->captured_hidden();
  ASSERT_NE(rows, nullptr);
  const int64_t W = rows->dim(1);
  for (int round = 0; round < 2; ++round) {
    // The target's rows up to the last verified position but one (its token pairs with the last).
    std::vector<HiddenRows> hr;
    int64_t row0 = 0;
    for (int i = 0; i < 2; ++i) {
      const int32_t n = static_cast<int32_t>(toks[i].size());
      HiddenRows h;
      h.id = &ids[i];
      h.first_position = round == 0 ? 0 : n - 1;
      h.num_rows = round == 0 ? n - 1 : 1;
      h.rows = rows->data_as<const float>() + (round == 0 ? row0 : row0 + n - 1) * W;
      hr.push_back(h);
      row0 += n;
    }
    plain.observe_hidden(hr, W);
    custom.observe_hidden(hr, W);
    std::vector<ProposeRequest> reqs(2);
    std::vector<int32_t> verified[2];  // round 1: one more token verified after the prompt
    for (int i = 0; i < 2; ++i) {
      verified[i] = toks[i];
      if (round == 1) verified[i].push_back(42);
      reqs[static_cast<size_t>(i)].id = &ids[i];
      reqs[static_cast<size_t>(i)].tokens = verified[i];
      reqs[static_cast<size_t>(i)].max_drafts = 3;
    }
    std::vector<std::vector<int32_t>> da, db;
    plain.propose(reqs, da);
    custom.propose(reqs, db);
    EXPECT_EQ(da, db) << "round " << round;
    ASSERT_EQ(da.size(), 2u);
    EXPECT_EQ(da[0].size(), 3u) << "round " << round;
  }
  EXPECT_GE(passes, 2 * 3);  // each round: a catch-up pass and two chained ones
}

// --spec-device-head (SpeculativeConfig::device_head): only for eagle3 / mtp, and only on a CUDA
// target; both refusals are clear errors.
TEST(Eagle3Spec, DeviceHeadIsRefusedWhereItCannotApply) {
  EngineConfig c = test::base_engine_config(tiny("llama3/model-f32.gguf"));
  c.speculative.method = "ngram";
  c.speculative.device_head = true;
  auto e = Engine::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("device_head applies to the eagle3 and mtp heads"), std::string::npos)
      << e.status().to_string();
  c.speculative.method = "eagle3";
  c.speculative.model = tiny("eagle3-llama3");
  c.device = "cpu";
  e = Engine::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("--spec-device-head needs a CUDA target"), std::string::npos) << e.status().to_string();
}

// --spec-device-head puts the head's weights, pass buffers and one-layer cache on the target's
// device: the memory plan counts them as it counts a draft model (engine/engine_core.h
// add_device_draft_head). The tiny EAGLE-3 head (D 128, 8 heads and 2 KV heads of 16, F 256,
// draft vocabulary 256, three captured layers) in bf16: its matrices from its config's shapes,
// its cache 2 x 2 x 16 x 2 bytes a token; the plan then holds fewer target blocks in the same KV
// budget, a head block for each, and the head's fixed bytes in its total.
TEST(Eagle3Spec, DeviceHeadCountsInTheMemoryPlan) {
  auto target = load_model(tiny("llama3/model-f32.gguf"));
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  const ModelWeights& tw = target->model->weights();
  auto head = load_eagle3_head(tiny("eagle3-llama3"), target->config, tw.token_embd, 256);
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  const DraftHead& h = **head;
  EngineConfig c = test::base_engine_config(tiny("llama3/model-f32.gguf"));
  c.speculative.method = "eagle3";
  c.speculative.num_speculative_tokens = 3;
  c.scheduler.max_num_seqs = 8;
  c.scheduler.max_num_batched_tokens = 256;

  const DraftHeadDeviceMemory m = device_draft_head_memory(h, tw.token_embd, DType::kBF16, c);
  const int64_t D = 128, Q = 8 * 16, KV = 2 * 16, F = 256, Dv = 256, Dt = target->config.hidden_size;
  const int64_t matrices = D * 3 * Dt + (Q + 2 * KV) * 2 * D + D * Q + 2 * F * D + D * F + Dv * D;
  int64_t vectors = 0;
  for (const Tensor* v : {&h.input_norm, &h.hidden_norm, &h.layer_norm, &h.post_norm, &h.final_norm, &h.target_norm, &h.qkv_bias})
    if (v->defined()) vectors += v->numel();
  EXPECT_GE(vectors, 3 * D);  // at least the embedding's, the hidden input's and the final norm
  const int64_t rope = 2 * 256 * (16 / 2);  // cos and sin of 256 positions
  EXPECT_EQ(m.weights, 2 * matrices + 4 * vectors + 4 * rope);  // the target's embedding is shared
  EXPECT_EQ(m.kv_bytes_per_token, 2 * 2 * 16 * 2);
  EXPECT_GT(m.pass_buffers, 256 * (Q + 2 * KV) * 4);  // 256 rows of q/k/v in f32 at least
  EngineConfig wide = c;
  wide.scheduler.max_num_batched_tokens = 512;
  EXPECT_GT(device_draft_head_memory(h, tw.token_embd, DType::kBF16, wide).pass_buffers, m.pass_buffers);
  const DraftHeadDeviceMemory own = draft_head_device_memory(h, DType::kBF16, false, 256, 8);
  EXPECT_EQ(own.weights, m.weights + target->config.vocab_size * D * 2);  // an embedding of its own

  MemoryPlanInput in = memory_plan_input(c, target->config, 1 << 20);
  in.kv_cache_memory = int64_t{8} << 20;
  auto plain = plan_memory(in);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  add_device_draft_head(in, m, c);
  auto with_head = plan_memory(in);
  ASSERT_TRUE(with_head.ok()) << with_head.status().to_string();
  const int64_t bs = c.block_size, lookahead = draft_lookahead_blocks(c);
  EXPECT_EQ(with_head->draft_fixed, m.weights + m.pass_buffers + (lookahead + 1) * bs * m.kv_bytes_per_token);
  EXPECT_EQ(with_head->draft_kv_cache, with_head->num_blocks * bs * m.kv_bytes_per_token);
  EXPECT_EQ(with_head->num_blocks, in.kv_cache_memory / (plain->block_bytes + bs * m.kv_bytes_per_token) - 1);
  EXPECT_LT(with_head->num_blocks, plain->num_blocks);
  EXPECT_EQ(with_head->total, plain->total - plain->kv_cache + with_head->kv_cache + with_head->draft_fixed +
                                  with_head->draft_kv_cache);
  EXPECT_NE(with_head->to_string().find("draft head (in the total)"), std::string::npos) << with_head->to_string();
}

TEST(Eagle3Spec, SamplingKeepsTheTargetDistribution) {
  const std::string model = tiny("llama3/model-f32.gguf");
  const int n = 6000;
  auto target = load_model(model);
  ASSERT_TRUE(target.ok());
  ThreadPool pool(2);
  KvCacheSpec ks;
  ks.num_blocks = 8;
  ks.block_size = 16;
  ks.dtype = DType::kF32;
  auto ex = make_cpu_executor(*target->model, ks, pool);
  std::vector<int32_t> prompt;
  double temperature = 0;
  int32_t mode = -1;
  std::vector<double> p2;
  int best_bins = 0;
  for (double t : {1.5, 2.0, 3.0})
    for (int i = 0; i < 40; ++i) {
      const std::vector<int32_t> cand = test::mixed_prompt(i + 1, target->config.vocab_size);
      const std::vector<double> p1 = target_probs(*ex, cand, t);
      const int32_t m = static_cast<int32_t>(std::max_element(p1.begin(), p1.end()) - p1.begin());
      std::vector<int32_t> ctx = cand;
      ctx.push_back(m);
      const std::vector<double> q = target_probs(*ex, ctx, t);
      int bins = 0;
      for (double x : q) bins += n * p1[m] * x >= 5;
      if (bins > best_bins) {
        best_bins = bins;
        prompt = cand;
        temperature = t;
        mode = m;
        p2 = q;
      }
    }
  ASSERT_GE(best_bins, 5) << "no prompt spreads the second token enough";

  EngineConfig c = test::base_engine_config(model);
  c.speculative.method = "eagle3";
  // The echo head drafts the target's greedy token: accepted with its probability, often.
  c.speculative.model = tiny("eagle3-llama3-echo");
  c.speculative.disable_by_batch_size = 0;
  c.scheduler.max_num_seqs = 256;
  auto e = Engine::create(c);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < n; ++i) {
    GenerateRequest g;
    g.prompt_ids = prompt;
    g.sampling.temperature = static_cast<float>(temperature);
    g.sampling.seed = static_cast<uint64_t>(i) * 7919 + 1;
    g.stop.max_tokens = 3;
    g.stop.ignore_eos = true;
    auto s = (*e)->submit(std::move(g));
    ASSERT_TRUE(s.ok());
    streams.push_back(*s);
  }
  std::map<int32_t, int> second;  // second token -> count, given first == mode
  int given = 0;
  for (auto& s : streams) {
    std::vector<int32_t> t;
    while (auto o = s->next())
      for (const auto& tok : o->tokens) t.push_back(tok.token);
    ASSERT_EQ(t.size(), 3u);
    if (t[0] != mode) continue;
    ++given;
    ++second[t[1]];
  }
  const EngineStats st = (*e)->stats();
  EXPECT_GT(st.spec_num_draft_tokens, n / 2);  // most second tokens were verified drafts
  EXPECT_GT(st.spec_num_accepted_tokens, n / 20);  // and both outcomes of the rule are common
  EXPECT_LT(st.spec_num_accepted_tokens, st.spec_num_draft_tokens - n / 20);
  ASSERT_GT(given, n / 20);
  // Bins with an expected count >= 5; the rest lumped into one.
  double chi2 = 0, rest_exp = 0;
  int rest_obs = 0, bins = 0;
  for (size_t v = 0; v < p2.size(); ++v) {
    const double expct = p2[v] * given;
    const auto it = second.find(static_cast<int32_t>(v));
    const int o = it == second.end() ? 0 : it->second;
    if (expct >= 5) {
      chi2 += (o - expct) * (o - expct) / expct;
      ++bins;
    } else {
      rest_exp += expct;
      rest_obs += o;
    }
  }
  if (rest_exp > 0) {
    chi2 += (rest_obs - rest_exp) * (rest_obs - rest_exp) / rest_exp;
    ++bins;
  }
  const double df = bins - 1;
  ASSERT_GE(df, 3) << "too few bins";
  // The 1e-6 upper quantile of chi-square(df) (Wilson-Hilferty, z = 4.75).
  const double a = 2.0 / (9.0 * df), limit = df * std::pow(1 - a + 4.75 * std::sqrt(a), 3);
  EXPECT_LT(chi2, limit) << "df " << df << ", " << given << " samples";
  std::printf("[eagle3 sampling] temperature %.1f, first token %d in %d of %d; chi2 %.1f on %.0f df (limit %.1f); "
              "drafts %lld, accepted %lld\n",
              temperature, mode, given, n, chi2, df, limit, static_cast<long long>(st.spec_num_draft_tokens),
              static_cast<long long>(st.spec_num_accepted_tokens));
}

}  // namespace
}  // namespace pagoda
