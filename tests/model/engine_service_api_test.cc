// The Engine's helpers for the service layer (engine.h): tokenize / detokenize / token_piece,
// the chat template, model_name, the step observer, and RequestStream's asynchronous side
// (set_notify + try_next), on real models.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "engine/engine.h"
#include "engine/engine_config.h"
#include "test_paths.h"

namespace pagoda {
namespace {

std::unique_ptr<Engine> make_engine(const std::string& model) {
  EngineConfig cfg;
  cfg.model = model;
  cfg.threads = 1;
  cfg.max_model_len = 256;
  cfg.scheduler.max_num_seqs = 4;
  auto e = Engine::create(cfg);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(*e) : nullptr;
}

TEST(EngineServiceApi, TokenizerHelpersAndName) {
  auto e = make_engine(test::stories260k_gguf());
  ASSERT_TRUE(e);
  EXPECT_EQ(e->model_name(), "stories260K");
  const auto with_bos = e->tokenize("Once upon a time", true);
  const auto without = e->tokenize("Once upon a time", false);
  ASSERT_EQ(with_bos.size(), without.size() + 1);
  EXPECT_EQ(e->detokenize(without), "Once upon a time");
  EXPECT_EQ(e->detokenize(with_bos, /*skip_special=*/true), "Once upon a time");
  std::string pieces;
  for (size_t i = 0; i < without.size(); ++i) pieces += e->token_piece(without[i]);
  EXPECT_EQ(pieces, " Once upon a time");  // pieces carry their leading space
  EXPECT_FALSE(e->has_chat_template());
  auto r = e->apply_chat_template(nlohmann::ordered_json::array({{{"role", "user"}, {"content", "hi"}}}), true);
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
}

TEST(EngineServiceApi, ChatTemplate) {
  const std::string smollm = test::smollm2_path();
  if (smollm.empty()) GTEST_SKIP() << "SmolLM2 not fetched (scripts/fetch_models.sh)";
  auto e = make_engine(smollm);
  ASSERT_TRUE(e);
  ASSERT_TRUE(e->has_chat_template());
  auto text = e->apply_chat_template(nlohmann::ordered_json::array({{{"role", "user"}, {"content", "Hello"}}}), true);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_NE(text->find("<|im_start|>user\nHello<|im_end|>"), std::string::npos) << *text;
  EXPECT_TRUE(text->ends_with("<|im_start|>assistant\n")) << *text;
  // Special-token text is parsed into single tokens only when asked.
  const auto ids = e->tokenize(*text, false, /*parse_special=*/true);
  const auto literal = e->tokenize(*text, false, /*parse_special=*/false);
  EXPECT_LT(ids.size(), literal.size());
}

TEST(EngineServiceApi, StepObserverAndAsyncStream) {
  auto e = make_engine(test::stories260k_gguf());
  ASSERT_TRUE(e);
  std::atomic<int64_t> step_tokens{0}, steps{0};
  e->set_step_observer([&](int64_t n) {
    step_tokens += n;
    ++steps;
  });
  GenerateRequest g;
  g.prompt = "Once upon a time";
  g.sampling.temperature = 0;
  g.stop.max_tokens = 8;
  g.stop.ignore_eos = true;
  auto s = e->submit(g);
  ASSERT_TRUE(s.ok());
  std::atomic<int> notified{0};
  (*s)->set_notify([&] { ++notified; });
  // Drain without blocking, as the server does.
  int outputs = 0, tokens = 0;
  bool finished = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!finished && std::chrono::steady_clock::now() < deadline) {
    while (auto out = (*s)->try_next()) {
      ++outputs;
      tokens += static_cast<int>(out->tokens.size());
      finished = finished || out->finished;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(finished);
  EXPECT_EQ(tokens, 8);
  EXPECT_TRUE((*s)->done());
  EXPECT_FALSE((*s)->try_next());
  EXPECT_GE(notified.load(), 1);  // outputs queued before set_notify are signalled once at once
  EXPECT_LE(notified.load(), outputs);
  // Every step ran the prompt or a decode token: prompt (6 with BOS) + 7 decode steps.
  const int64_t prompt = static_cast<int64_t>(e->tokenize("Once upon a time", true).size());
  EXPECT_EQ(step_tokens.load(), prompt + 7);
  EXPECT_EQ(steps.load(), 8);
  e->set_step_observer(nullptr);
}

}  // namespace
}  // namespace pagoda
